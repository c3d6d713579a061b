"""WebCollector: bring a knowledge base in line with a documentation source on the web.

A run crawls the source (one page, a sitemap or a site; see :mod:`knowledge_agent.crawl`),
asking the server only for pages changed since the last run (ETag / Last-Modified, else a
content hash), and stores each new or changed page as an item with its page row; a
changed page keeps its item id. A page that answers 404 or 410 is removed, and so is a
page no longer linked or listed once a crawl reached everything in scope. A page that
fails (timeout, 5xx …) is reported and keeps what was indexed before.

**No lock is held while waiting on the network.** The crawl runs on a thread of its own
(:class:`_Feed`); the calling thread extracts and chunks each page as it arrives, and
stores the pages in groups — at most :data:`_GROUP_PAGES`, or what arrived within
:data:`_GROUP_SECONDS` of a group's first page, even while the next page is still on its
way — each group in one SQLite transaction inside one ``commit()`` block (the core's:
the data folder's write lock, then the indexes brought up to date). Searches, and writers
in other processes, wait at most for one such group.

Ctrl-C ends a run with ``CollectInterrupted`` carrying the report of what was committed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from types import TracebackType
from urllib.parse import urlsplit

from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.crawl import (
    Crawler,
    CrawlFailure,
    CrawlOptions,
    CrawlPage,
    CrawlSummary,
    KnownPage,
    UrlPolicy,
    url_key,
)
from knowledge_agent.errors import IngestError, UnsupportedSourceError
from knowledge_agent.ingest.doc_types import doc_type_for
from knowledge_agent.ingest.interrupts import (
    check_interrupt,
    committing,
    interrupt_requested,
    timed,
)
from knowledge_agent.ingest.items import build_item
from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue
from knowledge_agent.ingest.web_pages import page_document
from knowledge_agent.models import KnowledgeItem
from knowledge_agent.models.knowledge_item import utc_now
from knowledge_agent.processors import ProcessedDocument
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.doc_sources import DocPage, DocSource

__all__ = ["WebCollector"]

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[CollectProgress], None]
Commit = Callable[[], AbstractContextManager[object]]

# Pages stored in one SQLite transaction: at most this many, or those that arrived within
# this many seconds of the group's first.
_GROUP_PAGES = 64
_GROUP_SECONDS = 1.0
# Events the crawl thread may hand over before the caller takes them: few, as each holds
# a page's body; the crawler fetches no further meanwhile.
_FEED_EVENTS = 8
_POLL = 0.1  # how often a waiting thread looks for Ctrl-C or the end of the run, in seconds
_JOIN_SECONDS = 10.0  # a stopped crawl thread ends within _POLL; this is a hang guard
_SOURCE_REMOVED = "the doc source was removed while it was being crawled"


def _skip_kind(reason: str) -> str:
    """Group crawl skips in a report by what they have in common."""
    for prefix, kind in (
        ("disallowed by robots", "robots.txt"),
        ("unsupported content type", "content type"),
        ("larger than", "too large"),
        ("refused", "not allowed"),
        ("not allowed", "not allowed"),
    ):
        if reason.startswith(prefix):
            return kind
    return ""


def _off_origin_note(start: str, off_origin: Sequence[tuple[str, int]]) -> str:
    """What to say of sitemap URLs left out as on another origin, and what to do instead.

    A site built for another address lists that address in its sitemap (MkDocs writes its
    ``site_url`` there), so none of its URLs is on the origin the sitemap was read from.
    """
    count = sum(number for _, number in off_origin)
    origins = ", ".join(origin for origin, _ in off_origin[:3])
    more = ", …" if len(off_origin) > 3 else ""
    parts = urlsplit(start)
    home = f"{parts.scheme}://{parts.netloc}/"
    return (
        f"{count} sitemap URL{'s' if count != 1 else ''} on another origin skipped "
        f"({origins}{more}): crawl the site from one of its pages instead ({home}), or let "
        "the crawl leave the start URL's origin (--any-origin, same_origin=False) to fetch "
        "them there"
    )


class _SourceRemoved(Exception):
    """The doc source's row is gone (another writer removed it): the crawl stops."""


class WebCollector:
    """Crawls doc sources into one SQLite store; see the module docstring."""

    def __init__(
        self,
        storage: SQLiteStorageManager,
        chunk_config: ChunkConfig,
        *,
        doc_type_rules: dict[str, str] | None = None,
    ) -> None:
        self.storage = storage
        self.chunk_config = chunk_config
        self.doc_type_rules = doc_type_rules

    def collect(
        self,
        source: DocSource,
        *,
        full: bool = False,
        policy: UrlPolicy | None = None,
        progress: ProgressCallback | None = None,
        commit: Commit = nullcontext,
    ) -> CollectReport:
        """Crawl ``source`` and store what changed; with ``full``, re-process every page.

        Every write happens inside a ``commit()`` block, one per group of pages and one
        for the source's row at the end: the caller's write lock (and index update), held
        for the writes only, never while a page is fetched or extracted. A source removed
        by another writer during the crawl stops it, reported as failed.
        """
        options = CrawlOptions.from_dict(source.options)
        # Read without the lock: what the crawl asks the server about. Every write re-reads
        # the rows it changes inside the lock (see _Run._store).
        before = self.storage.doc_sources.get_doc_pages(source.kb, source.url)
        known = {
            key: KnownPage(
                page.url,
                etag=None if full else page.etag,
                last_modified=None if full else page.last_modified,
                content_hash=None if full else page.content_hash,
                links=page.links,
            )
            for key, page in before.items()
            if page.status == "indexed"
        }
        report = CollectReport(kb=source.kb)
        run = _Run(self, source, options, before, report, progress, commit)
        with timed(report):
            try:
                with Crawler(source.url, options, known=known, policy=policy) as crawler:
                    summary = run.crawl(crawler)
                run.finish(summary)
            except _SourceRemoved:
                logger.warning("%s in %s: %s", source.url, source.kb, _SOURCE_REMOVED)
                report.failed.append(FileIssue(source.url, _SOURCE_REMOVED))
        logger.info(
            "crawled %s into %s: %d processed, %d unchanged, %d skipped, %d failed, %d removed",
            source.url, source.kb, report.processed, report.unchanged, len(report.skipped),
            len(report.failed), report.removed,
        )  # fmt: skip
        return report


_END = object()  # the crawl thread's last word


class _Feed:
    """A crawler iterated on a thread of its own, so that the caller can wait for its
    events with a timeout: what arrived is committed while the next page is on its way.

    The crawl thread is the crawler's one consumer; leaving the block stops the crawl and
    waits for that thread, after which the crawler's summary is final.
    """

    def __init__(self, crawler: Crawler) -> None:
        self._crawler = crawler
        self._events: queue.Queue[object] = queue.Queue(maxsize=_FEED_EVENTS)
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._pump, name="crawl-feed", daemon=True)
        self.finished = False  # the crawl ended and every event was taken

    def __enter__(self) -> _Feed:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopped.set()
        self._crawler.stop()
        self._thread.join(_JOIN_SECONDS)
        if self._thread.is_alive():
            logger.warning("the crawl thread did not stop; leaving it behind")

    def get(self, timeout: float) -> CrawlPage | CrawlFailure | None:
        """The crawl's next page or failure; None when none came within ``timeout``
        seconds, or the crawl ended (:attr:`finished`). An error of the crawl is raised."""
        if self.finished:
            return None
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if event is _END:
            self.finished = True
            if self._error is not None:
                raise self._error
            return None
        assert isinstance(event, CrawlPage | CrawlFailure)
        return event

    def _pump(self) -> None:
        try:
            for event in self._crawler:
                if not self._put(event):
                    return  # stopped: the caller's Crawler block ends the crawl
        except BaseException as exc:  # raised in the caller's thread
            self._error = exc
        self._put(_END)

    def _put(self, event: object) -> bool:
        while not self._stopped.is_set():
            try:
                self._events.put(event, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False


@dataclass(frozen=True)
class _Pending:
    """A page or failure of the crawl, extracted and waiting for its group's commit. A
    page's body is dropped once extracted: ``size`` keeps its length."""

    event: CrawlPage | CrawlFailure
    key: str
    size: int = 0
    document: ProcessedDocument | None = None
    skip: str = ""  # why extraction left the page out
    error: str = ""  # why extraction failed


class _Run:
    """One crawl's pages on their way into SQLite, committed in small groups."""

    def __init__(
        self,
        collector: WebCollector,
        source: DocSource,
        options: CrawlOptions,
        before: dict[str, DocPage],
        report: CollectReport,
        progress: ProgressCallback | None,
        commit: Commit,
    ) -> None:
        self.collector = collector
        self.storage = collector.storage
        self.source = source
        self.options = options
        self.before = before
        self.report = report
        self.progress = progress
        self.commit = commit
        self.doc_type_rules = collector.doc_type_rules
        self.group: list[_Pending] = []
        self.due = 0.0  # when the group's first page has waited long enough
        self.done = 0
        self.bytes_done = 0

    def crawl(self, crawler: Crawler) -> CrawlSummary:
        """Extract each page as it comes, commit the groups; the crawl's summary."""
        with _Feed(crawler) as feed:
            while not feed.finished:
                wait = _POLL if not self.group else self.due - time.monotonic()
                event = feed.get(min(_POLL, max(wait, 0.0)))
                check_interrupt()
                if event is not None:
                    if not self.group:
                        self.due = time.monotonic() + _GROUP_SECONDS
                    self.group.append(self._prepare(event))
                if self.group and (len(self.group) >= _GROUP_PAGES or time.monotonic() >= self.due):
                    self.flush()
            self.flush()
        return crawler.summary

    def _prepare(self, event: CrawlPage | CrawlFailure) -> _Pending:
        """Everything about an event that needs no storage: extraction and chunking."""
        if isinstance(event, CrawlFailure):
            return _Pending(event, url_key(event.url))
        bare, size = replace(event, body=b""), len(event.body)
        if event.unchanged:
            return _Pending(bare, event.key, size)
        try:
            document = page_document(event, self.options, self.collector.chunk_config)
        except UnsupportedSourceError as exc:
            return _Pending(bare, event.key, size, skip=exc.reason)
        except IngestError as exc:
            return _Pending(bare, event.key, size, error=exc.reason)
        except Exception as exc:  # a processor bug must not stop the crawl
            logger.exception("processing %s failed", event.url)
            return _Pending(bare, event.key, size, error=f"{type(exc).__name__}: {exc}")
        return _Pending(bare, event.key, size, document)

    def flush(self) -> None:
        """Store the pending pages in one transaction; progress once they are committed."""
        if not self.group:
            return
        group, self.group = self.group, []

        def store(stored: list[tuple[str, str, int]]) -> None:
            for pending in group:
                if interrupt_requested():
                    break  # the rest of the group is simply not done yet
                status = self._store(pending)
                stored.append((pending.event.url, status, pending.size))

        self._write(store)

    def finish(self, summary: CrawlSummary) -> None:
        """After the crawl: drop the pages it did not see, if it reached everything in
        scope; then record when the source was crawled."""
        self.report.stopped_by.extend(summary.limits)
        if summary.off_origin:
            self.report.notes.append(_off_origin_note(self.source.url, summary.off_origin))
        if summary.complete:
            unseen = [key for key in self.before if key not in summary.seen]
            for start in range(0, len(unseen), _GROUP_PAGES):
                check_interrupt()
                keys = unseen[start : start + _GROUP_PAGES]
                self._write(lambda stored, keys=keys: self._remove_unseen(keys, stored))
        report = self.report
        error = ""
        if not report.processed and report.failed and not report.unchanged:
            error = report.failed[0].reason
        with self.commit():
            source = self._current_source()
            # A crawl that reached nothing (offline, a typo in the host) stays due, so
            # the next sync tries again instead of a day later.
            crawled = source.crawled_at if error else utc_now()
            self.storage.doc_sources.save_doc_source(
                replace(source, crawled_at=crawled, last_error=error)
            )

    def _write(self, store: Callable[[list[tuple[str, str, int]]], None]) -> None:
        """Run ``store`` in one transaction under the caller's write lock; a progress
        event for each ``(url, status, bytes)`` it stored."""
        stored: list[tuple[str, str, int]] = []
        with self.commit():
            self.source = self._current_source()
            with committing():
                try:
                    with self.storage.write_group("crawl"):
                        store(stored)
                finally:
                    for url, status, size in stored:
                        self._step(url, status, size)
        check_interrupt()

    def _current_source(self) -> DocSource:
        """The source's row as it is now (its tags may have changed; it may be gone)."""
        source = self.storage.doc_sources.get_doc_source(self.source.kb, self.source.url)
        if source is None:
            raise _SourceRemoved(self.source.url)
        return source

    def _remove_unseen(self, keys: Sequence[str], stored: list[tuple[str, str, int]]) -> None:
        for key in keys:
            if interrupt_requested():
                break
            # Only a page still this source's: another writer may have removed it, or
            # moved it to another source, since the crawl began.
            page = self.storage.doc_sources.get_doc_page(self.source.kb, key)
            if page is not None and page.source_url == self.source.url:
                self._remove(key, page)
                stored.append((page.url, "removed", 0))

    def _step(self, url: str, status: str, size: int = 0) -> None:
        self.done += 1
        self.bytes_done += size
        if self.progress is not None:
            self.progress(CollectProgress(url, status, self.done, 0, self.bytes_done, 0))

    def _store(self, pending: _Pending) -> str:
        """Under the write lock: store one page or failure, against its row as it is now.

        The rows read before the crawl only shaped its requests. Another process may have
        written this page since (a crawl of its own, a removal), so its row is read again
        here: its item id is kept (a page has one item: a second would be an orphan no
        crawl removes), and an unchanged answer only stands if the stored text is still
        the one the server confirmed.
        """
        event = pending.event
        current = self.storage.doc_sources.get_doc_page(self.source.kb, pending.key)
        if isinstance(event, CrawlFailure):
            return self._failure(event, pending.key, current)
        row = DocPage(
            kb=self.source.kb,
            key=event.key,
            source_url=self.source.url,
            url=event.url,
            status="indexed",
            item_id=current.item_id if current else None,
            etag=event.etag,
            last_modified=event.last_modified,
            content_hash=event.content_hash,
            links=event.links,
            http_status=event.status,
        )
        if event.unchanged:
            if (
                current is not None
                and current.status == "indexed"
                and current.content_hash == event.content_hash
            ):
                self.storage.doc_sources.save_doc_page(row)
                self.report.unchanged += 1
                return "unchanged"
            # Another writer stored another version of the page, or removed it, after the
            # crawl read its row: a 304 has no text to store, so that writer's row stands
            # and the next crawl compares with it.
            reason = "changed by another writer during the crawl"
            self.report.skipped.append(FileIssue(event.url, reason))
            return "skipped"
        if pending.skip:
            return self._skip(event.key, event.url, pending.skip, event.status, current)
        if pending.error:
            return self._fail(event.key, event.url, pending.error, event.status, current)
        document = pending.document
        assert document is not None
        item = self._item(event, row.item_id, document, pending.size)
        old_chunks = self.storage.count_chunks(item_id=row.item_id) if row.item_id else 0
        self.storage.doc_sources.save_doc_page_item(
            replace(row, item_id=item.id), item, document.chunks
        )
        self.report.processed += 1
        self.report.chunks_added += len(document.chunks)
        self.report.chunks_removed += old_chunks
        self.report.bytes_processed += pending.size
        self.report.item_ids.append(item.id)
        return "processed"

    def _failure(self, event: CrawlFailure, key: str, current: DocPage | None) -> str:
        if event.gone:
            if current is not None:
                self._remove(key, current)
                return "removed"
            return self._skip(key, event.url, event.reason, event.status, current)
        if event.skipped:
            return self._skip(key, event.url, event.reason, event.status, current)
        return self._fail(key, event.url, event.reason, event.status, current)

    def _skip(
        self, key: str, url: str, reason: str, status: int | None, current: DocPage | None
    ) -> str:
        if current is not None and current.item_id:
            self._remove(key, current)
        self.storage.doc_sources.save_doc_page(
            DocPage(self.source.kb, key, self.source.url, url, "skipped",
                    http_status=status, error=reason)
        )  # fmt: skip
        self.report.skipped.append(FileIssue(url, reason, _skip_kind(reason)))
        return "skipped"

    def _fail(
        self, key: str, url: str, reason: str, status: int | None, current: DocPage | None
    ) -> str:
        # What was indexed before stays (the failure may be passing); the next run retries.
        logger.warning("could not crawl %s: %s", url, reason)
        if current is None or current.status != "indexed":
            self.storage.doc_sources.save_doc_page(
                DocPage(self.source.kb, key, self.source.url, url, "failed",
                        http_status=status, error=reason)
            )  # fmt: skip
        self.report.failed.append(FileIssue(url, reason))
        return "failed"

    def _remove(self, key: str, page: DocPage) -> None:
        if page.item_id:
            self.report.chunks_removed += self.storage.count_chunks(item_id=page.item_id)
        self.storage.doc_sources.delete_doc_page(self.source.kb, key)
        self.report.removed += 1

    def _item(
        self, page: CrawlPage, item_id: str | None, document: ProcessedDocument, size: int
    ) -> KnowledgeItem:
        metadata = dict(document.metadata)
        metadata.update(
            {
                "url": page.url,
                "doc_source": self.source.url,
                "fetched_at": utc_now().isoformat(),
                "http_status": page.status,
                "size": size,
            }
        )
        if page.last_modified:
            metadata["last_modified"] = page.last_modified
        return build_item(
            self.storage,
            document.content,
            item_id=item_id,
            title=document.title or page.url,
            source_type=document.source_type,
            source_uri=page.url,
            content_type=document.content_type,
            doc_type=doc_type_for(urlsplit(page.url).path.lstrip("/"), "", self.doc_type_rules),
            language=document.language or "",  # told by page_document
            tags=[*self.source.tags, *(t for t in document.tags if t not in self.source.tags)],
            metadata=metadata,
            kb=self.source.kb,
        )
