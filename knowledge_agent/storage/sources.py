"""Knowledge bases and tracked source files, stored beside the items they produced.

A *root* is what a user asked to collect (a folder or a file, with its walk options); a
*source* is one file found under a root, with the size, mtime and content hash it had
when it was last indexed. Re-running a collection compares the disk against these rows.
A source row is deleted with its item (``ON DELETE CASCADE``), so a deleted item comes
back on the next sync of its root. :class:`SourceStore` reads and writes these rows on the
connection of the :class:`SQLiteStorageManager` that owns it (``storage.sources``).

File names are bytes; Python gives the ones that are not valid UTF-8 as lone surrogates
(``\udcff`` for the byte ``0xff``), which SQLite text cannot hold. Every path goes in
through :func:`path_to_db` and comes out through :func:`path_from_db`, a reversible
escape that leaves every other path as it is (see :func:`path_to_db`).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from knowledge_agent.errors import StorageError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.models.knowledge_item import utc_now
from knowledge_agent.storage.connection import StoreConnection

__all__ = [
    "SOURCES_MIGRATION",
    "KnowledgeBaseInfo",
    "SourceRecord",
    "SourceRoot",
    "SourceStore",
    "path_from_db",
    "path_to_db",
]

# The escape character of stored paths: the replacement character, because a reader sees
# at once that a byte could not be decoded, and real file names almost never hold it.
_ESCAPE = "\ufffd"
_ESCAPED = re.compile("\ufffd(?:(\ufffd)|([89A-F][0-9A-F])|u([0-9A-F]{4}))")


def path_to_db(path: str) -> str:
    """``path`` as text SQLite can store and a person can read; :func:`path_from_db` undoes it.

    A byte that was not valid UTF-8 (a lone surrogate ``U+DC80``..``U+DCFF`` from
    ``os.fsdecode``) becomes ``U+FFFD`` and its two hex digits (``bad\ufffdFF.txt``), any
    other lone surrogate ``U+FFFD u`` and four, and ``U+FFFD`` itself is doubled. Every
    path without these characters is stored unchanged, and prefixes stay prefixes, so a
    folder's rows are still found by the folder's escaped path.
    """
    if _ESCAPE not in path and _encodable(path):
        return path
    out: list[str] = []
    for char in path:
        code = ord(char)
        if char == _ESCAPE:
            out.append(_ESCAPE * 2)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"{_ESCAPE}{code - 0xDC00:02X}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"{_ESCAPE}u{code:04X}")
        else:
            out.append(char)
    return "".join(out)


def path_from_db(text: str) -> str:
    """The path :func:`path_to_db` made ``text`` from (a lone ``U+FFFD`` is kept as is)."""
    if _ESCAPE not in text:
        return text
    return _ESCAPED.sub(_unescape, text)


def _unescape(match: re.Match[str]) -> str:
    if match.group(1):
        return _ESCAPE
    if match.group(2):
        return chr(0xDC00 + int(match.group(2), 16))
    return chr(int(match.group(3), 16))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


SOURCE_STATUSES = ("indexed", "skipped", "failed")

SOURCES_MIGRATION = [
    """CREATE TABLE knowledge_bases (
        name TEXT PRIMARY KEY,
        description TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL
    )""",
    # Knowledge bases that items already name become rows, so listing them is one query.
    """INSERT INTO knowledge_bases (name, created_at)
        SELECT kb, MIN(created_at) FROM knowledge_items GROUP BY kb""",
    """CREATE TABLE source_roots (
        kb TEXT NOT NULL REFERENCES knowledge_bases(name) ON DELETE CASCADE,
        root TEXT NOT NULL,
        options TEXT NOT NULL DEFAULT '{}',
        added_at TEXT NOT NULL,
        synced_at TEXT,
        PRIMARY KEY (kb, root)
    )""",
    f"""CREATE TABLE sources (
        kb TEXT NOT NULL,
        path TEXT NOT NULL,
        root TEXT NOT NULL,
        item_id TEXT REFERENCES knowledge_items(id) ON DELETE CASCADE,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        content_hash TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL CHECK (status IN {SOURCE_STATUSES!r}),
        error TEXT NOT NULL DEFAULT '',
        indexed_at TEXT NOT NULL,
        PRIMARY KEY (kb, path),
        FOREIGN KEY (kb, root) REFERENCES source_roots(kb, root) ON DELETE CASCADE
    )""",
    "CREATE INDEX idx_sources_item ON sources (item_id)",
    "CREATE INDEX idx_sources_root ON sources (kb, root)",
]


@dataclass(frozen=True)
class SourceRoot:
    """A folder or file collected into a knowledge base, with the options it was walked with."""

    kb: str
    root: str
    options: dict[str, Any] = field(default_factory=dict)
    added_at: datetime = field(default_factory=utc_now)
    synced_at: datetime | None = None


@dataclass(frozen=True)
class SourceRecord:
    """One file under a root as it was when last indexed (or skipped, or failed)."""

    kb: str
    path: str
    root: str
    size: int
    mtime_ns: int
    status: str
    item_id: str | None = None
    content_hash: str = ""
    error: str = ""
    indexed_at: datetime = field(default_factory=utc_now)


@dataclass(frozen=True)
class KnowledgeBaseInfo:
    """A knowledge base with its description and counts: ``sources`` counts the files
    tracked and the pages crawled, ``roots`` the folders and files collected and then the
    start URLs of its doc sources."""

    name: str
    description: str
    created_at: datetime
    items: int
    chunks: int
    sources: int
    roots: list[str]
    last_indexed_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; datetimes become ISO 8601 strings."""
        return {
            "name": self.name,
            "description": self.description,
            "created_at": self.created_at.isoformat(),
            "items": self.items,
            "chunks": self.chunks,
            "sources": self.sources,
            "roots": [path_to_db(root) for root in self.roots],
            "last_indexed_at": self.last_indexed_at.isoformat() if self.last_indexed_at else None,
        }


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise StorageError(f"corrupt timestamp {text!r}: {exc}") from exc


# Paths bound in one look-up: well under SQLite's limit on a statement's parameters.
_PATHS_PER_QUERY = 500


def _record(row: sqlite3.Row) -> SourceRecord:
    return SourceRecord(
        kb=row["kb"],
        path=path_from_db(row["path"]),
        root=path_from_db(row["root"]),
        size=row["size"],
        mtime_ns=row["mtime_ns"],
        status=row["status"],
        item_id=row["item_id"],
        content_hash=row["content_hash"],
        error=row["error"],
        indexed_at=_time(row["indexed_at"]) or utc_now(),
    )


_SOURCE_UPSERT = (
    "INSERT INTO sources (kb, path, root, item_id, size, mtime_ns, content_hash, status, error, "
    "indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(kb, path) DO UPDATE SET "
    "root = excluded.root, item_id = excluded.item_id, size = excluded.size, "
    "mtime_ns = excluded.mtime_ns, content_hash = excluded.content_hash, "
    "status = excluded.status, error = excluded.error, indexed_at = excluded.indexed_at"
)


def _source_row(record: SourceRecord) -> tuple[Any, ...]:
    return (
        record.kb,
        path_to_db(record.path),
        path_to_db(record.root),
        record.item_id,
        record.size,
        record.mtime_ns,
        record.content_hash,
        record.status,
        path_to_db(record.error),  # a reason may quote the path; kept readable
        record.indexed_at.isoformat(),
    )


class SourceStore:
    """Knowledge bases, the roots collected into them and their tracked source files.

    Owned by :class:`SQLiteStorageManager` as ``storage.sources``; uses its connection.
    """

    def __init__(self, db: StoreConnection) -> None:
        self._db = db

    # -- knowledge bases ----------------------------------------------------------------

    def ensure_kb(self, name: str, description: str | None = None) -> bool:
        """Create the knowledge base if missing (and set its description if given).

        Returns True when it was created.
        """
        with self._db.writing("ensure_kb") as conn:
            created = conn.execute(
                "INSERT INTO knowledge_bases (name, description, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO NOTHING",
                (name, description or "", utc_now().isoformat()),
            ).rowcount
            if description is not None and not created:
                conn.execute(
                    "UPDATE knowledge_bases SET description = ? WHERE name = ?",
                    (description, name),
                )
        return bool(created)

    def kb_names(self) -> list[str]:
        """Every knowledge base name, sorted."""
        with self._db.reading("kb_names") as conn:
            rows = conn.execute("SELECT name FROM knowledge_bases ORDER BY name").fetchall()
        return [row[0] for row in rows]

    def kb_info(self, name: str) -> KnowledgeBaseInfo | None:
        """One knowledge base with its counts, or None."""
        with self._db.reading("kb_info") as conn:
            row = conn.execute(
                "SELECT name, description, created_at FROM knowledge_bases WHERE name = ?",
                (name,),
            ).fetchone()
            if row is None:
                return None
            items = conn.execute(
                "SELECT COUNT(*), MAX(updated_at) FROM knowledge_items WHERE kb = ?", (name,)
            ).fetchone()
            chunks = conn.execute(
                "SELECT COUNT(*) FROM knowledge_chunks AS c "
                "JOIN knowledge_items AS i ON i.id = c.item_id WHERE i.kb = ?",
                (name,),
            ).fetchone()[0]
            files = conn.execute(
                "SELECT COUNT(*), MAX(indexed_at) FROM sources WHERE kb = ?", (name,)
            ).fetchone()
            # A crawled page is a source as a file is: the pages `sources` counts.
            pages = conn.execute(
                "SELECT COUNT(*), MAX(fetched_at) FROM doc_pages "
                "WHERE kb = ? AND status = 'indexed'",
                (name,),
            ).fetchone()
            roots = conn.execute(
                "SELECT root FROM source_roots WHERE kb = ? ORDER BY root", (name,)
            ).fetchall()
            urls = conn.execute(
                "SELECT url FROM doc_sources WHERE kb = ? ORDER BY url", (name,)
            ).fetchall()
        # An item's time may be its content's (a file's last commit), not when it was indexed.
        times = [time for time in (_time(r[1]) for r in (items, files, pages)) if time is not None]
        return KnowledgeBaseInfo(
            name=row["name"],
            description=row["description"],
            created_at=_time(row["created_at"]) or utc_now(),
            items=int(items[0]),
            chunks=int(chunks),
            sources=int(files[0]) + int(pages[0]),
            roots=[path_from_db(root[0]) for root in roots] + [url[0] for url in urls],
            last_indexed_at=max(times, key=datetime.timestamp) if times else None,
        )

    def delete_kb(self, name: str) -> list[str]:
        """Delete a knowledge base, its items, chunks, roots and sources; returns the item ids."""
        with self._db.writing("delete_kb") as conn:
            ids = [
                row[0]
                for row in conn.execute("SELECT id FROM knowledge_items WHERE kb = ?", (name,))
            ]
            conn.execute("DELETE FROM knowledge_items WHERE kb = ?", (name,))
            conn.execute("DELETE FROM knowledge_bases WHERE name = ?", (name,))
            self._db.journal(conn, ids, "delete")
        return ids

    # -- roots ----------------------------------------------------------------------------

    def save_root(self, root: SourceRoot) -> None:
        """Record (or update the options of) a collected root."""
        with self._db.writing("save_root") as conn:
            conn.execute(
                "INSERT INTO source_roots (kb, root, options, added_at, synced_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(kb, root) DO UPDATE SET "
                "options = excluded.options, synced_at = excluded.synced_at",
                (
                    root.kb,
                    path_to_db(root.root),
                    _json(root.options),
                    root.added_at.isoformat(),
                    root.synced_at.isoformat() if root.synced_at else None,
                ),
            )

    def get_roots(self, kb: str | None = None) -> list[SourceRoot]:
        """Collected roots (of one knowledge base, if given), by kb and path."""
        sql = "SELECT kb, root, options, added_at, synced_at FROM source_roots"
        params: tuple[str, ...] = ()
        if kb is not None:
            sql += " WHERE kb = ?"
            params = (kb,)
        with self._db.reading("get_roots") as conn:
            rows = conn.execute(sql + " ORDER BY kb, root", params).fetchall()
        return [
            SourceRoot(
                kb=row["kb"],
                root=path_from_db(row["root"]),
                options=_unjson(row["options"]),
                added_at=_time(row["added_at"]) or utc_now(),
                synced_at=_time(row["synced_at"]),
            )
            for row in rows
        ]

    def delete_root(self, kb: str, root: str) -> list[str]:
        """Forget a root and delete the items of its sources; returns those item ids."""
        root = path_to_db(root)
        with self._db.writing("delete_root") as conn:
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT item_id FROM sources WHERE kb = ? AND root = ? AND item_id IS NOT NULL",
                    (kb, root),
                )
            ]
            self._db.delete_items(conn, ids)
            conn.execute("DELETE FROM source_roots WHERE kb = ? AND root = ?", (kb, root))
        return ids

    # -- sources --------------------------------------------------------------------------

    def get_sources(self, kb: str, root: str | None = None) -> dict[str, SourceRecord]:
        """The tracked files of a knowledge base (under one root, if given), by path."""
        sql = "SELECT * FROM sources WHERE kb = ?"
        params: tuple[str, ...] = (kb,)
        if root is not None:
            sql += " AND root = ?"
            params = (kb, path_to_db(root))
        with self._db.reading("get_sources") as conn:
            rows = conn.execute(sql, params).fetchall()
        records = [_record(row) for row in rows]
        return {record.path: record for record in records}

    def get_source(self, kb: str, path: str) -> SourceRecord | None:
        """One tracked file, or None."""
        with self._db.reading("get_source") as conn:
            row = conn.execute(
                "SELECT * FROM sources WHERE kb = ? AND path = ?", (kb, path_to_db(path))
            ).fetchone()
        return None if row is None else _record(row)

    def get_sources_by_path(self, kb: str, paths: Iterable[str]) -> dict[str, SourceRecord]:
        """The tracked files of a knowledge base among ``paths`` (under any root), by path;
        untracked paths are absent. A few queries however many paths: a collection looks up
        every new file at once, not one round trip each."""
        wanted = list(dict.fromkeys(path_to_db(path) for path in paths))
        records: dict[str, SourceRecord] = {}
        with self._db.reading("get_sources_by_path") as conn:
            for start in range(0, len(wanted), _PATHS_PER_QUERY):
                part = wanted[start : start + _PATHS_PER_QUERY]
                marks = ", ".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT * FROM sources WHERE kb = ? AND path IN ({marks})", (kb, *part)
                ).fetchall()
                records.update((record.path, record) for record in map(_record, rows))
        return records

    def sources_at(self, path: str, separator: str = os.sep) -> list[SourceRecord]:
        """Tracked files (of any knowledge base) at ``path`` or anywhere under it."""
        path = path_to_db(path)
        inside = path.rstrip(separator) + separator
        with self._db.reading("sources_at") as conn:
            rows = conn.execute(
                "SELECT * FROM sources WHERE path = ? OR substr(path, 1, ?) = ? ORDER BY kb, path",
                (path, len(inside), inside),
            ).fetchall()
        return [_record(row) for row in rows]

    def save_source(self, record: SourceRecord) -> None:
        """Record a file that was skipped, failed, or is unchanged (no item written)."""
        with self._db.writing("save_source") as conn:
            conn.execute(_SOURCE_UPSERT, _source_row(record))

    def save_source_item(
        self,
        record: SourceRecord,
        item: KnowledgeItem,
        chunks: list[KnowledgeChunk],
    ) -> None:
        """Save an item, its chunks and its source row in one transaction."""
        with self._db.writing("save_source_item") as conn:
            self._db.write_item(conn, item, chunks)
            conn.execute(_SOURCE_UPSERT, _source_row(record))
        for chunk in chunks:
            chunk.item_id = item.id

    def save_source_items(
        self, entries: Sequence[tuple[SourceRecord, KnowledgeItem, list[KnowledgeChunk]]]
    ) -> None:
        """:meth:`save_source_item` for several files in one transaction: all or none."""
        if not entries:
            return
        with self._db.writing("save_source_items") as conn:
            self._db.write_items(conn, [(item, chunks) for _, item, chunks in entries])
            conn.executemany(_SOURCE_UPSERT, [_source_row(record) for record, _, _ in entries])
        for _, item, chunks in entries:
            for chunk in chunks:
                chunk.item_id = item.id

    def delete_source(self, kb: str, path: str) -> str | None:
        """Forget a tracked file and delete its item; returns the item id, if there was one."""
        path = path_to_db(path)
        with self._db.writing("delete_source") as conn:
            row = conn.execute(
                "SELECT item_id FROM sources WHERE kb = ? AND path = ?", (kb, path)
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM sources WHERE kb = ? AND path = ?", (kb, path))
            item_id = row[0]
            if item_id is not None:
                self._db.delete_items(conn, [item_id])
        return item_id


def _json(value: dict[str, Any]) -> str:
    # ASCII escapes carry a pattern holding an undecodable byte (a lone surrogate).
    return json.dumps(value, sort_keys=True)


def _unjson(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StorageError(f"corrupt JSON in source_roots: {exc}") from exc
    return value if isinstance(value, dict) else {}
