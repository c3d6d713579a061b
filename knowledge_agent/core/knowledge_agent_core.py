"""KnowledgeAgentCore: the facade every interface (Python, CLI, MCP) goes through."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from knowledge_agent.analysis import AnalyzerConfig, TextAnalyzer
from knowledge_agent.backends import backend_label
from knowledge_agent.backends.local.keyword.index import SearchIndexManager
from knowledge_agent.backends.local.shared_indexes import SharedIndexes
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.core.citations import CitationCheck, check_citation
from knowledge_agent.core.packing import PackedContext, pack_results
from knowledge_agent.core.text_search import TextMatch, compile_pattern, matching_lines
from knowledge_agent.crawl import CrawlOptions, UrlPolicy, normalize_url
from knowledge_agent.embeddings import (
    Embedder,
    Reranker,
    ServiceUsage,
    UsageCounter,
    embedder_from_config,
    reranker_from_config,
)
from knowledge_agent.errors import (
    ConfigError,
    IngestError,
    KnowledgeAgentError,
    NotFoundError,
    QueryError,
    SearchIndexError,
)
from knowledge_agent.faults import Faults
from knowledge_agent.ingest.collector import Collector, ProgressCallback
from knowledge_agent.ingest.git_state import GIT_STATE, GitState
from knowledge_agent.ingest.git_sync import GitRoot
from knowledge_agent.ingest.items import build_item
from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.ingest.watcher import ChangeSet, FolderWatcher
from knowledge_agent.ingest.web import WebCollector
from knowledge_agent.models import KnowledgeItem, ScoreExplanation, SearchFacets, SearchResult
from knowledge_agent.models.evidence import chunk_hash, lines_label
from knowledge_agent.models.knowledge_item import KB_NAME, utc_now
from knowledge_agent.models.status import ChunkContext, IndexDamage, IndexStatus
from knowledge_agent.protocols import (
    Backend,
    DenseVectorIndex,
    KeywordIndex,
    Storage,
    VectorIndex,
)
from knowledge_agent.search.config import KeywordIndexConfig, SearchConfig, TfidfConfig
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.ranking.explain import FieldMatches
from knowledge_agent.search.search_engine_impl import NO_BOOST, SearchEngineImpl
from knowledge_agent.storage import DATABASE_FILE, SQLiteStorageManager
from knowledge_agent.storage.doc_sources import DEFAULT_REFRESH_INTERVAL, DocSource
from knowledge_agent.storage.sources import KnowledgeBaseInfo, SourceRoot, path_to_db

__all__ = ["KnowledgeAgentCore"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


# A collect indexes what it stored so far after every this many bytes of files; the first
# updates come sooner (after _INDEX_ALONG_FIRST, then as many bytes as were indexed before):
# this process indexes while the workers extract instead of waiting for them, and a small
# folder's whole index update no longer runs after its last file, on one core.
_INDEX_ALONG_BYTES = 8_000_000
_INDEX_ALONG_FIRST = 1_000_000
# A string source longer than this, or with a line break, is text rather than a path.
_MAX_PATH_TEXT = 1024
# Absolute, home-relative or ./-relative paths; or one word with a slash or a file extension.
_LOOKS_LIKE_PATH = re.compile(r"(?:~|\.{0,2}[/\\]).*|[^\s/\\]*[/\\]\S*|[\w.-]+\.\w{1,8}")


def _under(path: Path, root: str) -> bool:
    text = os.fspath(path)
    return text == root or text.startswith(root.rstrip(os.sep) + os.sep)


def _kb_name(kb: object) -> str:
    """``kb`` checked as a knowledge-base name: a word, then word characters, dots, dashes."""
    if not isinstance(kb, str) or not KB_NAME.fullmatch(kb):
        raise ConfigError(
            f"kb must be a name of letters, digits, '_', '.' or '-' (at most 64), got {kb!r}"
        )
    return kb


def _source_path(source: str | os.PathLike[str]) -> str | None:
    """The absolute path ``source`` names, or None when it is text to store as is.

    A string that looks like a path but names nothing raises, rather than being indexed
    as a one-line document.
    """
    if not isinstance(source, str):
        path = os.fspath(source)
    elif "\n" in source or len(source) > _MAX_PATH_TEXT or not source.strip():
        return None
    elif os.path.exists(os.path.expanduser(source)) or _LOOKS_LIKE_PATH.fullmatch(source):
        path = source
    else:
        return None
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(full):
        raise IngestError(full, "no such file or directory")
    return full


# The shortest id prefix shown or accepted: 8 hex digits, as git shows commits.
_MIN_ID_PREFIX = 8
# How many results an explanation for a query looks through for the chunk.
_EXPLAIN_DEPTH = 50
# What a query's ``weights`` may name: this package's engines, and 000's names for them.
_WEIGHT_NAMES = {
    "keyword": "keyword_weight",
    "fts": "keyword_weight",
    "semantic": "semantic_weight",
    "vector": "semantic_weight",
}


def _count(count: Callable[[], int]) -> int:
    """An index's count for the status, 0 when it cannot be read (its damage is listed)."""
    try:
        return count()
    except SearchIndexError:
        return 0


def _chunking_key(kb: str, source: str) -> str:
    """The meta key recording the chunk settings a collected path or doc source was cut with."""
    return "chunking " + json.dumps([kb, path_to_db(source)], ensure_ascii=False)


def _chunk_config(
    chunk_config: ChunkConfig | Mapping[str, Any] | None,
    chunking: ChunkConfig | Mapping[str, Any] | None,
) -> ChunkConfig:
    """The chunk settings from ``chunking`` or its older name ``chunk_config`` (not both)."""
    if chunking is None:
        return _config(chunk_config, ChunkConfig, "chunk_config")
    if chunk_config is not None:
        raise ConfigError("chunking and chunk_config name the same settings: give one")
    try:
        return _config(chunking, ChunkConfig, "chunking")
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(
            message if message.startswith("chunking") else f"chunking.{message}"
        ) from exc


def _recorded_walk(options: Mapping[str, Any]) -> WalkOptions:
    """The walk options a root's options record (what else they hold left out)."""
    return WalkOptions(**{name: value for name, value in options.items() if name != GIT_STATE})


def _nothing_reached(report: CollectReport, start: str) -> str | None:
    """Why a first crawl stored nothing: the start URL's failure or skip (else the first
    of any); None when it stored pages, or no URL failed (a sitemap listing none here)."""
    if report.processed or report.unchanged:
        return None
    issues = [*report.failed, *report.skipped]
    for issue in issues:
        if issue.path == start:
            return issue.reason
    return issues[0].reason if issues else None


def _is_web_url(source: object) -> bool:
    """Whether a source names a web page (an ``http(s)://`` URL) rather than a path or text."""
    return isinstance(source, str) and source[:8].lower().startswith(("http://", "https://"))


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
    Use it as a context manager, or call :meth:`close`. Safe to share between threads.

    ``doc_type_rules`` maps folder names to doc types (default: ``adr/`` → adr,
    ``runbooks/`` → runbook, …); ``workers`` caps the processes that extract files when
    collecting a folder (default: up to 4); ``reranker`` re-scores the best results when a
    search asks for it (an object with ``rerank(query, texts) -> list[float]``, or the
    settings of one: ``{"provider": "openai", "base_url": …, "model": …}``); ``embedder``
    adds a third ranking, dense vectors of every chunk (``{"provider": "wordllama"}`` runs
    offline): set or changed, it embeds every chunk again, once. Each ``*_config`` is its
    dataclass or a mapping of its fields: ``chunking`` (or ``chunk_config``,
    :class:`ChunkConfig`: ``{"strategy": "lines", "chunk_size": 10, "chunk_overlap": 2}``;
    a changed setting re-chunks each collected path and doc source at its next sync),
    ``search_config`` (:class:`SearchConfig`), ``analyzer_config``, ``keyword_config``
    (:class:`KeywordIndexConfig`: BM25F field weights) and ``tfidf_config``
    (:class:`TfidfConfig`); a changed analyzer or TF-IDF setting rebuilds the indexes once.

    **Writes are indexed behind.** ``add_text`` and deletes commit to SQLite at once; the
    indexes apply them in one batch at this process's next search (which always sees them),
    once a thousand are pending, at the end of :meth:`batch` or at :meth:`close`.

    **Sharing a data folder.** Any number of processes may open one data folder
    (:mod:`~knowledge_agent.backends.local.shared_indexes` has the protocol). Every write holds the
    folder's write lock; another writer waits for it — up to ``lock_timeout`` seconds (None:
    as long as it takes), calling ``on_lock_wait`` once with a message; long upkeep on
    open (an index embedded again for a new embedder) reports to ``on_status``. A crawl holds
    the lock only while it stores and indexes a group of pages, never while it fetches or
    extracts them. Searches do not write and wait only to index their own process's writes:
    they answer from the last index generation (never with an item since deleted), and
    replay the journal when the indexes are behind it and the lock is free. Opening, when
    the lock is free, also repairs: an unreadable index is rebuilt from SQLite and an index
    that lost items has them replayed.

    **Damage is found.** Every index file carries a checksum written with it; opening checks
    sizes and the small files' checksums, :meth:`check` every checksum. A search that needs
    a damaged or unreadable index has it rebuilt first when the write lock is free, else it
    fails with :class:`~knowledge_agent.errors.DamagedIndexError` naming ``knowledge-agent
    check --repair``; it never answers from an index that is not there.
    ``rebuild_unreadable=False`` rebuilds nothing on its own (what ``check`` opens with, to
    report the damage it finds rather than repair it unasked).

    **A server instead of a folder.** ``backend`` is ``"local"`` (the default: the data
    folder above) or a ``postgresql://`` URL (the ``[postgres]`` extra): the knowledge base
    is then one database on that server, every write indexed in its own transaction, and
    ``data_dir`` is not used. :attr:`backend_url` names it (without a password).
    ``read_backend``, a hot standby of that server, answers the searches meanwhile.

    A testing hook: ``KNOWLEDGE_AGENT_FAULT`` set when the core is created makes the process
    kill itself at a named step of a write (:mod:`knowledge_agent.faults`).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        chunk_config: ChunkConfig | Mapping[str, Any] | None = None,
        chunking: ChunkConfig | Mapping[str, Any] | None = None,
        search_config: SearchConfig | Mapping[str, Any] | None = None,
        analyzer_config: AnalyzerConfig | Mapping[str, Any] | None = None,
        keyword_config: KeywordIndexConfig | Mapping[str, Any] | None = None,
        tfidf_config: TfidfConfig | Mapping[str, Any] | None = None,
        doc_type_rules: Mapping[str, str] | None = None,
        workers: int | None = None,
        lock_timeout: float | None = None,
        on_lock_wait: Callable[[str], None] | None = None,
        on_status: Callable[[str], None] | None = None,
        reranker: Reranker | Mapping[str, Any] | None = None,
        embedder: Embedder | Mapping[str, Any] | None = None,
        rebuild_unreadable: bool = True,
        backend: str | None = None,
        read_backend: str | None = None,
    ) -> None:
        self.reranker = (
            reranker_from_config(reranker) if isinstance(reranker, Mapping) else reranker
        )
        if isinstance(embedder, Mapping):
            embedder = embedder_from_config(embedder)
        self.embedder = embedder
        in_memory = data_dir is None or os.fspath(data_dir) == ":memory:"
        self.data_dir: Path | None = None if in_memory else Path(os.fspath(data_dir))  # type: ignore[arg-type]
        self.analyzer = TextAnalyzer(_config(analyzer_config, AnalyzerConfig, "analyzer_config"))
        self.chunker = ContentChunker(_chunk_config(chunk_config, chunking))
        if lock_timeout is not None and not lock_timeout >= 0:
            raise ConfigError(f"lock_timeout must be None or >= 0, got {lock_timeout!r}")
        config = _config(search_config, SearchConfig, "search_config")
        self._watchers: list[FolderWatcher] = []
        faults = Faults.from_environment()  # a testing hook: unset, it does nothing
        keyword = _config(keyword_config, KeywordIndexConfig, "keyword_config")
        tfidf = _config(tfidf_config, TfidfConfig, "tfidf_config")
        self.backend_url = backend_label(backend)

        def make_engine(
            storage: Storage,
            keyword_index: KeywordIndex,
            semantic: VectorIndex[Sequence[str]],
            dense: DenseVectorIndex | None,
        ) -> SearchEngineImpl:
            return SearchEngineImpl(
                storage, keyword_index, semantic, self.analyzer, config, dense, faults=faults
            )

        self._backend: Backend
        if read_backend is not None and (
            self.backend_url == "local" or backend_label(read_backend) == "local"
        ):
            raise ConfigError("read_backend is a standby of a postgresql:// backend: set both")
        if self.backend_url != "local":
            from knowledge_agent.backends.postgres.backend import PostgresBackend

            self._backend = PostgresBackend(
                str(backend),
                self.analyzer,
                make_engine,
                keyword_config=keyword,
                tfidf_config=tfidf,
                embedder=embedder,
                read_url=read_backend,
                faults=faults,
            )
            self.storage: Storage = self._backend.storage
        else:
            db_path = ":memory:" if self.data_dir is None else self.data_dir / DATABASE_FILE
            self.storage = SQLiteStorageManager(db_path, faults=faults)
        try:
            if self.backend_url == "local":
                self._backend = SharedIndexes(
                    self.data_dir,
                    self.storage,
                    self.analyzer,
                    make_engine,
                    keyword_config=keyword,
                    tfidf_config=tfidf,
                    lock_timeout=lock_timeout,
                    on_lock_wait=on_lock_wait,
                    embedder=embedder,
                    on_status=on_status,
                    rebuild_unreadable=rebuild_unreadable,
                    faults=faults,
                )
            # One reader or writer at a time: the watcher calls in from its own thread.
            self._lock = self._backend.lock
            self.collector = Collector(
                self.storage,
                self.chunker.config,
                doc_type_rules=doc_type_rules,
                workers=workers,
            )
            self.web_collector = WebCollector(
                self.storage, self.chunker.config, doc_type_rules=doc_type_rules
            )
            self._backend.open()
        except BaseException:
            self.close()
            raise

    @property
    def engine(self) -> SearchEngineImpl:
        """The two-stage search over both indexes."""
        return self._backend.engine

    @property
    def keyword_index(self) -> SearchIndexManager:
        """The BM25F index over chunks and items (Whoosh in a data folder)."""
        return self.engine.keyword_index  # type: ignore[return-value]

    @property
    def semantic_searcher(self) -> SemanticSearcher:
        """The TF-IDF index over chunks and items."""
        return self.engine.semantic_searcher  # type: ignore[return-value]

    @property
    def lock_timeout(self) -> float | None:
        """Seconds a write waits for another process's (None: as long as it takes)."""
        return self._backend.lock_timeout

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
        _kb_name(kb)
        chunks = self.chunker.chunk(content, title=title)
        with self._backend.writing():
            item = build_item(
                self.storage,
                content,
                item_id=item_id,
                title=title,
                source_type=source_type,
                source_uri=source_uri,
                doc_type=doc_type,
                language=language,
                tags=tags,
                metadata=metadata,
                kb=kb,
            )
            self.storage.save_item_with_chunks(item, chunks)
            self._backend.defer(len(content))
        return item

    def collect_text(self, text: str, *, title: str = "", kb: str = "default") -> CollectReport:
        """:meth:`add_text` with a report like a one-file collection's (chunks, bytes,
        time); ``IngestError`` naming the text's title for a text with nothing in it."""
        started = time.perf_counter()
        if isinstance(text, str) and not text.strip():
            raise IngestError(title or "<text>", "the text is empty")
        item = self.add_text(text, title=title, kb=kb)
        return CollectReport(
            kb=kb,
            processed=1,
            chunks_added=self.storage.count_chunks(item_id=item.id),
            bytes_processed=len(text.encode("utf-8", "surrogatepass")),
            duration_s=time.perf_counter() - started,
            item_ids=[item.id],
        )

    def delete_knowledge_item(self, item_id: str) -> bool:
        """Delete an item from SQLite and both indexes (R4.4); True if it existed."""
        with self._backend.writing():
            existed = self.storage.delete_item(item_id)
            if existed:
                self._backend.defer()
        return existed

    # -- collecting ------------------------------------------------------------------------

    def collect_knowledge(
        self,
        source: str | os.PathLike[str],
        *,
        kb: str = "default",
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        walk_options: WalkOptions | None = None,
        full: bool = False,
        progress: ProgressCallback | None = None,
        title: str = "",
        crawl: CrawlOptions | Mapping[str, Any] | None = None,
        url_policy: UrlPolicy | None = None,
        name: str = "",
        tags: Sequence[str] = (),
        refresh_interval: float | None = None,
    ) -> CollectReport:
        """Collect a file, a folder, a web page or site, or raw text into knowledge base ``kb``.

        Folders are walked with ``include`` / ``exclude`` globs on top of the defaults
        (or with ``walk_options``), honouring ``.gitignore``. A re-run only extracts new
        and changed files and removes the items of files that disappeared; ``full``
        re-extracts everything. One bad file is reported, never raised. A path that does
        not exist raises ``IngestError``; a string that is not a path is stored as text.

        An ``http(s)://`` URL is a doc source: one page, a sitemap, or a site crawled with
        ``crawl`` options (``include`` / ``exclude`` are URL globs then), registered with
        ``name``, ``tags`` and ``refresh_interval`` (seconds before ``sync`` crawls it
        again). Collecting it again re-crawls it at once; unchanged pages cost a
        conditional request. ``url_policy`` limits which URLs may be fetched at all.
        """
        _kb_name(kb)
        if isinstance(source, str) and _is_web_url(source):
            options = _config(crawl, CrawlOptions, "crawl")
            if include or exclude:
                options = dataclasses.replace(
                    options,
                    include=(*options.include, *include),
                    exclude=(*options.exclude, *exclude),
                )
            return self._collect_url(
                kb, source, options, url_policy, full, progress, name, tags, refresh_interval
            )
        root = _source_path(source)
        if root is None:
            return self.collect_text(str(source), title=title, kb=kb)
        options = walk_options or WalkOptions(include=tuple(include), exclude=tuple(exclude))
        started = time.perf_counter()
        with self.batch():
            report = self._collect_root(kb, root, options, full, progress)
            self._index_with_progress(progress)
        report.duration_s = time.perf_counter() - started  # indexing included
        return report

    def _collect_url(
        self,
        kb: str,
        url: str,
        options: CrawlOptions,
        policy: UrlPolicy | None,
        full: bool,
        progress: ProgressCallback | None,
        name: str,
        tags: Sequence[str],
        refresh_interval: float | None,
    ) -> CollectReport:
        try:
            start = normalize_url(url)
        except ValueError as exc:
            raise IngestError(url, str(exc)) from exc
        if refresh_interval is not None and not refresh_interval >= 0:
            raise ConfigError(f"refresh_interval must be >= 0 seconds, got {refresh_interval!r}")
        if policy is not None and (refusal := policy.refusal(start)) is not None:
            raise IngestError(start, refusal)
        started = time.perf_counter()
        with self._backend.writing():
            known = self.storage.doc_sources.get_doc_source(kb, start)
            new_kb = kb not in self.storage.sources.kb_names()
            source = DocSource(
                kb=kb,
                url=start,
                name=name or (known.name if known else ""),
                options=options.to_dict(),
                tags=tuple(tags) if tags else (known.tags if known else ()),
                refresh_interval=(
                    refresh_interval
                    if refresh_interval is not None
                    else (known.refresh_interval if known else DEFAULT_REFRESH_INTERVAL)
                ),
                added_at=known.added_at if known else utc_now(),
                crawled_at=known.crawled_at if known else None,
            )
            self.storage.doc_sources.save_doc_source(source)
        report = self._crawl(source, full=full, policy=policy, progress=progress)
        if known is None and (reason := _nothing_reached(report, start)) is not None:
            self._forget_doc_source(kb, start, new_kb)
            raise IngestError(start, reason)
        report.duration_s = time.perf_counter() - started
        return report

    def _forget_doc_source(self, kb: str, url: str, new_kb: bool) -> None:
        """Undo the adding of a doc source that reached nothing: its row and pages, and its
        knowledge base when the add made it and nothing else is in it now."""
        with self._backend.writing():
            self.storage.doc_sources.delete_doc_source(kb, url)
            info = self.storage.sources.kb_info(kb)
            if new_kb and info is not None and not (info.items or info.roots):
                self.storage.sources.delete_kb(kb)
            self._backend.defer()

    def _crawl(
        self,
        source: DocSource,
        *,
        full: bool,
        policy: UrlPolicy | None,
        progress: ProgressCallback | None,
    ) -> CollectReport:
        """Crawl a doc source holding the write lock only to store each group of pages,
        which is indexed before the lock is released: a search never waits behind the
        crawl's network I/O or its extraction, only (at most) behind one group's commit."""
        report = self.web_collector.collect(
            source,
            full=full or not self._chunked_alike(source.kb, source.url),
            policy=policy,
            progress=progress,
            commit=lambda: self._writing_batch(progress),
        )
        with self._backend.writing():
            self._record_chunking(source.kb, source.url)
        return report

    # -- chunk settings per collected path -------------------------------------------------

    def _chunked_alike(self, kb: str, source: str) -> bool:
        """Whether a collected path or doc source was last chunked with the settings in
        effect (one recorded before settings were recorded had the defaults)."""
        recorded = self.storage.get_meta(_chunking_key(kb, source))
        return (recorded or ChunkConfig().fingerprint()) == self.chunker.config.fingerprint()

    def _record_chunking(self, kb: str, source: str) -> None:
        """Under the write lock: the path or doc source is chunked with today's settings."""
        self.storage.set_meta(_chunking_key(kb, source), self.chunker.config.fingerprint())

    def rechunk_pending(self) -> list[str]:
        """The collected paths and doc sources chunked with other settings than those in
        effect: the next :meth:`sync` extracts them again."""
        sources = [(root.kb, root.root) for root in self.storage.sources.get_roots()]
        sources += [(doc.kb, doc.url) for doc in self.storage.doc_sources.get_doc_sources()]
        return [source for kb, source in sources if not self._chunked_alike(kb, source)]

    def _index_with_progress(self, progress: ProgressCallback | None) -> None:
        """Bring the indexes up to date now, reporting ``indexing`` events (chunks done)."""
        if progress is None:
            self._backend.flush()
            return

        def indexed(done: int, total: int) -> None:
            progress(CollectProgress("", "indexing", done, total, 0, 0))

        self._backend.flush(indexed)

    def _indexing_along(self, progress: ProgressCallback | None) -> ProgressCallback:
        """A progress callback that also indexes what a collect has stored so far, every
        :data:`_INDEX_ALONG_BYTES` of files read (sooner at first): the worker processes extract
        the next files meanwhile, and the text an index update holds stays bounded."""
        indexed_at = 0

        def step(event: CollectProgress) -> None:
            nonlocal indexed_at
            if progress is not None:
                progress(event)
            every = min(_INDEX_ALONG_BYTES, max(_INDEX_ALONG_FIRST, indexed_at))
            if event.status == "processed" and event.bytes_done - indexed_at >= every:
                indexed_at = event.bytes_done
                self._index_with_progress(progress)

        return step

    def _collect_root(
        self,
        kb: str,
        root: str,
        options: WalkOptions,
        full: bool,
        progress: ProgressCallback | None,
    ) -> CollectReport:
        self.storage.sources.ensure_kb(kb)
        options = self._without_own_data(root, options)
        previous = next((r for r in self.storage.sources.get_roots(kb) if r.root == root), None)
        # Saved without a git state until the run is over: one cut short walks next time.
        stored = SourceRoot(kb, root, options=dataclasses.asdict(options))
        self.storage.sources.save_root(stored)
        chunked_alike = self._chunked_alike(kb, root)
        report, state = self._collect_files(
            kb,
            root,
            options,
            full or not chunked_alike,
            progress,
            previous.options if previous else {},
        )
        record = stored.options if state is None else {**stored.options, GIT_STATE: state}
        self.storage.sources.save_root(
            dataclasses.replace(stored, options=record, synced_at=utc_now())
        )
        self._record_chunking(kb, root)
        logger.info(
            "collected %s into %s: %d processed, %d unchanged, %d skipped, %d failed, %d removed",
            root, kb, report.processed, report.unchanged, len(report.skipped),
            len(report.failed), report.removed,
        )  # fmt: skip
        return report

    def _collect_files(
        self,
        kb: str,
        root: str,
        options: WalkOptions,
        full: bool,
        progress: ProgressCallback | None,
        previous: Mapping[str, Any],
    ) -> tuple[CollectReport, dict[str, Any] | None]:
        """Walk the root; in a git work tree, look only at the files git lists as changed
        since the last run when it can tell. The report, and the git state to record."""
        step = self._indexing_along(progress)
        git = GitRoot.open(root, options)
        if git is None:
            return self.collector.collect(kb, root, options, full=full, progress=step), None

        def tracked_under(path: str) -> list[str]:
            found = self.storage.sources.sources_at(path)
            return [record.path for record in found if record.kb == kb and record.root == root]

        def failed() -> list[str]:
            rows = self.storage.sources.get_sources(kb, root).values()
            return [record.path for record in rows if record.status == "failed"]

        with git:
            last = GitState.from_dict(previous.get(GIT_STATE))
            if last is not None and _recorded_walk(previous) != options:
                logger.info("%s: its walk options changed; walking the folder", root)
                last = None  # files outside what git lists may now be in or out
            changes = None if full else git.changes(last, options, tracked_under, failed)
            if changes is None:
                report = self.collector.collect(
                    kb, root, options, full=full, progress=step, stamp=git.stamp
                )
            else:
                report = self.collector.apply_changes(
                    kb, root, options, changes.changed, changes.deleted, step, stamp=git.stamp
                )
            return report, git.state().to_dict()

    def _without_own_data(self, root: str, options: WalkOptions) -> WalkOptions:
        """``options`` excluding this knowledge base's own folder when it lies under ``root``."""
        if self.data_dir is None:
            return options
        data = os.path.abspath(self.data_dir)
        if not data.startswith(root.rstrip(os.sep) + os.sep):
            return options
        pattern = f"/{Path(os.path.relpath(data, root)).as_posix()}/"
        if pattern in options.exclude:
            return options
        return dataclasses.replace(options, exclude=(*options.exclude, pattern))

    def sync(
        self,
        *,
        kb: str | None = None,
        full: bool = False,
        progress: ProgressCallback | None = None,
    ) -> CollectReport:
        """Re-scan every collected folder and file, and re-crawl the doc sources that are
        due (of one knowledge base, if given); with ``full``, every enabled doc source, every
        page re-processed.

        A collected file that no longer exists is removed; a collected folder that no
        longer exists is reported as failed and its items are kept (an unmounted drive
        should not empty a knowledge base). The folders are synced in one batch; each doc
        source is crawled after it, holding the write lock only to store each group of pages.
        """
        if kb is not None:
            self.get_kb(kb)
        started = time.perf_counter()
        report = CollectReport(kb=kb or "*")
        with self.batch():
            for stored in self.storage.sources.get_roots(kb):
                if os.path.exists(stored.root):
                    options = _recorded_walk(stored.options)
                    report.merge(
                        self._collect_root(stored.kb, stored.root, options, full, progress)
                    )
                elif stored.root in self.storage.sources.get_sources(stored.kb, stored.root):
                    self.collector.remove_missing_root(stored.kb, stored.root, report)
                else:
                    reason = "folder no longer exists; its items are kept"
                    report.failed.append(FileIssue(stored.root, reason))
            self._index_with_progress(progress)
        now = utc_now()
        for doc in self.storage.doc_sources.get_doc_sources(kb):
            if doc.due(now) or (doc.enabled and (full or not self._chunked_alike(doc.kb, doc.url))):
                report.merge(self._crawl(doc, full=full, policy=None, progress=progress))
        report.duration_s = time.perf_counter() - started
        return report

    def watch(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        kb: str = "default",
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        walk_options: WalkOptions | None = None,
        debounce: float = 1.0,
        backend: str = "auto",
        on_report: Callable[[CollectReport], None] | None = None,
    ) -> FolderWatcher:
        """Collect ``paths`` now, then keep ``kb`` in sync with them until stopped.

        Returns the started watcher: call its ``stop()`` (``close()`` stops it too).
        Changes are debounced; only changed files are re-extracted, deletions remove
        their items. ``on_report`` receives the report of every update.
        """
        options = walk_options or WalkOptions(include=tuple(include), exclude=tuple(exclude))
        roots = [os.path.abspath(os.path.expanduser(os.fspath(path))) for path in paths]
        for root in roots:
            if not os.path.exists(root):
                raise IngestError(root, "no such file or directory")
        for root in roots:
            self.collect_knowledge(root, kb=kb, walk_options=options)

        def apply(changes: ChangeSet) -> None:
            with self.batch():
                for root in roots:
                    changed = [p for p in changes.changed if _under(p, root)]
                    deleted = [p for p in changes.deleted if _under(p, root)]
                    if changed or deleted:
                        report = self.collector.apply_changes(kb, root, options, changed, deleted)
                        if on_report is not None:
                            on_report(report)

        watcher = FolderWatcher(roots, apply, options=options, debounce=debounce, backend=backend)
        watcher.start()
        self._watchers.append(watcher)
        return watcher

    def remove_source(self, path: str | os.PathLike[str], *, kb: str | None = None) -> int:
        """Forget a collected file, folder or doc source (its URL) and delete its items;
        returns how many.

        A folder that was collected as a root is forgotten with everything under it (a
        later ``sync`` will not bring it back); tracked files at or under ``path`` inside a
        root are removed until that root is synced again. ``NotFoundError`` when nothing is
        tracked there.
        """
        if isinstance(path, str) and _is_web_url(path):
            return self._remove_doc_source(path, kb)
        full = os.path.abspath(os.path.expanduser(os.fspath(path)))
        with self._backend.writing():
            removed: list[str] = []
            roots = [r for r in self.storage.sources.get_roots(kb) if r.root == full]
            for root in roots:
                removed.extend(self.storage.sources.delete_root(root.kb, root.root))
            for record in self.storage.sources.sources_at(full):
                if kb is None or record.kb == kb:
                    item_id = self.storage.sources.delete_source(record.kb, record.path)
                    removed.extend([item_id] if item_id else [])
            if not roots and not removed:
                raise NotFoundError(f"nothing collected at {full}")
            self._backend.defer()
        return len(removed)

    def _remove_doc_source(self, url: str, kb: str | None) -> int:
        try:
            start = normalize_url(url)
        except ValueError as exc:
            raise NotFoundError(f"no doc source at {url}: {exc}") from exc
        with self._backend.writing():
            removed: list[str] = []
            sources = [s for s in self.storage.doc_sources.get_doc_sources(kb) if s.url == start]
            for doc in sources:
                removed.extend(self.storage.doc_sources.delete_doc_source(doc.kb, doc.url))
            if not sources:
                raise NotFoundError(f"no doc source at {start}")
            self._backend.defer()
        return len(removed)

    def doc_sources(self, *, kb: str | None = None) -> list[DocSource]:
        """The doc sources crawled into the knowledge bases (or one), by kb and URL."""
        if kb is not None:
            self.get_kb(kb)
        return self.storage.doc_sources.get_doc_sources(kb)

    # -- knowledge bases ---------------------------------------------------------------------

    def create_kb(self, name: str, description: str = "") -> KnowledgeBaseInfo:
        """Create an empty knowledge base; ``ConfigError`` if the name is taken."""
        with self._backend.writing():
            if not self.storage.sources.ensure_kb(_kb_name(name), description):
                raise ConfigError(f"knowledge base {name!r} already exists")
            return self.get_kb(name)

    def get_kb(self, name: str) -> KnowledgeBaseInfo:
        """A knowledge base with its description and counts; ``NotFoundError`` if unknown."""
        info = self.storage.sources.kb_info(name)
        if info is None:
            raise NotFoundError(f"no knowledge base named {name!r}")
        return info

    def list_kbs(self) -> list[KnowledgeBaseInfo]:
        """Every knowledge base, by name."""
        return [self.get_kb(name) for name in self.storage.sources.kb_names()]

    def describe_kb(self, name: str, description: str) -> KnowledgeBaseInfo:
        """Set a knowledge base's description (its intro for agents)."""
        with self._backend.writing():
            self.get_kb(name)
            self.storage.sources.ensure_kb(name, description)
            return self.get_kb(name)

    def remove_kb(self, name: str) -> int:
        """Delete a knowledge base with its items and tracked sources; returns items deleted."""
        with self._backend.writing():
            self.get_kb(name)
            removed = self.storage.sources.delete_kb(name)
            self._backend.defer()
        return len(removed)

    @contextmanager
    def batch(self) -> Iterator[KnowledgeAgentCore]:
        """Hold the data folder's write lock for a block of writes; index them at its end.

        Writes are indexed behind anyway (at the next search, or once enough are pending);
        a batch also keeps other processes' writers out until its end, when the indexes
        catch up — even on error, except Ctrl-C, which leaves them to the next search,
        write or open (the journal keeps every change), so it stops at once.
        """
        with self._writing_batch(None):
            yield self

    @contextmanager
    def _writing_batch(self, progress: ProgressCallback | None) -> Iterator[None]:
        """:meth:`batch`, reporting the indexing at its end as ``indexing`` events."""
        with self._backend.writing():
            try:
                yield
            except KeyboardInterrupt:
                raise
            except BaseException:
                try:
                    self._backend.flush()
                except KnowledgeAgentError as exc:  # the block's own error is the one to see
                    logger.warning("the search indexes could not catch up: %s", exc)
                raise
            self._index_with_progress(progress)

    def rebuild_index(self) -> int:
        """Rebuild both indexes from SQLite (R4.5); returns the number of chunks indexed."""
        with self._backend.writing():
            return self._backend.rebuild()

    # -- reading -------------------------------------------------------------------------

    def get_item(self, item_id: str) -> KnowledgeItem | None:
        """The stored item with this id, or None."""
        return self.storage.get_item(item_id)

    def items_at(
        self, path: str | os.PathLike[str], *, kb: str | None = None
    ) -> list[KnowledgeItem]:
        """The items collected from this file (its absolute path is their ``source_uri``)."""
        uri = os.fspath(path)
        found = self.storage.items_with_source(path_to_db(uri), kb=kb)
        full = os.path.abspath(os.path.expanduser(uri))
        return found or self.storage.items_with_source(path_to_db(full), kb=kb)

    def list_items(
        self, *, kb: str | None = None, source_type: str | None = None, limit: int = 100,
        offset: int = 0,
    ) -> list[KnowledgeItem]:  # fmt: skip
        """A page of items, oldest first (optionally of one kb or source type)."""
        return self.storage.list_items(kb=kb, source_type=source_type, limit=limit, offset=offset)

    def read_chunk(self, chunk_id: str, *, neighbors: int = 1) -> ChunkContext:
        """A chunk with its item and ``neighbors`` chunks on each side; ``NotFoundError``."""
        if isinstance(neighbors, bool) or not isinstance(neighbors, int) or neighbors < 0:
            raise QueryError(f"neighbors must be an integer >= 0, got {neighbors!r}")
        chunk = self.storage.get_chunk_by_id(chunk_id)
        item = self.storage.get_item(chunk.item_id) if chunk else None
        if chunk is None or item is None:
            raise NotFoundError(f"no chunk with id {chunk_id!r}")
        around = self.storage.get_adjacent_chunks(item.id, chunk.chunk_index, neighbors)
        return ChunkContext(
            chunk=chunk,
            item=item,
            before=[c for c in around if c.chunk_index < chunk.chunk_index],
            after=[c for c in around if c.chunk_index > chunk.chunk_index],
        )

    def text_search(
        self,
        pattern: str,
        *,
        kb: str | Iterable[str] | None = None,
        regex: bool = False,
        case_sensitive: bool = False,
        source_keyword: str | None = None,
        max_matches: int = 20,
        max_chars_per_line: int = 180,
    ) -> list[TextMatch]:
        """Lines of stored text containing ``pattern`` (a literal, or a regex with ``regex``).

        Unlike :meth:`search`, this is exact: every line that matches, in document order,
        up to ``max_matches``. ``QueryError`` for an empty or invalid pattern.
        """
        expression = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
        if isinstance(max_matches, bool) or not isinstance(max_matches, int) or max_matches < 1:
            raise QueryError(f"max_matches must be an integer >= 1, got {max_matches!r}")
        names = [kb] if isinstance(kb, str) else list(kb) if kb is not None else [None]
        matches: list[TextMatch] = []
        for name in names:
            lines = matching_lines(
                self.storage.iter_items(kb=name),
                expression,
                source_keyword=source_keyword,
                max_chars_per_line=max_chars_per_line,
            )
            for match in lines:
                matches.append(match)
                if len(matches) == max_matches:
                    return matches
        return matches

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
        path_prefix: str | Iterable[str] | None = None,
        path_glob: str | Iterable[str] | None = None,
        updated_after: datetime | str | None = None,
        updated_before: datetime | str | None = None,
        symbol: str | Iterable[str] | None = None,
        references: str | Iterable[str] | None = None,
        min_score: float | None = None,
        level: str = "auto",
        mode: str = "hybrid",
        min_confidence: float | None = None,
        options: SearchConfig | Mapping[str, Any] | None = None,
        weights: Mapping[str, float] | None = None,
        use_vector: bool | None = None,
        rerank: bool = False,
    ) -> list[SearchResult]:
        """Search the knowledge base: best items first, each with its best chunks and context.

        Filters restrict the search before ranking; ``kb`` and the other name filters take
        one name or several; ``symbol`` / ``references`` keep the code chunks defining /
        using or importing a name ("who uses X"), whole or by its last part. ``level`` is
        ``"auto"``, ``"chunk"`` or ``"item"``; ``mode`` is ``"hybrid"``, ``"keyword"`` or
        ``"semantic"``. Any query text is accepted.
        ``min_confidence`` (0-1) leaves out results that do not answer the query well
        (see :attr:`SearchResult.confidence`): an empty list then means nothing here matches.

        For this query only: ``options`` changes ``SearchConfig`` fields (e.g.
        ``{"recency_weight": 0.5, "mmr_lambda": 0.7, "doc_type_weights": {}}``), ``weights``
        the engines' (``{"keyword": 2, "semantic": 1}``; ``fts`` / ``vector`` also read),
        ``use_vector=False`` ranks by keywords alone, and ``rerank`` has the core's
        ``reranker`` re-score the best results (``ConfigError`` without one).
        """
        config = self._query_config(options, weights)
        if use_vector is False and mode == "hybrid":
            mode = "keyword"
        if rerank and self.reranker is None:
            raise ConfigError("rerank=True needs a reranker: KnowledgeAgentCore(reranker=…)")
        filters = SearchFilters.build(
            kb=kb,
            source_type=source_type,
            doc_type=doc_type,
            language=language,
            path_prefix=path_prefix,
            path_glob=path_glob,
            updated_after=updated_after,
            updated_before=updated_before,
            symbol=symbol,
            references=references,
        )
        self._backend.before_reading()
        with self._lock:
            self._backend.reading()
            return self._backend.answer(
                lambda: self.engine.search(
                    query,
                    limit=limit,
                    context_window=context_window,
                    filters=filters,
                    level=level,
                    mode=mode,
                    min_score=min_score,
                    min_confidence=min_confidence,
                    config=config,
                    reranker=self.reranker if rerank else None,
                ),
                mode,
            )

    def facets(
        self,
        query: str,
        *,
        kb: str | Iterable[str] | None = None,
        source_type: str | Iterable[str] | None = None,
        doc_type: str | Iterable[str] | None = None,
        language: str | Iterable[str] | None = None,
        path_prefix: str | Iterable[str] | None = None,
        path_glob: str | Iterable[str] | None = None,
        updated_after: datetime | str | None = None,
        updated_before: datetime | str | None = None,
        symbol: str | Iterable[str] | None = None,
        references: str | Iterable[str] | None = None,
    ) -> SearchFacets:
        """How many documents match ``query`` per knowledge base, doc type and source type,
        counted before any limit — where else a search could look, and how much is there.

        The filters are :meth:`search`'s. A document matches when it holds one of the
        query's terms (in its title or text); ``min_confidence`` and the like do not apply.
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
            symbol=symbol,
            references=references,
        )
        self._backend.before_reading()
        with self._lock:
            self._backend.reading()
            return self._backend.answer(lambda: self.engine.facets(query, filters), "keyword")

    def pack(self, results: Sequence[SearchResult], *, budget: int) -> PackedContext:
        """``results`` packed into ``budget`` tokens to give a model: adjacent chunks of a
        document (matched ones and their context) merged into one passage, the best
        passages first (:mod:`~knowledge_agent.core.packing`). ``PackedContext.text()`` is
        the text; each passage says where it is. Search with a ``context_window`` for
        passages that read on around what matched."""
        return pack_results(results, budget)

    def _query_config(
        self, options: SearchConfig | Mapping[str, Any] | None, weights: Mapping[str, float] | None
    ) -> SearchConfig | None:
        """The engine's settings with this query's changes, or None when there are none."""
        if options is None and not weights:
            return None
        base = self.engine.config
        if isinstance(options, SearchConfig):
            base, options = options, None
        changes = dict(options or {})
        for name, weight in (weights or {}).items():
            field_name = _WEIGHT_NAMES.get(name)
            if field_name is None:
                raise QueryError(f"weights: unknown engine {name!r}; use {sorted(_WEIGHT_NAMES)}")
            changes[field_name] = weight
        try:
            return dataclasses.replace(base, **changes)
        except TypeError as exc:
            raise ConfigError(f"options: {exc}") from exc

    def explain(self, chunk_id: str, query: str | None = None, **search: Any) -> ScoreExplanation:
        """Why a chunk ranks for ``query`` as it does (``search`` takes :meth:`search`'s
        options); without a query, where the chunk is and its document's boosts.

        A chunk that is not among the best results for the query gets its term counts and
        boosts, zero scores and ``details["ranked"] = False``. ``NotFoundError`` for an
        unknown chunk.
        """
        chunk = self.storage.get_chunk_by_id(chunk_id)
        item = self.storage.get_item(chunk.item_id) if chunk is not None else None
        if chunk is None or item is None:
            raise NotFoundError(f"no chunk with id {chunk_id!r}")
        if query is not None:
            search.setdefault("limit", _EXPLAIN_DEPTH)
            for result in self.search(query, context_window=0, **search):
                for matched in result.matched_chunks:
                    if matched.chunk_id == chunk_id and matched.explanation is not None:
                        return matched.explanation
        boost = self.engine.item_boosts([item.id]).get(item.id, NO_BOOST)
        terms = (
            FieldMatches(
                self.analyzer,
                self.analyzer.terms(query),
                {"heading": chunk.heading, "content": chunk.content},
            ).terms("heading", "content")
            if query
            else {}
        )
        page = chunk.metadata.get("page")
        details: dict[str, Any] = {"chunk_id": chunk.id, "content_hash": chunk_hash(chunk.content)}
        if query is not None:
            details["ranked"] = False
        return ScoreExplanation(
            matched_terms=list(terms),
            term_frequencies=terms,
            document_boost=boost.document,
            recency_boost=boost.time,
            path=item.source_uri or item.title or item.id,
            lines=lines_label(chunk.metadata),
            page=page if isinstance(page, int) else None,
            details=details,
        )

    def resolve_id(self, text: str, kind: str = "item") -> str | None:
        """The full item (or chunk) id ``text`` names: itself, or the one id it is a prefix
        of (at least :data:`_MIN_ID_PREFIX` characters); None when it names none.
        ``QueryError`` when a prefix fits several, naming them."""
        found = self.storage.ids_with_prefix(kind, text, limit=1)
        if found and found[0] == text:
            return text
        if len(text) < _MIN_ID_PREFIX:
            return None
        several = self.storage.ids_with_prefix(kind, text, limit=3)
        if len(several) > 1:
            raise QueryError(
                f"{kind} id prefix {text!r} fits several: {', '.join(several[:2])}"
                + (" …" if len(several) > 2 else "")
                + "; give more of it"
            )
        return several[0] if several else None

    def short_id(self, full: str, kind: str = "item") -> str:
        """The shortest prefix of ``full`` (at least :data:`_MIN_ID_PREFIX` characters) that
        names it alone — what the command line shows."""
        for length in range(_MIN_ID_PREFIX, len(full), 4):
            if len(self.storage.ids_with_prefix(kind, full[:length], limit=2)) < 2:
                return full[:length]
        return full

    def check_citation(self, ref: str) -> CitationCheck:
        """Whether the text an evidence reference cites is still there, moved, changed or
        gone (``QueryError`` for a string that is not a reference)."""
        return check_citation(self.storage, ref)

    def status(self) -> IndexStatus:
        """Counts, sizes on disk, and whether both indexes agree with SQLite and are whole:
        every index file is checked for its size (and the small ones for their checksum),
        as opening does."""
        return self._status(full=False)

    def usage(self) -> dict[str, ServiceUsage]:
        """What the embedder (``"embedding"``) and the reranker (``"rerank"``) were asked
        for: requests, texts and tokens, counted by the providers since they were made (for
        a core built from settings, since it was opened), not stored. A provider without a
        ``usage`` counter of its own is left out."""
        found = {}
        for kind, provider in (("embedding", self.embedder), ("rerank", self.reranker)):
            counter = getattr(provider, "usage", None)
            if isinstance(counter, UsageCounter):
                found[kind] = counter.snapshot(getattr(provider, "name", ""))
        return found

    def _status(self, *, full: bool) -> IndexStatus:
        self._backend.before_reading()
        with self._lock:
            self._backend.reading()
            kbs = self.list_kbs()
            applied = min(self.keyword_index.applied_seq, self.semantic_searcher.applied_seq)
            latest = max(
                (info.last_indexed_at for info in kbs if info.last_indexed_at), default=None
            )
            status = IndexStatus(
                data_dir=None if self.data_dir is None else str(self.data_dir),
                knowledge_bases=len(kbs),
                items=self.storage.count_items(),
                chunks=self.storage.count_chunks(),
                sources=sum(info.sources for info in kbs),
                roots=len(self.storage.sources.get_roots()),
                keyword_items=_count(self.keyword_index.item_count),
                keyword_chunks=_count(self.keyword_index.chunk_count),
                semantic_items=_count(self.semantic_searcher.item_count),
                semantic_chunks=_count(self.semantic_searcher.chunk_count),
                pending_changes=len(self.storage.journal_since(applied)),
                last_indexed_at=latest.isoformat() if latest else None,
                sizes=self._sizes(),
                damaged=self._backend.damage(full=full),
                backend=self.backend_url,
                chunking=self.chunker.config.to_dict(),
                rechunk_pending=self.rechunk_pending(),
            )
        damaged: dict[str, list[IndexDamage]] = {}
        for damage in status.damaged:
            damaged.setdefault(damage.index, []).append(damage)
        for index, found in damaged.items():
            more = f" (and {len(found) - 1} more files)" if len(found) > 1 else ""
            status.problems.append(
                f"the {index} index is damaged: {found[0].file}: {found[0].problem}{more}"
            )
        for name, items, chunks in (
            ("keyword", status.keyword_items, status.keyword_chunks),
            ("semantic", status.semantic_items, status.semantic_chunks),
        ):
            if name not in damaged and (items, chunks) != (status.items, status.chunks):
                status.problems.append(
                    f"the {name} index holds {items} items and {chunks} chunks; "
                    f"the database {status.items} and {status.chunks}"
                )
        if status.pending_changes:
            status.problems.append(f"{status.pending_changes} changes not yet indexed")
        return status

    def check(self, *, repair: bool = False) -> IndexStatus:
        """:meth:`status`, with the checksum of every index file verified (``damaged``
        lists what is not as written); with ``repair``, a damaged index is rebuilt from
        SQLite, and the indexes are rebuilt when they still disagree with it."""
        status = self._status(full=True)
        if repair and not status.consistent:
            logger.warning("repairing the search indexes: %s", "; ".join(status.problems))
            if status.damaged:
                self._backend.repair({damage.index for damage in status.damaged})
                status = self._status(full=True)
            if not status.consistent:
                self.rebuild_index()
                status = self._status(full=True)
            status.repaired = True
        return status

    def _sizes(self) -> dict[str, int]:
        if self.data_dir is None:
            return {"database": 0, "keyword_index": 0, "semantic_index": 0}

        def size(path: Path) -> int:
            if path.is_file():
                return path.stat().st_size
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

        database = sum(
            size(path) for path in self.data_dir.glob(f"{DATABASE_FILE}*") if path.is_file()
        )
        return {
            "database": database,
            "keyword_index": size(self.data_dir / "index" / "whoosh"),
            "semantic_index": size(self.data_dir / "index" / "tfidf"),
        }

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the watchers, release the indexes and the database; safe to call twice."""
        for watcher in getattr(self, "_watchers", ()):
            watcher.stop()
        for name in ("_backend", "storage"):
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
