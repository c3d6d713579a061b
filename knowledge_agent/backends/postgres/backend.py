"""PostgresBackend: a knowledge base in one PostgreSQL database, as the core holds it.

The storage writes every item with its chunks and their postings in one transaction (its index
writer), so a write is searchable when it returns, by this process and every other one, on
every machine: there is no folder lock, no journal to replay and nothing to flush. Several
writer processes need no coordination beyond the database's own.

With ``read_url`` (a hot standby streaming from the primary), searches and the reads that
hydrate their results go there, while writes go to ``url``; a write then reaches searches once
the standby has replayed it (usually well under a second).

With an embedder, the vectors of every chunk are in pgvector (:mod:`.dense`), written in the
same transaction as the chunks; a database new to the embedder (or indexed with another one)
has every stored chunk embedded when it is opened.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.postgres.dense import PostgresDenseIndex
from knowledge_agent.backends.postgres.keyword import PostgresKeywordIndex
from knowledge_agent.backends.postgres.postings import PostingsWriter
from knowledge_agent.backends.postgres.statistics import Statistics
from knowledge_agent.backends.postgres.storage import IndexWriter, PostgresStorage
from knowledge_agent.backends.postgres.upkeep import Upkeep
from knowledge_agent.backends.postgres.vectors import PostgresTfidfIndex
from knowledge_agent.errors import KnowledgeAgentError
from knowledge_agent.faults import Faults
from knowledge_agent.models.status import IndexDamage
from knowledge_agent.search.config import KeywordIndexConfig, TfidfConfig

if TYPE_CHECKING:
    from knowledge_agent.embeddings import Embedder
    from knowledge_agent.protocols import EngineFactory

__all__ = ["PostgresBackend"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class _NothingToRefit:
    def add(self, upserts: object) -> None:
        pass

    def finish(self) -> int:
        return 0

    def cancel(self) -> None:
        pass


class _SharedPostingsTfidf(PostgresTfidfIndex):
    """The TF-IDF index reading the postings the keyword index writes: the keyword index's
    rebuild and updates rewrite both, so its own do nothing (two transactions rewriting the
    same rows would wait on each other)."""

    def refit(self) -> _NothingToRefit:  # type: ignore[override]
        return _NothingToRefit()

    def update(self, upserts: object = (), deletes: object = ()) -> None:  # type: ignore[override]
        pass


class PostgresBackend:
    """The :class:`~knowledge_agent.protocols.Backend` over one PostgreSQL database."""

    def __init__(
        self,
        url: str,
        analyzer: TextAnalyzer,
        make_engine: EngineFactory,
        *,
        keyword_config: KeywordIndexConfig,
        tfidf_config: TfidfConfig,
        embedder: Embedder | None = None,
        read_url: str | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.lock_timeout: float | None = None
        # A rebuild writes: with searches on a standby, it runs on a primary-only backend.
        self._primary_only = (
            None
            if read_url is None
            else functools.partial(
                PostgresBackend,
                url,
                analyzer,
                make_engine,
                keyword_config=keyword_config,
                tfidf_config=tfidf_config,
                embedder=embedder,
            )
        )
        self._closing: list[Callable[[], None]] = []
        # One cache of the postings' statistics for both indexes (they read the same tables);
        # a search checks it once (:meth:`answer`).
        self.statistics = Statistics()
        self.upkeep = Upkeep()
        self._writing = 0  # depth of :meth:`writing` (re-entered by a batch's writes)
        """After bulk writes, the tables analysed and the norms refreshed (:mod:`.upkeep`)."""
        # The vectors' own writer goes first, so that embedding holds no statistics lock.
        writers: list[IndexWriter] = [PostingsWriter(analyzer, tfidf=tfidf_config)]
        self._dense: PostgresDenseIndex | None = None
        if embedder is not None:
            self._dense = PostgresDenseIndex(url, embedder)
            self._closing.append(self._dense.close)
            writers.insert(0, self._dense.writer)
        try:
            self.storage = PostgresStorage(
                url, index_writers=writers, faults=faults, analyzer=analyzer
            )
            self._closing.append(self.storage.close)
            search_url = read_url or url
            reads = self.storage
            if read_url is not None:
                reads = PostgresStorage(read_url, read_only=True)
                self._closing.append(reads.close)
            keyword = PostgresKeywordIndex(
                search_url,
                analyzer,
                keyword_config,
                tfidf=tfidf_config,
                statistics=self.statistics,
            )
            self._closing.append(keyword.close)
            semantic = _SharedPostingsTfidf(
                search_url, analyzer, tfidf_config, statistics=self.statistics
            )
            self._closing.append(semantic.close)
            dense = self._dense
            if embedder is not None and read_url is not None:
                dense = PostgresDenseIndex(read_url, embedder)
                self._closing.append(dense.close)
            self.engine = make_engine(reads, keyword, semantic, dense)
        except BaseException:
            self.close()
            raise

    # What a data folder needs to share itself between processes, a database does itself.

    def open(self) -> None:
        """Embed every stored chunk when the database holds no vectors of the embedder yet;
        nothing else to check or repair: every write was indexed in its transaction."""
        dense = self._dense
        if dense is None or self.storage.read_only or dense.is_complete():
            return
        with self.lock:
            logger.info("embedding the stored chunks with %s", dense.embedder_name)
            dense.fit_chunks(
                (item, self.storage.get_chunks_for_item(item.id))
                for item in self.storage.iter_items()
            )

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around writes; at the end of the outermost (a batch, a collect, a single write),
        when it was a bulk write, the upkeep that keeps the searches after it fast
        (:mod:`.upkeep`): once per bulk write, not at each of a collect's flushes."""
        with self.lock:
            outermost = self._writing == 0
            if outermost:
                self.storage.outside_writes("count the documents", self.upkeep.before_writes)
            self._writing += 1
            try:
                yield
            finally:
                self._writing -= 1
            if outermost:
                self._after_writes()

    def _after_writes(self) -> None:
        try:
            done = self.storage.outside_writes(
                "analyse the written tables", self.upkeep.after_writes
            )
        except KnowledgeAgentError as exc:  # the writes are committed: upkeep can wait
            logger.warning("the upkeep after bulk writes failed: %s", exc)
            return
        if done:
            self.statistics.forget()  # the norms moved the generation on

    def defer(self, chars: int = 0) -> None:
        """Nothing is deferred: the write's transaction indexed it."""

    def flush(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Nothing to flush."""

    def before_reading(self) -> None:
        """Nothing to wait for."""

    def reading(self) -> None:
        """Every committed write is visible already."""

    def answer(self, run: Callable[[], _T], mode: str = "hybrid") -> _T:
        """Run a search: the statistics' generation is checked once for all of its reads
        (:meth:`.statistics.Statistics.search`)."""
        with self.lock, self.statistics.search():
            return run()

    def damage(self, *, full: bool = True) -> list[IndexDamage]:
        """No index files to damage: the database checks its own pages."""
        return []

    def repair(self, damaged: Collection[str]) -> None:
        self.rebuild()

    def rebuild(self, *, reuse_vectors: bool = False) -> int:
        """Rewrite the postings (and vectors) from the stored items and chunks, on the
        primary."""
        with self.lock:
            if self._primary_only is None:
                return self.engine.rebuild(reuse_vectors=reuse_vectors)
            primary = self._primary_only()
            try:
                return primary.rebuild(reuse_vectors=reuse_vectors)
            finally:
                primary.close()

    def close(self) -> None:
        for close in reversed(self._closing):
            try:
                close()
            except Exception:  # closing the rest matters more than one failure
                logger.warning("closing the postgresql backend", exc_info=True)
        self._closing = []
