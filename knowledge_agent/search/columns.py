"""Whole Whoosh per-document columns as numpy arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["column_values"]


def column_values(column: Any, n: int, dtype: np.dtype[Any] | str) -> np.ndarray:
    """The ``n`` values of a fixed-size numeric column reader (``NumericColumn``'s), in one read.

    Whoosh writes such a column up to its last non-default value, so the rest is the
    column's default. ``dtype`` is the column's packed type (``">f8"`` for ``"d"``, ``"u1"``
    for ``"B"``). Readers of another kind are read value by value.
    """
    dtype = np.dtype(dtype)
    dbfile = getattr(column, "_dbfile", None)
    if dbfile is None or getattr(column, "_fixedlen", None) != dtype.itemsize:
        return np.fromiter((column[d] for d in range(n)), dtype, n)
    count = min(int(column._count), n)
    out = np.full(n, column._default, dtype)
    if count:
        out[:count] = np.frombuffer(dbfile.get(column._basepos, count * dtype.itemsize), dtype)
    return out
