"""Rows for ``COPY … FROM STDIN (FORMAT BINARY)`` built from numpy columns, without a Python
step per row: the postings of a batch are hundreds of thousands of rows.

A row of the binary format is its field count, then per field its length and its bytes. Here
the leading fields are fixed-width numbers (one numpy array each) and the last ones texts,
each given as codes into a table of UTF-8 strings; rows are written grouped by the lengths of
their texts (every row of a group then has the same layout: one 2-D array), in their given
order within a group. Rows sorted by a text keep each value's rows together.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["TextTable", "binary_array_copy", "binary_copy"]

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # the signature, no flags, no extension
_TRAILER = b"\xff\xff"


class TextTable:
    """The values of a text column (UTF-8), which rows name by their position (a code)."""

    def __init__(self, values: Sequence[bytes]) -> None:
        self.lengths = np.fromiter(map(len, values), np.int64, len(values))
        self._position = np.zeros(len(values), np.int64)
        self._tables: dict[int, np.ndarray] = {}
        for length in np.unique(self.lengths).tolist():
            ids = np.flatnonzero(self.lengths == length)
            self._position[ids] = np.arange(ids.size)
            joined = b"".join(values[i] for i in ids.tolist())
            self._tables[length] = np.frombuffer(joined, np.uint8).reshape(ids.size, length)

    def bytes_of(self, codes: np.ndarray, length: int) -> np.ndarray:
        """The bytes of these values, all ``length`` long: one row each."""
        return self._tables[length][self._position[codes]]


def binary_copy(
    numbers: Sequence[tuple[np.ndarray, str]], texts: Sequence[tuple[np.ndarray, TextTable]]
) -> Iterator[bytes]:
    """The whole COPY stream (signature, rows, trailer) of rows made of ``numbers`` (each an
    array and its big-endian numpy type, e.g. ``">i4"``) then ``texts`` (each the codes of
    the rows' values and their table), in blocks."""
    n = len(numbers[0][0]) if numbers else len(texts[0][0])
    fields = [("count", ">i2")]
    for position, (_, kind) in enumerate(numbers):
        fields += [(f"size{position}", ">i4"), (f"value{position}", kind)]
    fixed = np.empty(n, np.dtype(fields))
    fixed["count"] = len(numbers) + len(texts)
    for position, (values, kind) in enumerate(numbers):
        fixed[f"size{position}"] = np.dtype(kind).itemsize
        fixed[f"value{position}"] = values
    width = fixed.dtype.itemsize
    head = fixed.view(np.uint8).reshape(n, width)

    lengths = [table.lengths[codes] for codes, table in texts]
    key = np.zeros(n, np.int64)
    for column_lengths in lengths:
        key = key * (int(column_lengths.max(initial=0)) + 1) + column_lengths
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    yield _SIGNATURE
    for rows in np.split(order, cuts):
        if rows.size == 0:
            continue
        sizes = [int(column_lengths[rows[0]]) for column_lengths in lengths]
        block = np.empty((rows.size, width + sum(4 + size for size in sizes)), np.uint8)
        block[:, :width] = head[rows]
        at = width
        for (codes, table), size in zip(texts, sizes, strict=True):
            block[:, at : at + 4] = np.frombuffer(size.to_bytes(4, "big"), np.uint8)
            block[:, at + 4 : at + 4 + size] = table.bytes_of(codes[rows], size)
            at += 4 + size
        yield block.tobytes()
    yield _TRAILER


# The element type of each numpy type in a binary array (pg_type oids).
_ELEMENT_OID = {">i2": 21, ">i4": 23, ">i8": 20, ">f4": 700, ">f8": 701}


def binary_array_copy(
    numbers: Sequence[tuple[np.ndarray, str]],
    arrays: Sequence[tuple[np.ndarray, str]],
    texts: Sequence[tuple[np.ndarray, TextTable]],
    starts: np.ndarray,
) -> Iterator[bytes]:
    """The COPY stream of rows made of ``numbers`` (one value per row, as in
    :func:`binary_copy`), then one-dimensional arrays, then ``texts``. Each array column is
    given flat (the elements of every row, row after row, each array its big-endian numpy
    type) with ``starts``, where each row's elements begin (increasing from 0: no row is
    empty): row ``r`` holds elements ``starts[r]`` up to the next row's start (or the end)."""
    n = starts.size
    total = int(arrays[0][0].size) if arrays else 0
    counts = np.diff(np.append(starts, total)).astype(np.int64)
    text_lengths = [table.lengths[codes] for codes, table in texts]
    widths = [np.dtype(kind).itemsize for _, kind in arrays]
    head = 2 + sum(4 + np.dtype(kind).itemsize for _, kind in numbers)
    sizes = np.full(n, head, np.int64)
    for width in widths:
        sizes += 24 + counts * (4 + width)
    for lengths in text_lengths:
        sizes += 4 + lengths
    offset = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=offset[1:])
    out = np.empty(int(sizes.sum()), np.uint8)

    def put(at: np.ndarray, record: np.ndarray) -> None:
        """Each row's bytes of ``record`` (a structured array) at its offset ``at``: one
        scatter of every byte (a scatter per byte column costs more for small writes)."""
        width = record.dtype.itemsize
        raw = record.view(np.uint8).reshape(record.size * width)
        out[(at[:, None] + np.arange(width)).reshape(-1)] = raw

    fields = [("count", ">i2")]
    for position, (_, kind) in enumerate(numbers):
        fields += [(f"size{position}", ">i4"), (f"value{position}", kind)]
    fixed = np.empty(n, np.dtype(fields))
    fixed["count"] = len(numbers) + len(arrays) + len(texts)
    for position, (values, kind) in enumerate(numbers):
        fixed[f"size{position}"] = np.dtype(kind).itemsize
        fixed[f"value{position}"] = values
    put(offset, fixed)
    at = offset + head
    header = np.dtype([(name, ">i4") for name in ("size", "ndim", "nulls", "oid", "n", "low")])
    element_row = np.repeat(np.arange(n), counts)
    element_at = np.arange(total, dtype=np.int64) - starts[element_row]
    for (values, kind), width in zip(arrays, widths, strict=True):
        record = np.zeros(n, header)
        record["size"] = 20 + counts * (4 + width)
        record["ndim"], record["oid"], record["n"], record["low"] = 1, _ELEMENT_OID[kind], counts, 1
        put(at, record)
        elements = np.empty(total, np.dtype([("size", ">i4"), ("value", kind)]))
        elements["size"] = width
        elements["value"] = values
        put(at[element_row] + 24 + element_at * (4 + width), elements)
        at = at + 24 + counts * (4 + width)
    for (codes, table), lengths in zip(texts, text_lengths, strict=True):
        put(at, lengths.astype(">i4"))
        for length in np.unique(lengths).tolist():
            rows = np.flatnonzero(lengths == length)
            data = table.bytes_of(codes[rows], length)
            out[(at[rows, None] + 4 + np.arange(length)).reshape(-1)] = data.reshape(-1)
        at = at + 4 + lengths
    yield _SIGNATURE
    yield out.tobytes()
    yield _TRAILER
