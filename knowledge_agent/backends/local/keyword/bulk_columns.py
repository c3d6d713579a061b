"""A segment's per-document column files, encoded from arrays.

The layouts are those of ``whoosh.columns`` (what ``W3PerDocWriter`` writes):

* a ``NumericColumn`` (field lengths as bytes, ``updated_at`` as doubles): big-endian values
  up to the last one that is not the column's default; readers give the default past it;
* the stored fields, a ``PickleColumn`` over a ``CompressedBytesColumn``: each document's
  ``pickle.dumps(fields, 2)`` as a zlib stream, back to back, then the lengths array (the
  smallest of ``B H i I`` that holds them, big-endian), the offsets array when there are
  more than 2**15 documents, and their type codes (``X`` last when offsets were written).

A stored value is a zlib stream of *stored* (uncompressed) deflate blocks: Whoosh inflates
it as any other, and building one costs a checksum instead of the 30 µs of setting up a
compressor per document; the few fields stored here (ids) would not compress anyway.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from whoosh.columns import NumericColumn

from knowledge_agent.search.analysed_batch import gather

__all__ = ["StoredValues", "numeric_column", "stored_column", "stored_value"]

_OFFSETS_CUTOFF = 2**15  # VarBytesColumn's write_offsets_cutoff
_STORED_MAX = 0xFFFF  # bytes in one stored deflate block
_ZLIB_HEADER = b"\x78\x01"


def stored_value(fields: dict[str, Any]) -> bytes:
    """One document's stored fields as the stored-fields column holds them."""
    data = pickle.dumps(fields, 2)
    pieces = [_ZLIB_HEADER]
    for start in range(0, max(len(data), 1), _STORED_MAX):
        piece = data[start : start + _STORED_MAX]
        final = start + _STORED_MAX >= len(data)
        size = len(piece)
        pieces.append(bytes([final]) + size.to_bytes(2, "little"))
        pieces.append((size ^ 0xFFFF).to_bytes(2, "little") + piece)
    pieces.append(zlib.adler32(data).to_bytes(4, "big"))
    return b"".join(pieces)


@dataclass(eq=False)
class StoredValues:
    """Encoded stored-field values of consecutive documents: ``data`` back to back, the
    length of each (0: nothing stored)."""

    data: bytes
    lengths: np.ndarray  # int64

    @classmethod
    def encode(cls, documents: Sequence[dict[str, Any] | None]) -> StoredValues:
        pickles = [pickle.dumps(fields, 2) if fields else b"" for fields in documents]
        sizes = np.fromiter(map(len, pickles), np.int64, len(pickles))
        if sizes.size and sizes.max() > _STORED_MAX:  # several deflate blocks: rare, slow
            values = [stored_value(fields) if fields else b"" for fields in documents]
            return cls(b"".join(values), np.fromiter(map(len, values), np.int64, len(values)))
        # stored_value for every document at once: header, one final stored block, checksum.
        kept = sizes > 0
        lengths = np.where(kept, sizes + 11, 0)
        where = (np.cumsum(lengths) - lengths)[kept]
        n, size = int(kept.sum()), sizes[kept]
        out = np.zeros(int(lengths.sum()), np.uint8)
        head = np.zeros((n, 7), np.uint8)
        head[:, :3] = np.frombuffer(_ZLIB_HEADER + b"\x01", np.uint8)
        head[:, 3:5] = size.astype("<u2").view(np.uint8).reshape(-1, 2)
        head[:, 5:7] = (size ^ 0xFFFF).astype("<u2").view(np.uint8).reshape(-1, 2)
        out[(where[:, None] + np.arange(7)).ravel()] = head.ravel()
        out[gather(where + 7, size)] = np.frombuffer(b"".join(pickles), np.uint8)
        checks = np.fromiter((zlib.adler32(p) for p in pickles if p), np.uint32, n)
        tail = checks.astype(">u4").view(np.uint8).reshape(-1, 4)
        out[(where[:, None] + 7 + size[:, None] + np.arange(4)).ravel()] = tail.ravel()
        return cls(out.tobytes(), lengths)

    @classmethod
    def join(cls, parts: Sequence[StoredValues]) -> StoredValues:
        if len(parts) == 1:
            return parts[0]
        return cls(b"".join(p.data for p in parts), np.concatenate([p.lengths for p in parts]))


def _typecode(largest: int) -> str:
    """The type ``whoosh.util.numlists.GrowableArray`` (no longs) ends with."""
    for code, limit in (("B", 2**8), ("H", 2**16), ("i", 2**31), ("I", 2**32)):
        if largest < limit:
            return code
    raise OverflowError(f"{largest} is too big for a stored-fields column")


def stored_column(stored: StoredValues) -> bytes:
    lengths = stored.lengths
    n = lengths.size
    code = _typecode(int(lengths.max()) if n else 0)
    pieces = [stored.data, lengths.astype(">" + code).tobytes()]
    codes = code
    if n > _OFFSETS_CUTOFF:
        offsets = np.cumsum(lengths) - lengths
        offset_code = _typecode(int(offsets.max()))
        pieces.append(offsets.astype(">" + offset_code).tobytes())
        codes += offset_code + "X"
    pieces.append(codes.encode("ascii"))
    return b"".join(pieces)


def numeric_column(values: np.ndarray, column: NumericColumn) -> bytes:
    """A numeric column of one value per document."""
    typecode = column._typecode
    written = np.flatnonzero(values != column._default)
    end = int(written[-1]) + 1 if written.size else 0
    return values[:end].astype(">" + typecode).tobytes()
