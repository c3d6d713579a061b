"""The adapter between the harness and knowledge_agent's public API — the one place to fix if
that API changes.

Both levels (``knowledge_agent``: two-stage hybrid; ``knowledge_agent-item``: item level only)
search the same in-memory knowledge base, so each corpus is ingested once per data set; so does
``knowledge_agent+rerank`` (the default search with ``rerank=True``), the base then being
opened with the reranker, which no other search calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.datasets import Document
from benchmarks.systems import Hit


def load_core_class() -> type:
    """``knowledge_agent.KnowledgeAgentCore``; ImportError / AttributeError when not there yet."""
    import knowledge_agent

    return knowledge_agent.KnowledgeAgentCore


def check_reranker(config: dict[str, Any]) -> None:
    """Build the reranker ``config`` describes and have it score two texts once: a service
    that is down or answers wrongly fails here, not silently in every search (a failed rerank
    keeps the search's order)."""
    from knowledge_agent.embeddings import reranker_from_config

    scores = reranker_from_config(config).rerank("probe", ["a probe", "another probe"])
    if len(scores) != 2:
        raise ValueError(f"the reranker gave {len(scores)} scores for 2 texts")


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` strings → keyword arguments; values parsed as JSON when they parse."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {pair!r}")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    return options


class SharedKnowledgeBase:
    """One in-memory KnowledgeAgentCore per corpus, shared by the systems built on it."""

    def __init__(self, core_class: type, options: dict[str, Any]) -> None:
        self._core_class = core_class
        self._options = options
        self._core: Any = None
        self._docs: Sequence[Document] | None = None
        self._users = 0
        self.ingest_seconds = 0.0

    def holds(self, docs: Sequence[Document]) -> bool:
        """Whether ``docs`` are already ingested (by another system sharing this base)."""
        return self._core is not None and self._docs is docs

    def acquire(self, docs: Sequence[Document]) -> Any:
        """The core holding ``docs``, ingesting them on first use."""
        if self._core is not None and self._docs is not docs:
            raise RuntimeError("a shared knowledge base holds one corpus at a time")
        if self._core is None:
            started = time.perf_counter()
            core = self._core_class(**self._options)  # no data dir: in-memory knowledge base
            core.__enter__()
            try:
                with core.batch():
                    for doc in docs:
                        core.add_text(
                            doc.text,
                            title=doc.title,
                            source_uri=doc.doc_id,
                            metadata={"doc_id": doc.doc_id},
                        )
            except BaseException:
                core.__exit__(None, None, None)
                raise
            self._core, self._docs = core, docs
            self.ingest_seconds = time.perf_counter() - started
        self._users += 1
        return self._core

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0 and self._core is not None:
            self._core.__exit__(None, None, None)
            self._core, self._docs, self._users = None, None, 0


class KnowledgeAgentSystem:
    """knowledge_agent through ``KnowledgeAgentCore.search`` at one level (and mode, and with
    the core's reranker when ``rerank``)."""

    def __init__(
        self,
        name: str,
        shared: SharedKnowledgeBase,
        level: str | None = None,
        mode: str | None = None,
        rerank: bool = False,
    ) -> None:
        self.name = name
        self._shared = shared
        self._level = level
        self._mode = mode
        self._rerank = rerank
        self._core: Any = None
        self.ingest_seconds: float | None = None
        self.ingest_shared = False

    def index(self, docs: Sequence[Document]) -> None:
        self.ingest_shared = self._shared.holds(docs)
        self._core = self._shared.acquire(docs)
        self.ingest_seconds = self._shared.ingest_seconds

    def search(self, query: str, k: int) -> list[Hit]:
        kwargs: dict[str, Any] = {"limit": k, "context_window": 0}
        if self._level is not None:
            kwargs["level"] = self._level
        if self._mode is not None:
            kwargs["mode"] = self._mode
        if self._rerank:
            kwargs["rerank"] = True
        return [
            Hit(
                r.item.source_uri,
                float(r.relevance_score),
                r.matched_chunks[0].content if r.matched_chunks else None,
            )
            for r in self._core.search(query, **kwargs)
        ]

    def close(self) -> None:
        if self._core is not None:
            self._core = None
            self._shared.release()
