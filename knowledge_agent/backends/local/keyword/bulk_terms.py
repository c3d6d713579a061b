"""A segment's postings file and terms table, encoded from arrays in one pass.

The bytes are Whoosh 3's (``whoosh.codec.whoosh3``), so its own readers read them:

* **postings** (``.pst``): per term the tag ``W3Bl``, then blocks of up to 128 postings, each
  a big-endian int32 length (negative for the term's last block), a pickled info tuple
  ``(count, last docnum, max weight, compression 0, min length byte, max length byte)`` and a
  pickled data tuple ``(docnum deltas, weights, values)``: weights ``None`` when all are 1,
  one float when all are equal, else a tuple (of ints when all are whole, as frequencies
  are: readers take them as the numbers they are); values the frequencies as big-endian
  uint32 bytes (``Frequency``) or ``None`` (``Existence``). Whoosh writes these with
  ``pickle.dumps`` a block at a time; here every opcode of every block is scattered into
  one buffer with numpy (``MARK`` … ``TUPLE`` tuples, the smallest integer opcode,
  ``BINFLOAT``, ``BINBYTES``), which any unpickler reads as the same tuples.
* **terms** (``.trm``): Whoosh's ordered hash file (``filetables.OrderedHashWriter``) of
  ``field number + term bytes`` → ``W3TermInfo`` bytes, in key order, with its 256 hash
  tables (CRC-32 keys, hash type 1, which the reader takes from the header), directory,
  pickled extras (``fieldmap``, the index array's type and length) and position index.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from whoosh.util.numeric import _length_byte_cache

from knowledge_agent.search.analysed_batch import gather

__all__ = [
    "BLOCK_LIMIT",
    "TERM_INFO",
    "FieldPostings",
    "TermTable",
    "encode_postings",
    "encode_term_tables",
    "encode_terms",
    "length_bytes",
]

BLOCK_LIMIT = 128  # postings per block: W3Codec's default blocklimit
_MAGIC = np.frombuffer(b"W3Bl", np.uint8)
_LENGTH_CACHE = np.asarray(_length_byte_cache, np.int64)
_BYTE_CAP = 106374  # lengths from here on are byte 255 (whoosh.util.numeric.length_to_byte)

# Pickle opcodes.
_PROTO, _MARK, _TUPLE, _TUPLE3, _STOP = 0x80, ord("("), ord("t"), 0x87, ord(".")
_NONE, _FLOAT, _BYTES = ord("N"), ord("G"), ord("B")
_INT1, _INT2, _INT4 = ord("K"), ord("M"), ord("J")

TERM_INFO = np.dtype(
    [
        ("flags", "u1"),
        ("weight", ">f4"),
        ("df", ">u4"),
        ("minlength", "u1"),
        ("maxlength", "u1"),
        ("maxweight", ">f4"),
        ("minid", ">u4"),
        ("maxid", ">u4"),
        ("offset", ">i8"),
        ("length", ">i4"),
    ]
)  # W3TermInfo.to_bytes of postings in the postings file: 35 bytes
_SLOT = np.dtype([("hash", ">u4"), ("position", ">i8")])
_DIRECTORY = np.dtype([("position", ">i8"), ("slots", ">i4")])
_HEADER = b"HSH3" + bytes([1]) + bytes(8)  # magic, hash type 1 (CRC-32), unused
_INDEX_TYPES = (("H", 2**16), ("i", 2**31), ("I", 2**32))  # then "q"


def length_bytes(lengths: np.ndarray) -> np.ndarray:
    """``whoosh.util.numeric.length_to_byte`` of every length (0 stays 0)."""
    found = np.searchsorted(_LENGTH_CACHE, lengths, side="left")
    return np.where(lengths >= _BYTE_CAP, 255, found).astype(np.uint8)


@dataclass(eq=False)
class FieldPostings:
    """One field's postings, ordered by term bytes then docnum."""

    terms: Sequence[bytes]  # distinct, ascending
    starts: np.ndarray  # int64, len(terms) + 1: term t's postings are starts[t]:starts[t + 1]
    docs: np.ndarray  # int64 docnums
    weights: np.ndarray  # float32, as Whoosh keeps them
    freqs: np.ndarray | None  # frequencies stored as values (Frequency); None: no values
    doc_length_bytes: np.ndarray | None  # per posting, its document's length byte; None: unscored


def _int_size(values: np.ndarray) -> np.ndarray:
    """Bytes of each non-negative int pickled: BININT1, BININT2 or BININT."""
    sizes = np.full(values.shape, 2, np.int64)
    sizes[values >= 256] = 3
    sizes[values >= 65536] = 5
    return sizes


def _scatter(out: np.ndarray, pos: np.ndarray, raw: np.ndarray) -> None:
    """Write row i of ``raw`` (bytes, n × k) at ``out[pos[i]:pos[i] + k]``."""
    if pos.size:
        out[pos[:, None] + np.arange(raw.shape[1])] = raw


def _put_ints(out: np.ndarray, pos: np.ndarray, values: np.ndarray) -> None:
    """Pickle non-negative ints (< 2**31) at ``pos``: BININT1, BININT2 or BININT."""
    values = values.astype(np.int64, copy=False)
    for opcode, width, mask in (
        (_INT1, 1, values < 256),
        (_INT2, 2, (values >= 256) & (values < 65536)),
        (_INT4, 4, values >= 65536),
    ):
        at = pos[mask]
        out[at] = opcode
        raw = values[mask].astype(f"<u{width}").view(np.uint8).reshape(-1, width)
        _scatter(out, at + 1, raw)


def _put_floats(out: np.ndarray, pos: np.ndarray, values: np.ndarray) -> None:
    out[pos] = _FLOAT
    _scatter(out, pos + 1, values.astype(">f8").view(np.uint8).reshape(-1, 8))


def _joined(
    fields: Sequence[FieldPostings],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fields' postings back to back: (term starts, docnums, weights, frequencies,
    whether each term's postings store values, document length bytes)."""
    bases = np.cumsum([0] + [f.docs.size for f in fields[:-1]])
    starts = np.concatenate(
        [[0]] + [f.starts[1:] + base for f, base in zip(fields, bases, strict=True)]
    )
    freqs = [np.zeros(f.docs.size, np.int64) if f.freqs is None else f.freqs for f in fields]
    lengths = [
        np.zeros(f.docs.size, np.uint8) if f.doc_length_bytes is None else f.doc_length_bytes
        for f in fields
    ]
    valued = [np.full(len(f.terms), f.freqs is not None) for f in fields]
    return (
        starts.astype(np.int64),
        np.concatenate([f.docs for f in fields]),
        np.concatenate([f.weights for f in fields]),
        np.concatenate(freqs),
        np.concatenate(valued),
        np.concatenate(lengths),
    )


def encode_postings(fields: Sequence[FieldPostings]) -> tuple[np.ndarray, np.ndarray]:
    """(postings file bytes, term info values) of the fields' postings, in order: all
    fields in one pass, which is what keeps a small batch's write cheap."""
    if not fields:
        return np.zeros(0, np.uint8), np.zeros(0, TERM_INFO)
    starts, docs, weights, all_freqs, valued_term, doc_length_bytes = _joined(fields)
    n_terms = starts.size - 1
    if docs.size == 0:
        return np.zeros(0, np.uint8), np.zeros(0, TERM_INFO)
    df = np.diff(starts)
    n_blocks = -(-df // BLOCK_LIMIT)
    term = np.repeat(np.arange(n_terms), n_blocks)
    first_block = np.cumsum(n_blocks) - n_blocks
    local = np.arange(term.size) - first_block[term]
    bstart = starts[term] + local * BLOCK_LIMIT
    bcount = np.minimum(bstart + BLOCK_LIMIT, starts[term + 1]) - bstart
    last = local == n_blocks[term] - 1
    block_of = np.repeat(np.arange(term.size), bcount)
    at_in_block = np.arange(docs.size) - bstart[block_of]
    valued = valued_term[term]

    deltas = np.diff(docs, prepend=0)
    deltas[bstart] = docs[bstart]  # each block's ids are delta-coded from 0
    last_doc = docs[bstart + bcount - 1]
    maxw = np.maximum.reduceat(weights, bstart)
    minw = np.minimum.reduceat(weights, bstart)
    minlen = np.minimum.reduceat(doc_length_bytes, bstart).astype(np.int64)
    maxlen = np.maximum.reduceat(doc_length_bytes, bstart).astype(np.int64)
    ones = (minw == 1) & (maxw == 1)
    single = (minw == maxw) & ~ones
    many = ~(ones | single)
    # A tuple of whole weights (frequencies) is pickled as ints: 2 bytes a posting, not 9.
    whole = (weights == np.floor(weights)) & (weights >= 0) & (weights < 2**31)
    as_ints = many & np.minimum.reduceat(whole, bstart).astype(bool)
    weight_size = np.where(as_ints[block_of], _int_size(weights.astype(np.int64)), 9)
    weight_before = np.cumsum(weight_size) - weight_size

    id_size = _int_size(deltas)
    id_before = np.cumsum(id_size) - id_size
    ids_bytes = np.add.reduceat(id_size, bstart)
    listed_bytes = 2 + np.add.reduceat(weight_size, bstart)
    weight_bytes = np.where(ones, 1, np.where(single, 9, listed_bytes))
    value_bytes = np.where(valued, 5 + 4 * bcount, 1)
    info_bytes = 3 + _int_size(bcount) + _int_size(last_doc) + 9 + 2 + 2
    info_bytes += _int_size(minlen) + _int_size(maxlen)
    data_bytes = 3 + ids_bytes + 1 + weight_bytes + value_bytes + 2
    block_bytes = 4 * (local == 0) + 4 + info_bytes + data_bytes
    where = np.cumsum(block_bytes) - block_bytes
    out = np.zeros(int(block_bytes.sum()), np.uint8)

    _scatter(out, where[local == 0], np.tile(_MAGIC, (int(n_terms), 1)))
    p = where + 4 * (local == 0)
    length = np.where(last, -1, 1) * (info_bytes + data_bytes)
    _scatter(out, p, length.astype(">i4").view(np.uint8).reshape(-1, 4))
    p = p + 4
    out[p], out[p + 1], out[p + 2] = _PROTO, 2, _MARK
    p = p + 3
    for value in (bcount, last_doc):
        _put_ints(out, p, value)
        p = p + _int_size(value)
    _put_floats(out, p, maxw)
    out[p + 9], out[p + 10] = _INT1, 0  # no compression
    p = p + 11
    for value in (minlen, maxlen):
        _put_ints(out, p, value)
        p = p + _int_size(value)
    out[p], out[p + 1] = _TUPLE, _STOP
    p = p + 2
    out[p], out[p + 1], out[p + 2] = _PROTO, 2, _MARK
    p = p + 3
    _put_ints(out, p[block_of] + id_before - id_before[bstart][block_of], deltas)
    p = p + ids_bytes
    out[p] = _TUPLE
    p = p + 1
    out[p[ones]] = _NONE
    _put_floats(out, p[single], minw[single])
    out[p[many]] = _MARK
    at = p[block_of] + 1 + weight_before - weight_before[bstart][block_of]
    ints, floats = as_ints[block_of], (many & ~as_ints)[block_of]
    _put_ints(out, at[ints], weights[ints].astype(np.int64))
    _put_floats(out, at[floats], weights[floats])
    out[(p + weight_bytes - 1)[many]] = _TUPLE
    p = p + weight_bytes
    out[p[~valued]] = _NONE
    out[p[valued]] = _BYTES
    _scatter(out, p[valued] + 1, (4 * bcount[valued]).astype("<u4").view(np.uint8).reshape(-1, 4))
    stored = valued[block_of]
    raw = all_freqs[stored].astype(">u4").view(np.uint8).reshape(-1, 4)
    _scatter(out, (p[block_of] + 5 + 4 * at_in_block)[stored], raw)
    p = p + value_bytes
    out[p], out[p + 1] = _TUPLE3, _STOP

    info = np.zeros(n_terms, TERM_INFO)
    term_start = where[first_block]
    final = first_block + n_blocks - 1
    info["weight"] = np.add.reduceat(weights.astype(np.float64), starts[:-1])
    info["df"] = df
    info["minlength"] = np.minimum.reduceat(minlen, first_block)
    info["maxlength"] = np.maximum.reduceat(maxlen, first_block)
    info["maxweight"] = np.maximum.reduceat(maxw, first_block)
    info["minid"] = docs[starts[:-1]]
    info["maxid"] = docs[starts[1:] - 1]
    info["offset"] = term_start
    info["length"] = where[final] + block_bytes[final] - term_start
    return out, info


def _place(
    hashes: np.ndarray, group: np.ndarray | None = None, groups: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot of each key, slots per table, first slot of each table) of the 256 hash tables
    of each of ``groups`` files (``group``: each key's file; all in file 0 without it):
    table ``h & 255``, ``2 × keys`` slots, linear probing from ``(h >> 8) % slots``.

    A reader probes from a key's home slot to the first empty one, so a key may sit
    anywhere past its home as long as every slot between is taken. Keys are laid out by
    home: each at its home or just past the key before, ``slot = max(home, previous + 1)``,
    which is ``rank + running max(home - rank)``; the few pushed past a table's end take
    its free slots from the start, in order (the run to the end and every slot before
    each is taken)."""
    table = (hashes & 255).astype(np.int64)
    if group is not None:
        table += 256 * group
    slots = 2 * np.bincount(table, minlength=256 * groups).astype(np.int64)
    base = np.cumsum(slots) - slots
    home = (hashes >> 8).astype(np.int64) % np.maximum(slots[table], 1)
    n = hashes.size
    order = np.argsort(table << 32 | home, kind="stable")  # by table, then home, then key
    t, h = table[order], home[order]
    table_first = np.cumsum(slots // 2) - slots // 2  # each table's first key in ``order``
    rank = np.arange(n) - table_first[t]
    span = 2 * int(slots.max(initial=0)) + 1  # keeps each table's running max its own
    local = rank + np.maximum.accumulate(h - rank + t * span) - t * span
    slot = np.empty(n, np.int64)
    slot[order] = base[t] + local
    over = local >= slots[t]
    if over.any():  # the j-th key past a table's end takes its j-th free slot
        taken = np.zeros(int(slots.sum()), bool)
        taken[(base[t] + local)[~over]] = True
        free = np.flatnonzero(~taken)
        free_table = np.repeat(np.arange(slots.size), slots)[free]
        late = t[over]  # ascending: ``order`` is by table
        nth = np.arange(late.size) - np.searchsorted(late, late)
        slot[order[over]] = free[np.searchsorted(free_table, late) + nth]
    return slot, slots, base


TermTable = tuple[dict[str, int], Sequence[Sequence[bytes]], np.ndarray]
"""A terms table to encode: ``fieldmap``, each field's terms, their term infos."""


def encode_terms(
    fieldmap: dict[str, int], terms: Sequence[Sequence[bytes]], values: np.ndarray
) -> bytes:
    """The terms table: each field's ``terms`` (ascending, fields in ``fieldmap`` order) →
    the term infos :func:`encode_postings` gave. A key is the field number then the term."""
    return encode_term_tables([(fieldmap, terms, values)])[0]


def encode_term_tables(tables: Sequence[TermTable]) -> list[bytes]:
    """:func:`encode_terms` of several tables (of several segments) in one pass of numpy
    calls: the files laid out back to back, each with its own header, keys, hash tables and
    index, then cut apart."""
    n_files = len(tables)
    sizes = [sum(len(field) for field in terms) for _, terms, _ in tables]
    n = sum(sizes)
    file_of = np.repeat(np.arange(n_files), sizes)
    numbers = np.concatenate(
        [np.repeat(np.arange(len(terms)), [len(t) for t in terms]) for _, terms, _ in tables]
        + [np.zeros(0, np.int64)]
    )
    flat_terms = [term for _, terms, _ in tables for field in terms for term in field]
    key_len = 2 + np.fromiter(map(len, flat_terms), np.int64, n)
    record = 8 + key_len + TERM_INFO.itemsize
    # Each file: the header, then its records; ``where`` is a record's place in its file.
    data_bytes = np.bincount(file_of, weights=record, minlength=n_files).astype(np.int64)
    data_end = len(_HEADER) + data_bytes  # per file
    file_start = np.cumsum(data_end) - data_end
    earlier_files = np.cumsum(data_bytes) - data_bytes  # record bytes of the files before
    where = len(_HEADER) + np.cumsum(record) - record - earlier_files[file_of]
    first_key = np.cumsum(sizes) - sizes
    at = file_start[file_of] + where  # in the files laid out back to back
    out = np.zeros(int(data_end.sum()), np.uint8)
    header = np.frombuffer(_HEADER, np.uint8)
    out[(file_start[:, None] + np.arange(len(_HEADER))).ravel()] = np.tile(header, n_files)
    lengths = np.stack([key_len, np.full(n, TERM_INFO.itemsize)], 1).astype(">i4")
    _scatter(out, at, lengths.view(np.uint8).reshape(-1, 8))
    _scatter(out, at + 8, numbers.astype(">u2").view(np.uint8).reshape(-1, 2))
    flat = np.frombuffer(b"".join(flat_terms), np.uint8)
    out[gather(at + 10, key_len - 2)] = flat
    values = tables[0][2] if n_files == 1 else np.concatenate([v for _, _, v in tables])
    if values.dtype != TERM_INFO:  # (concatenating may give the fields native byte order)
        values = values.astype(TERM_INFO)
    _scatter(out, at + 8 + key_len, values.view(np.uint8).reshape(-1, TERM_INFO.itemsize))

    most = max((len(terms) for _, terms, _ in tables), default=0)
    prefixes = [zlib.crc32(number.to_bytes(2, "big")) for number in range(most)]
    hashes = np.fromiter(
        (
            zlib.crc32(term, prefixes[number])
            for _, terms, _ in tables
            for number, field in enumerate(terms)
            for term in field
        ),
        np.uint32,
        n,
    )
    slot, slots, base = _place(hashes, file_of, n_files)
    found = []
    for number, (fieldmap, _, _) in enumerate(tables):
        keys = slice(int(first_key[number]), int(first_key[number]) + sizes[number])
        own_slots = slots[256 * number : 256 * (number + 1)]
        first_slot = int(base[256 * number])
        table = np.zeros(int(own_slots.sum()), _SLOT)
        table["hash"][slot[keys] - first_slot] = hashes[keys]
        table["position"][slot[keys] - first_slot] = where[keys]
        directory = np.zeros(256, _DIRECTORY)
        end = int(data_end[number])
        directory["position"] = end + (base[256 * number : 256 * (number + 1)] - first_slot) * (
            _SLOT.itemsize
        )
        directory["slots"] = own_slots
        own_where = where[keys]
        largest = int(own_where.max()) if sizes[number] else 0
        # OrderedHashWriter's GrowableArray("H") of positions, widened as it grows.
        typecode = next((code for code, top in _INDEX_TYPES if largest < top), "q")
        extras = pickle.dumps(
            {"fieldmap": fieldmap, "indextype": typecode, "indexlen": sizes[number]},
            pickle.HIGHEST_PROTOCOL,
        )
        index = own_where.astype(">" + typecode).tobytes()
        tail = np.array([len(extras) + len(index)], ">i4").tobytes()
        start = int(file_start[number])
        found.append(
            b"".join(
                (
                    out[start : start + end].tobytes(),
                    table.tobytes(),
                    directory.tobytes(),
                    extras,
                    index,
                    tail,
                )
            )
        )
    return found
