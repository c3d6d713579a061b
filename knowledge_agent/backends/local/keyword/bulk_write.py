"""Writing a bulk segment's files from its :class:`DocumentBlock` arrays.

Per-document columns first (stored fields, length bytes, numeric columns), then every
indexed field's postings sorted by term bytes then docnum, encoded, and the terms table.

A field's postings are sorted and encoded a slice of its terms at a time, each slice about
:data:`PART_POSTINGS` postings: the terms of all parts are merged (they are each sorted),
cut into slices by their posting counts, and each part's rows for a slice are read only
then. A merge of eight large segments so holds one slice of postings in memory, not all of
them (Whoosh's own writer spilled its posting pool to disk for the same reason). A small
batch is one slice, and all its fields are encoded in one pass.

With ``compound`` the files go straight into the segment's compound file, laid out as
``CompoundStorage.assemble`` lays it out — the directory's position and length, the files
back to back, the pickled directory (name → offset, length, mtime) and options — so each
is written and synced once, not written, synced, copied and deleted.
"""

from __future__ import annotations

import itertools
import pickle
import struct
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from whoosh import fields as wf
from whoosh.codec.whoosh3 import W3Codec, _lenfield
from whoosh.formats import Frequency

from knowledge_agent.backends.local.keyword.bulk_blocks import DocumentBlock, FieldTerms, TermSource
from knowledge_agent.backends.local.keyword.bulk_columns import (
    StoredValues,
    numeric_column,
    stored_column,
)
from knowledge_agent.backends.local.keyword.bulk_terms import (
    FieldPostings,
    TermTable,
    encode_postings,
    encode_term_tables,
    encode_terms,
    length_bytes,
)
from knowledge_agent.search.distinct import distinct, distinct_counts

__all__ = [
    "JOINT_ROWS",
    "PART_POSTINGS",
    "SegmentJob",
    "jointly_writable",
    "write_segment",
    "write_segments",
]

JOINT_ROWS = 20_000
"""A block of at most this many term rows (a write of a few dozen texts) has all its fields'
postings sorted in one pass: its cost is the number of numpy calls, one set per field
otherwise. Larger blocks keep the field-by-field path."""

PART_POSTINGS = 250_000
"""Postings sorted and encoded at once: about 40 MB of arrays while they are (a merge of
eight 10K-chunk segments: 650 MB more at its peak in one pass, 200 MB in slices)."""

_Part = tuple[int, FieldTerms | TermSource]  # a block's docnum offset and its field's terms


class _SegmentFiles:
    """Where a segment's files go: its compound file, as they come, or files of their own."""

    def __init__(self, storage: Any, segment: Any, compound: bool) -> None:
        self._storage, self._segment = storage, segment
        self._compound = segment.create_file(storage, segment.COMPOUND_EXT) if compound else None
        if self._compound is not None:
            self._compound.write(bytes(12))  # the directory's position and length, later
        self._directory: dict[str, dict[str, Any]] = {}
        self._file: Any = None
        self._name = ""
        self._start = 0

    def begin(self, ext: str) -> None:
        self._name = self._segment.make_filename(ext)
        if self._compound is None:
            self._file = self._segment.create_file(self._storage, ext)
        else:
            self._file, self._start = self._compound, self._compound.tell()

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def end(self) -> None:
        if self._compound is None:
            self._file.close()
        else:
            length = self._compound.tell() - self._start
            self._directory[self._name] = {
                "offset": self._start,
                "length": length,
                "modified": time.time(),
            }
        self._file = None

    def add(self, ext: str, data: bytes) -> None:
        self.begin(ext)
        self.write(data)
        self.end()

    def close(self) -> None:
        f = self._compound
        if f is None:
            return
        position = f.tell()
        f.write(pickle.dumps(self._directory, pickle.HIGHEST_PROTOCOL))
        f.write(pickle.dumps({}, pickle.HIGHEST_PROTOCOL))  # no options
        length = f.tell() - position
        f.flush()
        f.seek(0)
        f.write(struct.pack("!qi", position, length))
        f.close()
        self._segment.compound = True

    def abandon(self) -> None:
        for f in (self._file, self._compound):
            if f is not None and not f.is_closed:
                f.close()


# --------------------------------------------------------------------------- per document


def _scored_lengths(
    name: str, blocks: Sequence[DocumentBlock], offsets: Sequence[int], total: int
) -> np.ndarray:
    """Every document's length of scored field ``name``."""
    lengths = np.zeros(total, np.int64)
    for block, offset in zip(blocks, offsets, strict=True):
        given = block.lengths.get(name)
        if given is not None:
            lengths[offset : offset + block.count] = given
            continue
        terms = block.fields.get(name)
        if terms is not None:
            lengths[offset : offset + block.count] = np.bincount(
                terms.docs, weights=terms.freqs, minlength=block.count
            ).astype(np.int64)
    return lengths


def _columns(
    files: _SegmentFiles,
    schema: wf.Schema,
    blocks: Sequence[DocumentBlock],
    offsets: Sequence[int],
    total: int,
) -> tuple[defaultdict[str, int], dict[str, np.ndarray]]:
    """Write the per-document columns; returns the field lengths and each scored field's
    length byte per document."""

    def column(name: str, data: bytes) -> None:
        files.add(f".{name}{W3Codec.COLUMN_EXT}", data)

    column("_stored", stored_column(StoredValues.join([block.stored for block in blocks])))
    field_lengths: defaultdict[str, int] = defaultdict(int)
    doc_bytes: dict[str, np.ndarray] = {}
    for name in sorted(schema.names()):
        fobj = schema[name]
        if fobj.indexed and fobj.scorable:
            lengths = _scored_lengths(name, blocks, offsets, total)
            if lengths.any():
                doc_bytes[name] = length_bytes(lengths)
                column(_lenfield(name), doc_bytes[name].tobytes().rstrip(b"\x00"))
                field_lengths[name] = int(lengths.sum())
        if fobj.column_type is not None and any(name in block.columns for block in blocks):
            coltype = fobj.column_type
            values = np.full(total, coltype._default, np.float64)
            for block, offset in zip(blocks, offsets, strict=True):
                if name in block.columns:
                    values[offset : offset + block.count] = block.columns[name]
            column(name, numeric_column(values, coltype))
    return field_lengths, doc_bytes


# --------------------------------------------------------------------------- postings


def _field_postings(
    fobj: wf.FieldType,
    parts: Sequence[tuple[int, FieldTerms]],
    total: int,
    doc_bytes: np.ndarray | None,
) -> FieldPostings:
    """A field's rows from every block, as postings sorted by term bytes then docnum."""
    first = parts[0][1]
    known = first.rank
    if all(part.terms is first.terms for _, part in parts):  # one vocabulary: no union
        vocab: Sequence[bytes] = first.terms
        ids = np.concatenate([part.ids for _, part in parts])
        docs = np.concatenate([part.docs + offset for offset, part in parts])
    else:
        known = None
        union = list(dict.fromkeys(t for _, part in parts for t in part.terms))
        index = dict(zip(union, range(len(union)), strict=True))
        vocab = union
        ids = np.concatenate(
            [
                np.fromiter(map(index.__getitem__, p.terms), np.int64, len(p.terms))[p.ids]
                for _, p in parts
            ]
        )
        docs = np.concatenate([p.docs + offset for offset, p in parts])
    present = np.flatnonzero(np.bincount(ids, minlength=len(vocab)))
    if known is not None:
        ordered = present[np.argsort(known[present])].tolist()
    else:
        ordered = sorted(present.tolist(), key=vocab.__getitem__)
    rank = np.empty(len(vocab), np.int64)
    rank[ordered] = np.arange(len(ordered))
    keys = rank[ids] * total + docs
    boost = fobj.format.field_boost
    if all(part.freqs is None and part.weights is None for _, part in parts):
        keys, freqs = distinct_counts(keys)
        weights = (freqs * boost).astype(np.float32)
    else:
        rows_freq = np.concatenate(
            [np.ones(p.ids.size, np.int64) if p.freqs is None else p.freqs for _, p in parts]
        )
        rows_weight = np.concatenate(
            [
                (np.ones(p.ids.size) if p.freqs is None else p.freqs) * boost
                if p.weights is None
                else p.weights
                for _, p in parts
            ]
        )
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        bounds = np.flatnonzero(np.diff(keys, prepend=-1))
        keys = keys[bounds]
        freqs = np.add.reduceat(rows_freq[order], bounds)
        weights = np.add.reduceat(rows_weight[order], bounds).astype(np.float32)
    term, doc = np.divmod(keys, total)
    starts = np.searchsorted(term, np.arange(len(ordered) + 1))
    return FieldPostings(
        terms=[vocab[i] for i in ordered],
        starts=starts.astype(np.int64),
        docs=doc,
        weights=weights,
        freqs=freqs if isinstance(fobj.format, Frequency) else None,
        doc_length_bytes=None if doc_bytes is None else doc_bytes[doc],
    )


def _joint_postings(
    fields: Sequence[tuple[wf.FieldType, FieldTerms, np.ndarray | None]], total: int
) -> list[FieldPostings]:
    """:func:`_field_postings` of several one-block fields (token-stream rows: no
    frequencies or weights given; each with its documents' length bytes, if scored) in one
    pass of numpy calls instead of one per field: each field's terms take a range of one id
    space, ordered field by field, then by bytes. A small write's cost is the number of
    calls, not their size. The fields may be of several segments: ``total`` is then the
    largest one's document count."""
    sizes = [len(part.terms) for _, part, _ in fields]
    bases = np.cumsum([0, *sizes[:-1]]).tolist()
    ids = np.concatenate(
        [part.ids + base for (_, part, _), base in zip(fields, bases, strict=True)]
    )
    docs = np.concatenate([part.docs for _, part, _ in fields])
    order_key = np.concatenate(
        [
            base + (part.rank if part.rank is not None else _byte_rank(part.terms))
            for (_, part, _), base in zip(fields, bases, strict=True)
        ]
    )
    present = np.flatnonzero(np.bincount(ids, minlength=int(order_key.size)))
    ordered = present[np.argsort(order_key[present])]
    rank = np.empty(order_key.size, np.int64)
    rank[ordered] = np.arange(ordered.size)
    keys, freqs = distinct_counts(rank[ids] * total + docs)
    term, doc = np.divmod(keys, total)
    starts = np.searchsorted(term, np.arange(ordered.size + 1))
    # The present terms of each field are a run of ``ordered``: where each field's run ends.
    field_of = np.repeat(np.arange(len(fields)), sizes)[ordered]
    term_bounds = np.searchsorted(field_of, np.arange(len(fields) + 1)).tolist()
    found = []
    for number, ((fobj, part, lengths), base) in enumerate(zip(fields, bases, strict=True)):
        t0, t1 = term_bounds[number], term_bounds[number + 1]
        a, b = int(starts[t0]), int(starts[t1])
        field_docs = doc[a:b]
        field_freqs = freqs[a:b]
        found.append(
            FieldPostings(
                terms=list(map(part.terms.__getitem__, (ordered[t0:t1] - base).tolist())),
                starts=starts[t0 : t1 + 1] - a,
                docs=field_docs,
                weights=(field_freqs * fobj.format.field_boost).astype(np.float32),
                freqs=field_freqs if isinstance(fobj.format, Frequency) else None,
                doc_length_bytes=None if lengths is None else lengths[field_docs],
            )
        )
    return found


def _byte_rank(terms: Sequence[bytes]) -> np.ndarray:
    """Each term's rank in byte order."""
    rank = np.empty(len(terms), np.int64)
    rank[sorted(range(len(terms)), key=terms.__getitem__)] = np.arange(len(terms))
    return rank


class _InMemory:
    """In-memory rows as a :class:`TermSource`: present terms sorted, rows grouped by term."""

    def __init__(self, rows: FieldTerms) -> None:
        vocab = rows.terms
        present = np.flatnonzero(np.bincount(rows.ids, minlength=len(vocab)))
        if rows.rank is not None:
            present = present[np.argsort(rows.rank[present], kind="stable")]
        else:
            present = np.array(sorted(present.tolist(), key=vocab.__getitem__), np.int64)
        position = np.zeros(len(vocab), np.int64)
        position[present] = np.arange(present.size)
        at = position[rows.ids]
        order = np.argsort(at, kind="stable")
        self.terms = [vocab[i] for i in present.tolist()]
        self._rows = FieldTerms(
            self.terms,
            rows.docs[order],
            at[order],
            None if rows.freqs is None else rows.freqs[order],
            None if rows.weights is None else rows.weights[order],
        )
        self._bounds = np.searchsorted(self._rows.ids, np.arange(present.size + 1))

    def sizes(self) -> np.ndarray:
        return np.diff(self._bounds)

    def read(self, lo: int, hi: int) -> FieldTerms:
        a, b = int(self._bounds[lo]), int(self._bounds[hi])
        rows = self._rows
        return FieldTerms(
            self.terms,
            rows.docs[a:b],
            rows.ids[a:b],
            None if rows.freqs is None else rows.freqs[a:b],
            None if rows.weights is None else rows.weights[a:b],
        )


def _sliced(
    fobj: wf.FieldType, parts: Sequence[_Part], total: int, doc_bytes: np.ndarray | None
) -> list[FieldPostings]:
    """A field's postings a slice of its terms at a time (see the module's docstring)."""
    sources = [
        (offset, _InMemory(part) if isinstance(part, FieldTerms) else part)
        for offset, part in parts
    ]
    if len(sources) == 1:
        terms = list(sources[0][1].terms)
        local = [np.arange(len(terms))]
    else:
        terms = sorted({term for _, source in sources for term in source.terms})
        index = dict(zip(terms, range(len(terms)), strict=True))
        local = [
            np.fromiter(map(index.__getitem__, s.terms), np.int64, len(s.terms)) for _, s in sources
        ]
    sizes = np.zeros(len(terms), np.int64)
    for (_, source), global_of in zip(sources, local, strict=True):
        sizes[global_of] += source.sizes()
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, np.arange(PART_POSTINGS, int(ends[-1]), PART_POSTINGS))
    bounds = distinct(np.concatenate([[0], cuts + 1, [len(terms)]])).tolist()
    every = np.arange(len(terms))
    found = []
    for lo, hi in itertools.pairwise(bounds):
        rows = []
        for (offset, source), global_of in zip(sources, local, strict=True):
            a, b = np.searchsorted(global_of, [lo, hi]).tolist()
            if a < b:
                part = source.read(a, b)
                ids = global_of[part.ids]
                found_rows = FieldTerms(terms, part.docs, ids, part.freqs, part.weights, every)
                rows.append((offset, found_rows))
        if rows:
            found.append(_field_postings(fobj, rows, total, doc_bytes))
    return found


def _joint_fields(
    schema: wf.Schema, blocks: Sequence[DocumentBlock]
) -> list[tuple[str, FieldTerms]]:
    """The indexed fields of a small write (one block of at most :data:`JOINT_ROWS`
    token-stream rows in memory), which :func:`_joint_postings` sorts at once; none
    otherwise."""
    if len(blocks) != 1 or blocks[0].sources:
        return []
    block = blocks[0]
    found = [
        (name, block.fields[name])
        for name in sorted(schema.names())
        if schema[name].indexed and name in block.fields and block.fields[name].ids.size
    ]
    if any(part.freqs is not None or part.weights is not None for _, part in found):
        return []
    if sum(part.ids.size for _, part in found) > JOINT_ROWS:
        return []
    return found


def write_segment(
    storage: Any,
    segment: Any,
    schema: wf.Schema,
    blocks: Sequence[DocumentBlock],
    total: int,
    *,
    compound: bool,
) -> None:
    """Write the files of ``segment`` holding ``blocks`` (``total`` documents in all); with
    ``compound``, as the one compound file Whoosh would assemble from them."""
    job = SegmentJob(storage, segment, schema, blocks, total, compound)
    if jointly_writable(job):
        write_segments([job])
        return
    offsets = (np.cumsum([block.count for block in blocks]) - [b.count for b in blocks]).tolist()
    files = _SegmentFiles(storage, segment, compound)
    try:
        field_lengths, doc_bytes = _columns(files, schema, blocks, offsets, total)
        segment._fieldlengths = field_lengths
        files.begin(W3Codec.POSTS_EXT)
        written = 0
        pending: list[tuple[str, FieldPostings]] = []
        terms: dict[str, list[bytes]] = {}
        infos: list[np.ndarray] = []

        def flush() -> None:
            nonlocal written, pending
            if not pending:
                return
            data, info = encode_postings([postings for _, postings in pending])
            info["offset"] += written
            files.write(data.tobytes())
            written += data.size
            infos.append(info)
            for name, postings in pending:
                terms.setdefault(name, []).extend(postings.terms)
            pending = []

        for name in sorted(schema.names()):
            fobj = schema[name]
            if not fobj.indexed:
                continue
            parts: list[_Part] = []
            for block, offset in zip(blocks, offsets, strict=True):
                if name in block.fields and block.fields[name].ids.size:
                    parts.append((offset, block.fields[name]))
                elif name in block.sources and block.sources[name].terms:
                    parts.append((offset, block.sources[name]))
            if not parts:
                continue
            rows = sum(p.ids.size if isinstance(p, FieldTerms) else PART_POSTINGS for _, p in parts)
            if all(isinstance(p, FieldTerms) for _, p in parts) and rows <= PART_POSTINGS:
                found = [_field_postings(fobj, parts, total, doc_bytes.get(name))]  # type: ignore[arg-type]
            else:
                found = _sliced(fobj, parts, total, doc_bytes.get(name))
            for postings in found:
                if postings.docs.size:
                    pending.append((name, postings))
                if sum(p.docs.size for _, p in pending) >= PART_POSTINGS:
                    flush()
        flush()
        files.end()
        fieldmap = {name: number for number, name in enumerate(terms)}
        # (np.concatenate gives the fields native byte order: back to the file's.)
        values = np.concatenate(infos).astype(infos[0].dtype) if infos else np.zeros(0, np.uint8)
        files.add(W3Codec.TERMS_EXT, encode_terms(fieldmap, list(terms.values()), values))
        files.close()
    except BaseException:
        files.abandon()
        raise


@dataclass(eq=False)
class SegmentJob:
    """A segment to write: where, the schema of its index, its documents."""

    storage: Any
    segment: Any
    schema: wf.Schema
    blocks: Sequence[DocumentBlock]
    total: int
    compound: bool


def jointly_writable(job: SegmentJob) -> bool:
    """Whether :func:`write_segments` can write ``job`` (a small write: see
    :func:`_joint_fields`)."""
    return bool(_joint_fields(job.schema, job.blocks))


def write_segments(jobs: Sequence[SegmentJob]) -> None:
    """Write small segments (each :func:`jointly_writable`) as :func:`write_segment` would,
    their postings sorted and encoded in one pass for all: the chunk and item segments of
    one small write cost one set of numpy calls, not two."""
    outputs = [_SegmentFiles(job.storage, job.segment, job.compound) for job in jobs]
    try:
        fields: list[tuple[wf.FieldType, FieldTerms, np.ndarray | None]] = []
        owned: list[list[str]] = []  # each job's field names, in the order of ``fields``
        for job, files in zip(jobs, outputs, strict=True):
            field_lengths, doc_bytes = _columns(files, job.schema, job.blocks, [0], job.total)
            job.segment._fieldlengths = field_lengths
            joint = _joint_fields(job.schema, job.blocks)
            fields += [(job.schema[name], part, doc_bytes.get(name)) for name, part in joint]
            owned.append([name for name, _ in joint])
        postings = _joint_postings(fields, max(job.total for job in jobs))
        data, info = encode_postings(postings)
        term_counts = [len(p.terms) for p in postings]
        term_at = np.cumsum([0, *term_counts]).tolist()
        byte_at = [*info["offset"].tolist(), data.size]  # where each term's postings begin
        pieces: list[bytes] = []
        tables: list[TermTable] = []
        first = 0
        for names in owned:
            last = first + len(names)
            t0, t1 = term_at[first], term_at[last]
            lo, hi = int(byte_at[t0]), int(byte_at[t1])
            pieces.append(data[lo:hi].tobytes())
            values = info[t0:t1].copy()
            values["offset"] -= lo
            fieldmap = {name: number for number, name in enumerate(names)}
            tables.append((fieldmap, [postings[i].terms for i in range(first, last)], values))
            first = last
        encoded = encode_term_tables(tables)
        for files, posts, terms in zip(outputs, pieces, encoded, strict=True):
            files.add(W3Codec.POSTS_EXT, posts)
            files.add(W3Codec.TERMS_EXT, terms)
            files.close()
    except BaseException:
        for files in outputs:
            files.abandon()
        raise
