"""The two protocols every provider meets, and the row normalisation they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from knowledge_agent.errors import ConfigError

__all__ = ["Embedder", "EmbeddingKind", "Reranker", "normalize_rows"]

EmbeddingKind = Literal["query", "document"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into dense vectors of one vector space.

    ``name`` identifies that space (provider, model, dimensions, instructions): vectors made
    under another name are not comparable and must be re-embedded. ``embed`` returns float32
    of shape ``(len(texts), dimensions)`` whose rows have unit length, except an all-zero row
    for a text with nothing to embed; cosine similarity is therefore a dot product.

    An embedder may also declare ``languages``, the language codes (``detect_language``'s:
    "en", "zh" …) it was trained on: a query in another language is then ranked without
    the dense vectors, which would only add noise.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str], *, kind: EmbeddingKind = "document") -> np.ndarray: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores texts against a query: one score per text, input order, higher is better."""

    @property
    def name(self) -> str: ...

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]: ...


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors`` as C-contiguous float32 with unit rows; zero rows stay zero.

    The norm is taken in float64 so very large or very small components neither overflow
    nor vanish before the division.
    """
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-D array, got shape {matrix.shape}")
    scale = np.abs(matrix).max(axis=1, keepdims=True) if matrix.shape[1] else None
    if scale is None:
        return np.ascontiguousarray(matrix, dtype=np.float32)
    # Dividing by the largest component first keeps the squares in range (1e200**2 is inf).
    scale[scale == 0] = 1.0
    matrix = matrix / scale
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(matrix / norms, dtype=np.float32)


def check_kind(kind: str) -> None:
    if kind not in ("query", "document"):
        raise ConfigError(f"kind must be 'query' or 'document', got {kind!r}")


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refusing a bare string (it would embed one text per character)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    texts = list(texts)
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings, got {type(text).__name__}")
    return texts


def check_batch_size(batch_size: int) -> int:
    if not positive_int(batch_size):
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
