"""WebCollector: bring a knowledge base in line with a documentation source on the web.

A run crawls the source (one page, a sitemap or a site; see :mod:`knowledge_agent.crawl`),
asking the server only for pages changed since the last run (ETag / Last-Modified, else a
content hash), and stores each new or changed page as an item with its page row; a
changed page keeps its item id. A page that answers 404 or 410 is removed, and so is a
page no longer linked or listed once a crawl reached everything in scope. A page that
fails (timeout, 5xx …) is reported and keeps what was indexed before.

Ctrl-C ends a run with ``CollectInterrupted`` carrying the report of what was committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
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

# Pages stored in one SQLite transaction: at most this many, or this many seconds.
_GROUP_PAGES = 64
_GROUP_SECONDS = 0.25


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
    ) -> CollectReport:
        """Crawl ``source`` and store what changed; with ``full``, re-process every page."""
        options = CrawlOptions.from_dict(source.options)
        pages = self.storage.doc_sources.get_doc_pages(source.kb, source.url)
        known = {
            key: KnownPage(
                page.url,
                etag=None if full else page.etag,
                last_modified=None if full else page.last_modified,
                content_hash=None if full else page.content_hash,
                links=page.links,
            )
            for key, page in pages.items()
            if page.status == "indexed"
        }
        report = CollectReport(kb=source.kb)
        run = _Run(self, source, options, pages, report, progress)
        error = ""
        with timed(report):
            try:
                with Crawler(source.url, options, known=known, policy=policy) as crawler:
                    for event in crawler:
                        check_interrupt()
                        run.add(event)
                    run.flush()
                    summary = crawler.summary
                run.remove_unseen(summary)
            finally:
                run.flush()
                if not report.processed and report.failed and not report.unchanged:
                    error = report.failed[0].reason
                # A crawl that reached nothing (offline, a typo in the host) stays due, so
                # the next sync tries again instead of a day later.
                crawled = source.crawled_at if error else utc_now()
                self.storage.doc_sources.save_doc_source(
                    replace(source, crawled_at=crawled, last_error=error)
                )
        logger.info(
            "crawled %s into %s: %d processed, %d unchanged, %d skipped, %d failed, %d removed",
            source.url, source.kb, report.processed, report.unchanged, len(report.skipped),
            len(report.failed), report.removed,
        )  # fmt: skip
        return report


class _Run:
    """One crawl's pages on their way into SQLite, committed in small groups."""

    def __init__(
        self,
        collector: WebCollector,
        source: DocSource,
        options: CrawlOptions,
        pages: dict[str, DocPage],
        report: CollectReport,
        progress: ProgressCallback | None,
    ) -> None:
        self.collector = collector
        self.storage = collector.storage
        self.source = source
        self.options = options
        self.pages = pages
        self.report = report
        self.progress = progress
        self.doc_type_rules = collector.doc_type_rules
        self.group: list[CrawlPage | CrawlFailure] = []
        self.started = time.monotonic()
        self.done = 0
        self.bytes_done = 0

    def add(self, event: CrawlPage | CrawlFailure) -> None:
        self.group.append(event)
        if len(self.group) >= _GROUP_PAGES or time.monotonic() - self.started >= _GROUP_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Store the pending pages in one transaction; progress once they are committed."""
        if not self.group:
            return
        group, self.group, self.started = self.group, [], time.monotonic()
        stored: list[tuple[str, str, int]] = []
        with committing():
            try:
                with self.storage.write_group("crawl"):
                    for event in group:
                        if interrupt_requested():
                            break  # the rest of the group is simply not done yet
                        status = self._store(event)
                        size = len(event.body) if isinstance(event, CrawlPage) else 0
                        stored.append((event.url, status, size))
            finally:
                for url, status, size in stored:
                    self._step(url, status, size)
        check_interrupt()

    def remove_unseen(self, summary: CrawlSummary) -> None:
        """After a crawl that reached everything in scope: drop the pages it did not see."""
        if not summary.complete:
            return
        for key, page in self.pages.items():
            if key not in summary.seen:
                check_interrupt()
                with committing():
                    self._remove(key, page)
                    self._step(page.url, "removed")

    def _step(self, url: str, status: str, size: int = 0) -> None:
        self.done += 1
        self.bytes_done += size
        if self.progress is not None:
            self.progress(CollectProgress(url, status, self.done, 0, self.bytes_done, 0))

    def _store(self, event: CrawlPage | CrawlFailure) -> str:
        if isinstance(event, CrawlFailure):
            return self._failure(event)
        known = self.pages.get(event.key)
        row = DocPage(
            kb=self.source.kb,
            key=event.key,
            source_url=self.source.url,
            url=event.url,
            status="indexed",
            item_id=known.item_id if known else None,
            etag=event.etag,
            last_modified=event.last_modified,
            content_hash=event.content_hash,
            links=event.links,
            http_status=event.status,
        )
        if event.unchanged and known is not None and known.status == "indexed":
            self.storage.doc_sources.save_doc_page(row)
            self.report.unchanged += 1
            return "unchanged"
        try:
            document = page_document(event, self.options, self.collector.chunk_config)
        except UnsupportedSourceError as exc:
            return self._skip(event.key, event.url, exc.reason, event.status)
        except IngestError as exc:
            return self._fail(event.key, event.url, exc.reason, event.status)
        except Exception as exc:  # a processor bug must not stop the crawl
            logger.exception("processing %s failed", event.url)
            return self._fail(event.key, event.url, f"{type(exc).__name__}: {exc}", event.status)
        item = self._item(event, known, document)
        old_chunks = self.storage.count_chunks(item_id=item.id) if known and known.item_id else 0
        self.storage.doc_sources.save_doc_page_item(
            replace(row, item_id=item.id), item, document.chunks
        )
        self.report.processed += 1
        self.report.chunks_added += len(document.chunks)
        self.report.chunks_removed += old_chunks
        self.report.bytes_processed += len(event.body)
        self.report.item_ids.append(item.id)
        return "processed"

    def _failure(self, event: CrawlFailure) -> str:
        key = url_key(event.url)
        if event.gone:
            known = self.pages.get(key)
            if known is not None:
                self._remove(key, known)
                return "removed"
            return self._skip(key, event.url, event.reason, event.status)
        if event.skipped:
            return self._skip(key, event.url, event.reason, event.status)
        return self._fail(key, event.url, event.reason, event.status)

    def _skip(self, key: str, url: str, reason: str, status: int | None) -> str:
        known = self.pages.get(key)
        if known is not None and known.item_id:
            self._remove(key, known)
        self.storage.doc_sources.save_doc_page(
            DocPage(self.source.kb, key, self.source.url, url, "skipped",
                    http_status=status, error=reason)
        )  # fmt: skip
        self.report.skipped.append(FileIssue(url, reason, _skip_kind(reason)))
        return "skipped"

    def _fail(self, key: str, url: str, reason: str, status: int | None) -> str:
        # What was indexed before stays (the failure may be passing); the next run retries.
        logger.warning("could not crawl %s: %s", url, reason)
        known = self.pages.get(key)
        if known is None or known.status != "indexed":
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
        self, page: CrawlPage, known: DocPage | None, document: ProcessedDocument
    ) -> KnowledgeItem:
        metadata = dict(document.metadata)
        metadata.update(
            {
                "url": page.url,
                "doc_source": self.source.url,
                "fetched_at": utc_now().isoformat(),
                "http_status": page.status,
                "size": len(page.body),
            }
        )
        if page.last_modified:
            metadata["last_modified"] = page.last_modified
        return build_item(
            self.storage,
            document.content,
            item_id=known.item_id if known else None,
            title=document.title or page.url,
            source_type=document.source_type,
            source_uri=page.url,
            content_type=document.content_type,
            doc_type=doc_type_for(urlsplit(page.url).path.lstrip("/"), "", self.doc_type_rules),
            language=document.language or None,
            tags=[*self.source.tags, *(t for t in document.tags if t not in self.source.tags)],
            metadata=metadata,
            kb=self.source.kb,
        )
