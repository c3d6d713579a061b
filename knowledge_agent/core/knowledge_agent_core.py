"""KnowledgeAgentCore: the facade every interface (Python, CLI, MCP) goes through."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from knowledge_agent.analysis import AnalyzerConfig, TextAnalyzer, detect_language
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.errors import ConfigError, IngestError, SearchIndexError
from knowledge_agent.models import KnowledgeItem, SearchResult
from knowledge_agent.models.knowledge_item import utc_now
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.search_engine_impl import SearchConfig, SearchEngineImpl
from knowledge_agent.search.search_index_manager import SearchIndexManager
from knowledge_agent.search.semantic_searcher import SemanticSearcher
from knowledge_agent.storage import SQLiteStorageManager

__all__ = ["KnowledgeAgentCore"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_INDEX_FINGERPRINT_KEY = "index_fingerprint"


def _config(value: _T | Mapping[str, Any] | None, kind: Callable[..., _T], name: str) -> _T:
    """A config object from an instance, a mapping of its fields, or the defaults."""
    if value is None:
        return kind()
    if isinstance(value, Mapping):
        try:
            return kind(**value)
        except TypeError as exc:
            raise ConfigError(f"{name}: {exc}") from exc
    return value


class KnowledgeAgentCore:
    """A knowledge base: SQLite storage, a Whoosh and a TF-IDF chunk index, one search API.

    ``KnowledgeAgentCore()`` (or ``data_dir=":memory:"``) keeps everything in memory — a
    fresh knowledge base in milliseconds, for tests. With a ``data_dir`` the database is
    ``knowledge.sqlite3`` there and the indexes live under ``index/``; on open, an index that
    is missing, unreadable or behind the database is rebuilt or replayed from SQLite.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        chunk_config: ChunkConfig | Mapping[str, Any] | None = None,
        search_config: SearchConfig | Mapping[str, Any] | None = None,
        analyzer_config: AnalyzerConfig | Mapping[str, Any] | None = None,
        keyword_options: Mapping[str, Any] | None = None,
        semantic_options: Mapping[str, Any] | None = None,
    ) -> None:
        in_memory = data_dir is None or os.fspath(data_dir) == ":memory:"
        self.data_dir: Path | None = None if in_memory else Path(os.fspath(data_dir))  # type: ignore[arg-type]
        self.analyzer = TextAnalyzer(_config(analyzer_config, AnalyzerConfig, "analyzer_config"))
        self.chunker = ContentChunker(_config(chunk_config, ChunkConfig, "chunk_config"))
        self._keyword_options = dict(keyword_options or {})
        self._semantic_options = dict(semantic_options or {})
        self._batch_depth = 0
        db_path = ":memory:" if self.data_dir is None else self.data_dir / "knowledge.sqlite3"
        self.storage = SQLiteStorageManager(db_path)
        try:
            self.keyword_index = self._open_index("whoosh", self._new_keyword_index)
            self.semantic_searcher = self._open_index("tfidf", self._new_semantic_searcher)
            self.engine = SearchEngineImpl(
                self.storage,
                self.keyword_index,
                self.semantic_searcher,
                self.analyzer,
                _config(search_config, SearchConfig, "search_config"),
            )
            self._bring_indexes_up_to_date()
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _index_dir(self, name: str) -> Path | None:
        return None if self.data_dir is None else self.data_dir / "index" / name

    def _new_keyword_index(self) -> SearchIndexManager:
        return SearchIndexManager(self._index_dir("whoosh"), self.analyzer, **self._keyword_options)

    def _new_semantic_searcher(self) -> SemanticSearcher:
        return SemanticSearcher(self._index_dir("tfidf"), self.analyzer, **self._semantic_options)

    def _open_index(self, name: str, factory: Callable[[], _T]) -> _T:
        """Open an index; an unreadable one is deleted and recreated empty (then rebuilt)."""
        try:
            return factory()
        except SearchIndexError:
            folder = self._index_dir(name)
            if folder is None:
                raise
            logger.warning("the %s index in %s is unreadable; rebuilding it", name, folder)
            shutil.rmtree(folder, ignore_errors=True)
            self.storage.set_meta(_INDEX_FINGERPRINT_KEY, "")
            return factory()

    def _fingerprint(self) -> str:
        # Indexed terms depend on the analyzer and the semantic options: a change means rebuild.
        return json.dumps(
            {"analyzer": self.analyzer.config.to_dict(), "semantic": self._semantic_options},
            sort_keys=True,
            default=str,
        )

    def _bring_indexes_up_to_date(self) -> None:
        fingerprint = self._fingerprint()
        stale = self.storage.get_meta(_INDEX_FINGERPRINT_KEY) != fingerprint
        missing = self.storage.count_chunks() > 0 and not self.engine.has_chunk_index()
        if stale or missing:
            indexed = self.keyword_index.item_count() or self.semantic_searcher.item_count()
            if self.storage.count_items() or indexed:
                logger.info("building the search indexes from the database")
                self.engine.rebuild()
            self.storage.set_meta(_INDEX_FINGERPRINT_KEY, fingerprint)
        else:
            self.engine.sync()

    # -- writing -------------------------------------------------------------------------

    def add_text(
        self,
        content: str,
        *,
        title: str = "",
        source_uri: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        kb: str = "default",
        source_type: str = "text",
        doc_type: str = "",
        language: str | None = None,
        tags: Iterable[str] = (),
        item_id: str | None = None,
    ) -> KnowledgeItem:
        """Store ``content`` as an item, chunk it and index it; returns the item.

        With ``item_id`` of an existing item, that item is replaced (its creation time is
        kept). ``language`` is detected from the text when not given.
        """
        where = source_uri or title or "<text>"
        if not isinstance(content, str):
            raise IngestError(where, f"content must be a string, got {type(content).__name__}")
        if not isinstance(kb, str) or not kb.strip():
            raise ConfigError(f"kb must be a non-empty string, got {kb!r}")
        existing = self.storage.get_item(item_id) if item_id else None
        now = utc_now()
        fields: dict[str, Any] = {
            "title": title,
            "content": content,
            "source_type": source_type,
            "source_uri": source_uri,
            "doc_type": doc_type,
            "language": detect_language(content) if language is None else language,
            "tags": list(tags),
            "metadata": dict(metadata or {}),
            "kb": kb,
            "created_at": existing.created_at if existing else now,
            "updated_at": now,
        }
        item = KnowledgeItem(**fields) if item_id is None else KnowledgeItem(id=item_id, **fields)
        self.storage.save_item_with_chunks(item, self.chunker.chunk(content, title=title))
        self._index_changes()
        return item

    def delete_knowledge_item(self, item_id: str) -> bool:
        """Delete an item from SQLite and both indexes (R4.4); True if it existed."""
        existed = self.storage.delete_item(item_id)
        self._index_changes()
        return existed

    @contextmanager
    def batch(self) -> Iterator[KnowledgeAgentCore]:
        """Defer index updates to the end of the block: bulk ingestion commits once.

        Items are in SQLite as soon as each call returns; searches inside the block may
        not see them yet. The indexes catch up when the outermost block exits, even on error.
        """
        self._batch_depth += 1
        try:
            yield self
        finally:
            self._batch_depth -= 1
            self._index_changes()

    def _index_changes(self) -> None:
        if self._batch_depth == 0:
            self.engine.sync()

    def rebuild_index(self) -> int:
        """Rebuild both indexes from SQLite (R4.5); returns the number of chunks indexed."""
        count = self.engine.rebuild()
        self.storage.set_meta(_INDEX_FINGERPRINT_KEY, self._fingerprint())
        return count

    # -- reading -------------------------------------------------------------------------

    def get_item(self, item_id: str) -> KnowledgeItem | None:
        """The stored item with this id, or None."""
        return self.storage.get_item(item_id)

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        context_window: int = 1,
        kb: str | Iterable[str] | None = None,
        source_type: str | Iterable[str] | None = None,
        doc_type: str | Iterable[str] | None = None,
        language: str | Iterable[str] | None = None,
        path_prefix: str | None = None,
        path_glob: str | None = None,
        updated_after: datetime | str | None = None,
        updated_before: datetime | str | None = None,
        min_score: float | None = None,
        level: str = "auto",
        mode: str = "hybrid",
    ) -> list[SearchResult]:
        """Search the knowledge base: best items first, each with its best chunks and context.

        Filters restrict the search before ranking; ``kb`` and the other name filters take
        one name or several. ``level`` is ``"auto"``, ``"chunk"`` or ``"item"``; ``mode`` is
        ``"hybrid"``, ``"keyword"`` or ``"semantic"``. Any query text is accepted.
        """
        filters = SearchFilters.build(
            kb=kb,
            source_type=source_type,
            doc_type=doc_type,
            language=language,
            path_prefix=path_prefix,
            path_glob=path_glob,
            updated_after=updated_after,
            updated_before=updated_before,
        )
        return self.engine.search(
            query,
            limit=limit,
            context_window=context_window,
            filters=filters,
            level=level,
            mode=mode,
            min_score=min_score,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the indexes and the database; safe to call twice."""
        for name in ("keyword_index", "semantic_searcher", "storage"):
            resource = getattr(self, name, None)
            if resource is not None:
                resource.close()

    def __enter__(self) -> KnowledgeAgentCore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
