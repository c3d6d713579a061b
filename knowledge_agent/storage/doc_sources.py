"""Documentation sources crawled from the web, and the pages each crawl found.

A *doc source* is a start URL (one page, a sitemap or a site) collected into a knowledge
base with its crawl options, tags and refresh interval; a *doc page* is one URL it
reached, with the validators (ETag, Last-Modified, content hash) and links it had when
last fetched, so the next crawl asks the server "changed since?" and an unchanged page
costs one request. A page row is deleted with its item (``ON DELETE CASCADE``) and with
its source. :class:`DocSourceStore` reads and writes these rows on the connection of the
:class:`SQLiteStorageManager` that owns it (``storage.doc_sources``).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from knowledge_agent.errors import StorageError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.models.knowledge_item import utc_now
from knowledge_agent.storage.connection import StoreConnection

__all__ = [
    "DEFAULT_REFRESH_INTERVAL",
    "DOC_SOURCES_MIGRATION",
    "DocPage",
    "DocSource",
    "DocSourceStore",
]

DEFAULT_REFRESH_INTERVAL = 24 * 3600.0
"""Seconds after a crawl before ``sync`` crawls a doc source again."""

PAGE_STATUSES = ("indexed", "skipped", "failed")

DOC_SOURCES_MIGRATION = [
    """CREATE TABLE doc_sources (
        kb TEXT NOT NULL REFERENCES knowledge_bases(name) ON DELETE CASCADE,
        url TEXT NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        options TEXT NOT NULL DEFAULT '{}',
        tags TEXT NOT NULL DEFAULT '[]',
        enabled INTEGER NOT NULL DEFAULT 1,
        refresh_interval REAL NOT NULL,
        added_at TEXT NOT NULL,
        crawled_at TEXT,
        last_error TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (kb, url)
    )""",
    f"""CREATE TABLE doc_pages (
        kb TEXT NOT NULL,
        key TEXT NOT NULL,
        source_url TEXT NOT NULL,
        url TEXT NOT NULL,
        item_id TEXT REFERENCES knowledge_items(id) ON DELETE CASCADE,
        etag TEXT,
        last_modified TEXT,
        content_hash TEXT NOT NULL DEFAULT '',
        links TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL CHECK (status IN {PAGE_STATUSES!r}),
        http_status INTEGER,
        error TEXT NOT NULL DEFAULT '',
        fetched_at TEXT NOT NULL,
        PRIMARY KEY (kb, key),
        FOREIGN KEY (kb, source_url) REFERENCES doc_sources(kb, url) ON DELETE CASCADE
    )""",
    "CREATE INDEX idx_doc_pages_source ON doc_pages (kb, source_url)",
    "CREATE INDEX idx_doc_pages_item ON doc_pages (item_id)",
]


@dataclass(frozen=True)
class DocSource:
    """A start URL collected into a knowledge base, with how to crawl it and when again.

    ``options`` are the crawl options as a dict (``CrawlOptions.to_dict()``);
    ``refresh_interval`` is in seconds (0: never due, only crawled on request);
    ``pages`` counts its page rows when read back.
    """

    kb: str
    url: str
    name: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    enabled: bool = True
    refresh_interval: float = DEFAULT_REFRESH_INTERVAL
    added_at: datetime = field(default_factory=utc_now)
    crawled_at: datetime | None = None
    last_error: str = ""
    pages: int = 0

    def due(self, now: datetime | None = None) -> bool:
        """Whether ``sync`` should crawl it: enabled, and never crawled or due again."""
        if not self.enabled:
            return False
        if self.crawled_at is None:
            return True
        if self.refresh_interval <= 0:
            return False
        return (now or utc_now()) >= self.crawled_at + timedelta(seconds=self.refresh_interval)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; datetimes become ISO 8601 strings."""
        return {
            "kb": self.kb,
            "url": self.url,
            "name": self.name,
            "options": dict(self.options),
            "tags": list(self.tags),
            "enabled": self.enabled,
            "refresh_interval": self.refresh_interval,
            "added_at": self.added_at.isoformat(),
            "crawled_at": self.crawled_at.isoformat() if self.crawled_at else None,
            "last_error": self.last_error,
            "pages": self.pages,
        }


@dataclass(frozen=True)
class DocPage:
    """One page of a doc source as last fetched (or skipped, or failed)."""

    kb: str
    key: str
    source_url: str
    url: str
    status: str
    item_id: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str = ""
    links: tuple[str, ...] = ()
    http_status: int | None = None
    error: str = ""
    fetched_at: datetime = field(default_factory=utc_now)


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise StorageError(f"corrupt timestamp {text!r}: {exc}") from exc


def _loads(text: str, kind: type, table: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StorageError(f"corrupt JSON in {table}: {exc}") from exc
    return value if isinstance(value, kind) else kind()


def _source(row: sqlite3.Row) -> DocSource:
    return DocSource(
        kb=row["kb"],
        url=row["url"],
        name=row["name"],
        options=_loads(row["options"], dict, "doc_sources"),
        tags=tuple(_loads(row["tags"], list, "doc_sources")),
        enabled=bool(row["enabled"]),
        refresh_interval=float(row["refresh_interval"]),
        added_at=_time(row["added_at"]) or utc_now(),
        crawled_at=_time(row["crawled_at"]),
        last_error=row["last_error"],
        pages=int(row["pages"]),
    )


def _page(row: sqlite3.Row) -> DocPage:
    return DocPage(
        kb=row["kb"],
        key=row["key"],
        source_url=row["source_url"],
        url=row["url"],
        status=row["status"],
        item_id=row["item_id"],
        etag=row["etag"],
        last_modified=row["last_modified"],
        content_hash=row["content_hash"],
        links=tuple(_loads(row["links"], list, "doc_pages")),
        http_status=row["http_status"],
        error=row["error"],
        fetched_at=_time(row["fetched_at"]) or utc_now(),
    )


_SOURCE_SELECT = (
    "SELECT s.*, (SELECT COUNT(*) FROM doc_pages AS p "
    "WHERE p.kb = s.kb AND p.source_url = s.url AND p.status = 'indexed') AS pages "
    "FROM doc_sources AS s"
)
_PAGE_UPSERT = (
    "INSERT INTO doc_pages (kb, key, source_url, url, item_id, etag, last_modified, "
    "content_hash, links, status, http_status, error, fetched_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(kb, key) DO UPDATE SET "
    "source_url = excluded.source_url, url = excluded.url, item_id = excluded.item_id, "
    "etag = excluded.etag, last_modified = excluded.last_modified, "
    "content_hash = excluded.content_hash, links = excluded.links, status = excluded.status, "
    "http_status = excluded.http_status, error = excluded.error, "
    "fetched_at = excluded.fetched_at"
)


def _page_row(page: DocPage) -> tuple[Any, ...]:
    if page.status not in PAGE_STATUSES:
        raise StorageError(f"page status must be one of {PAGE_STATUSES}, got {page.status!r}")
    return (
        page.kb,
        page.key,
        page.source_url,
        page.url,
        page.item_id,
        page.etag,
        page.last_modified,
        page.content_hash,
        json.dumps(list(page.links)),
        page.status,
        page.http_status,
        page.error,
        page.fetched_at.isoformat(),
    )


class DocSourceStore:
    """Documentation sources crawled from the web, and the pages each crawl found.

    Owned by :class:`SQLiteStorageManager` as ``storage.doc_sources``; uses its connection.
    """

    def __init__(self, db: StoreConnection) -> None:
        self._db = db

    # -- sources --------------------------------------------------------------------------

    def save_doc_source(self, source: DocSource) -> None:
        """Record a doc source, or update everything but when it was added."""
        with self._db.writing("save_doc_source") as conn:
            conn.execute(
                "INSERT INTO knowledge_bases (name, created_at) VALUES (?, ?) "
                "ON CONFLICT(name) DO NOTHING",
                (source.kb, source.added_at.isoformat()),
            )
            conn.execute(
                "INSERT INTO doc_sources (kb, url, name, options, tags, enabled, "
                "refresh_interval, added_at, crawled_at, last_error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(kb, url) DO UPDATE SET "
                "name = excluded.name, options = excluded.options, tags = excluded.tags, "
                "enabled = excluded.enabled, refresh_interval = excluded.refresh_interval, "
                "crawled_at = excluded.crawled_at, last_error = excluded.last_error",
                (
                    source.kb,
                    source.url,
                    source.name,
                    json.dumps(source.options, sort_keys=True),
                    json.dumps(list(source.tags)),
                    int(source.enabled),
                    float(source.refresh_interval),
                    source.added_at.isoformat(),
                    source.crawled_at.isoformat() if source.crawled_at else None,
                    source.last_error,
                ),
            )

    def get_doc_sources(self, kb: str | None = None) -> list[DocSource]:
        """Doc sources (of one knowledge base, if given), by kb and URL."""
        sql, params = _SOURCE_SELECT, ()
        if kb is not None:
            sql, params = sql + " WHERE s.kb = ?", (kb,)
        with self._db.reading("get_doc_sources") as conn:
            rows = conn.execute(sql + " ORDER BY s.kb, s.url", params).fetchall()
        return [_source(row) for row in rows]

    def get_doc_source(self, kb: str, url: str) -> DocSource | None:
        """One doc source, or None."""
        with self._db.reading("get_doc_source") as conn:
            row = conn.execute(
                _SOURCE_SELECT + " WHERE s.kb = ? AND s.url = ?", (kb, url)
            ).fetchone()
        return None if row is None else _source(row)

    def delete_doc_source(self, kb: str, url: str) -> list[str]:
        """Forget a doc source and delete the items of its pages; returns those item ids."""
        with self._db.writing("delete_doc_source") as conn:
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT item_id FROM doc_pages "
                    "WHERE kb = ? AND source_url = ? AND item_id IS NOT NULL",
                    (kb, url),
                )
            ]
            conn.execute("DELETE FROM doc_sources WHERE kb = ? AND url = ?", (kb, url))
            self._db.delete_items(conn, ids)
        return ids

    # -- pages ----------------------------------------------------------------------------

    def get_doc_pages(self, kb: str, source_url: str | None = None) -> dict[str, DocPage]:
        """The pages of a knowledge base (of one doc source, if given), by key."""
        sql, params = "SELECT * FROM doc_pages WHERE kb = ?", (kb,)
        if source_url is not None:
            sql, params = sql + " AND source_url = ?", (kb, source_url)
        with self._db.reading("get_doc_pages") as conn:
            rows = conn.execute(sql, params).fetchall()
        return {row["key"]: _page(row) for row in rows}

    def get_doc_page(self, kb: str, key: str) -> DocPage | None:
        """The page of a knowledge base with this key (of whichever doc source), or None."""
        with self._db.reading("get_doc_page") as conn:
            row = conn.execute(
                "SELECT * FROM doc_pages WHERE kb = ? AND key = ?", (kb, key)
            ).fetchone()
        return None if row is None else _page(row)

    def save_doc_page(self, page: DocPage) -> None:
        """Record a page that was skipped, failed or unchanged (no item written)."""
        with self._db.writing("save_doc_page") as conn:
            conn.execute(_PAGE_UPSERT, _page_row(page))

    def save_doc_page_item(
        self, page: DocPage, item: KnowledgeItem, chunks: list[KnowledgeChunk]
    ) -> None:
        """Save an item, its chunks and its page row in one transaction."""
        with self._db.writing("save_doc_page_item") as conn:
            self._db.write_item(conn, item, chunks)
            conn.execute(_PAGE_UPSERT, _page_row(page))
        for chunk in chunks:
            chunk.item_id = item.id

    def delete_doc_page(self, kb: str, key: str) -> str | None:
        """Forget a page and delete its item; returns the item id, if there was one."""
        with self._db.writing("delete_doc_page") as conn:
            row = conn.execute(
                "SELECT item_id FROM doc_pages WHERE kb = ? AND key = ?", (kb, key)
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM doc_pages WHERE kb = ? AND key = ?", (kb, key))
            item_id = row[0]
            if item_id is not None:
                self._db.delete_items(conn, [item_id])
        return item_id
