"""The feature columns of many terms at once, as scikit-learn's ``HashingVectorizer`` gives
them: MurmurHash3 (x86, 32 bit, seed 0) of each term's UTF-8 bytes, in numpy.

Indexing hashes each distinct term of a batch once, here, instead of handing texts to the
vectorizer: the texts are already analysed, and scikit-learn took over a second to import.
:func:`~knowledge_agent.search.hashing.feature_column` is the one-term version queries use;
the tests hold the three equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["feature_columns", "murmurhash3_32_many"]

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmurhash3_32_many(terms: Sequence[str]) -> np.ndarray:
    """MurmurHash3 x86 32-bit (seed 0) of each term's UTF-8 bytes, as signed int32."""
    n = len(terms)
    if n == 0:
        return np.empty(0, np.int32)
    encoded = [term.encode("utf-8", "surrogatepass") for term in terms]
    lengths = np.fromiter(map(len, encoded), np.int64, n)
    width = int(-(-int(lengths.max()) // 4) * 4) or 4
    # Every term's bytes in one zero-padded row: the tail block reads as its padded word.
    flat = np.frombuffer(b"".join(encoded), np.uint8)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded = np.zeros((n, width), np.uint8)
    padded[rows, cols] = flat
    # Longest first, so the terms still hashing at block j are a prefix: slices, not masks.
    order = np.argsort(-(lengths // 4), kind="stable")
    words = padded.view("<u4")[order]
    lengths = lengths[order]
    blocks = lengths // 4
    h = np.zeros(n, np.uint32)
    with np.errstate(over="ignore"):
        for j in range(int(blocks[0])):
            m = int(np.searchsorted(-blocks, -j, side="left"))  # the terms longer than j blocks
            k = words[:m, j] * _C1
            k = _rotl(k, 15) * _C2
            hj = h[:m] ^ k
            h[:m] = _rotl(hj, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        tail = (lengths % 4) > 0
        if tail.any():
            k = words[tail, blocks[tail]] * _C1
            h[tail] ^= _rotl(k, 15) * _C2
        h ^= lengths.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    out = np.empty(n, np.uint32)
    out[order] = h
    return out.view(np.int32)


# Each term's hash, remembered across batches and indexes of the process: most terms of a
# batch were hashed before (a fresh in-memory base hashes the same common words again).
_HASHES: dict[str, int] = {}
_HASHES_LIMIT = 1 << 18


def _hashes(terms: Sequence[str]) -> np.ndarray:
    """:func:`murmurhash3_32_many` of ``terms`` as int64, through the process's cache."""
    get = _HASHES.get
    found = [get(term) for term in terms]
    missing = [term for term, h in zip(terms, found, strict=True) if h is None]
    if missing:
        fresh = dict(zip(missing, murmurhash3_32_many(missing).tolist(), strict=True))
        if len(_HASHES) + len(fresh) > _HASHES_LIMIT:
            _HASHES.clear()
        _HASHES.update(fresh)
        found = [fresh[term] if h is None else h for term, h in zip(terms, found, strict=True)]
    return np.array(found, np.int64)


def feature_columns(terms: Sequence[str], n_features: int) -> np.ndarray:
    """The column ``HashingVectorizer(n_features=n_features)`` gives each term (int32)."""
    h = _hashes(terms)
    cols = np.abs(h) % n_features
    # abs() of the lowest int32 overflows in scikit-learn's arithmetic; it special-cases it.
    cols[h == -(2**31)] = (2**31 - 1 - (n_features - 1)) % n_features
    return cols.astype(np.int32)
