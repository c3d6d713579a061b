"""The feature column of a term, as scikit-learn's ``HashingVectorizer`` computes it.

Queries hash a handful of terms: doing it here, in Python, keeps scikit-learn (a second to
import) out of opening a knowledge base and answering its first query. Indexing hashes a
batch's distinct terms at once with :mod:`~knowledge_agent.search.term_hashing`; the tests
hold both equal to the vectorizer.
"""

from __future__ import annotations

__all__ = ["feature_column", "murmurhash3_32"]

_MASK = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def _rotl(value: int, shift: int) -> int:
    return ((value << shift) | (value >> (32 - shift))) & _MASK


def murmurhash3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data``, as a signed 32-bit integer."""
    h = seed & _MASK
    length = len(data)
    tail_start = length - length % 4
    for start in range(0, tail_start, 4):
        k = int.from_bytes(data[start : start + 4], "little")
        k = _rotl((k * _C1) & _MASK, 15) * _C2 & _MASK
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _MASK
    tail = data[tail_start:]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= _rotl((k * _C1) & _MASK, 15) * _C2 & _MASK
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


def feature_column(term: str, n_features: int) -> int:
    """The column ``HashingVectorizer(n_features=n_features)`` gives ``term``."""
    h = murmurhash3_32(term.encode("utf-8", "surrogatepass"))
    if h == -(1 << 31):  # abs() would overflow in scikit-learn's int32 arithmetic
        return (2**31 - 1 - (n_features - 1)) % n_features
    return abs(h) % n_features
