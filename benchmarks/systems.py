"""What every benchmarked system looks like to the harness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from benchmarks.datasets import Document


class Hit(NamedTuple):
    doc_id: str
    score: float
    # The best passage (chunk / paragraph) of that document, or None for whole-document systems.
    passage: str | None = None


class System(Protocol):
    name: str

    def index(self, docs: Sequence[Document]) -> None:
        """Ingest the whole corpus (called once, before any search)."""

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents for ``query``, best first."""

    def close(self) -> None:
        """Release whatever ``index`` opened."""
