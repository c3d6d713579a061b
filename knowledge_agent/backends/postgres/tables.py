"""The storage's tables in PostgreSQL: the rows of the local backend's SQLite schema.

Text that is compared or sorted is ``COLLATE "C"`` (code point order, as SQLite compares), so
listings, keyset paging and prefix ranges agree with the local backend whatever the
database's locale. JSON stays text, so it comes back exactly as written (key order, numbers).
Integers are ``BIGINT`` (SQLite's are 64-bit), and an item's knowledge base is a foreign key,
so a knowledge base cannot be deleted under a writer still adding to it.
"""

from __future__ import annotations

from knowledge_agent.storage.chunk_names import CHUNK_NAMES_TABLE
from knowledge_agent.storage.doc_sources import PAGE_STATUSES
from knowledge_agent.storage.sources import SOURCE_STATUSES

__all__ = ["COMPONENT", "MIGRATIONS", "SCHEMA_VERSION"]

COMPONENT = "storage"
"""The storage's name in ``schema_versions``."""

_TEXT = 'TEXT COLLATE "C"'  # byte (code point) order, as SQLite compares text

MIGRATIONS: list[list[str]] = [
    # Version 1: the whole schema of the local backend's version 3.
    [
        f"""CREATE TABLE knowledge_bases (
            name {_TEXT} PRIMARY KEY,
            description TEXT NOT NULL DEFAULT '',
            created_at {_TEXT} NOT NULL
        )""",
        f"""CREATE TABLE knowledge_items (
            id {_TEXT} PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            content TEXT NOT NULL DEFAULT '',
            source_type {_TEXT} NOT NULL DEFAULT '',
            source_uri {_TEXT},
            content_type {_TEXT} NOT NULL DEFAULT '',
            doc_type {_TEXT} NOT NULL DEFAULT '',
            language {_TEXT} NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '[]',
            metadata TEXT NOT NULL DEFAULT '{{}}',
            content_hash TEXT NOT NULL DEFAULT '',
            kb {_TEXT} NOT NULL REFERENCES knowledge_bases(name),
            created_at {_TEXT} NOT NULL,
            updated_at {_TEXT} NOT NULL,
            changed_at {_TEXT} NOT NULL
        )""",
        "CREATE INDEX idx_items_kb ON knowledge_items (kb)",
        "CREATE INDEX idx_items_source_type ON knowledge_items (source_type)",
        "CREATE INDEX idx_items_source_uri ON knowledge_items (source_uri)",
        "CREATE INDEX idx_items_created_id ON knowledge_items (created_at, id)",
        f"""CREATE TABLE knowledge_chunks (
            id {_TEXT} PRIMARY KEY,
            item_id {_TEXT} NOT NULL REFERENCES knowledge_items(id) ON DELETE CASCADE,
            chunk_index BIGINT NOT NULL,
            content TEXT NOT NULL DEFAULT '',
            heading TEXT NOT NULL DEFAULT '',
            start_position BIGINT NOT NULL DEFAULT 0,
            end_position BIGINT NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            UNIQUE (item_id, chunk_index)
        )""",
        f"CREATE TABLE kv (key {_TEXT} PRIMARY KEY, value TEXT)",
        f"""CREATE TABLE source_roots (
            kb {_TEXT} NOT NULL REFERENCES knowledge_bases(name) ON DELETE CASCADE,
            root {_TEXT} NOT NULL,
            options TEXT NOT NULL DEFAULT '{{}}',
            added_at {_TEXT} NOT NULL,
            synced_at {_TEXT},
            PRIMARY KEY (kb, root)
        )""",
        f"""CREATE TABLE sources (
            kb {_TEXT} NOT NULL,
            path {_TEXT} NOT NULL,
            root {_TEXT} NOT NULL,
            item_id {_TEXT} REFERENCES knowledge_items(id) ON DELETE CASCADE,
            size BIGINT NOT NULL,
            mtime_ns BIGINT NOT NULL,
            content_hash TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL CHECK (status IN {SOURCE_STATUSES!r}),
            error TEXT NOT NULL DEFAULT '',
            indexed_at {_TEXT} NOT NULL,
            PRIMARY KEY (kb, path),
            FOREIGN KEY (kb, root) REFERENCES source_roots(kb, root) ON DELETE CASCADE
        )""",
        "CREATE INDEX idx_sources_item ON sources (item_id)",
        "CREATE INDEX idx_sources_root ON sources (kb, root)",
        f"""CREATE TABLE doc_sources (
            kb {_TEXT} NOT NULL REFERENCES knowledge_bases(name) ON DELETE CASCADE,
            url {_TEXT} NOT NULL,
            name TEXT NOT NULL DEFAULT '',
            options TEXT NOT NULL DEFAULT '{{}}',
            tags TEXT NOT NULL DEFAULT '[]',
            enabled INTEGER NOT NULL DEFAULT 1,
            refresh_interval DOUBLE PRECISION NOT NULL,
            added_at {_TEXT} NOT NULL,
            crawled_at {_TEXT},
            last_error TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (kb, url)
        )""",
        f"""CREATE TABLE doc_pages (
            kb {_TEXT} NOT NULL,
            key {_TEXT} NOT NULL,
            source_url {_TEXT} NOT NULL,
            url TEXT NOT NULL,
            item_id {_TEXT} REFERENCES knowledge_items(id) ON DELETE CASCADE,
            etag TEXT,
            last_modified TEXT,
            content_hash TEXT NOT NULL DEFAULT '',
            links TEXT NOT NULL DEFAULT '[]',
            status TEXT NOT NULL CHECK (status IN {PAGE_STATUSES!r}),
            http_status INTEGER,
            error TEXT NOT NULL DEFAULT '',
            fetched_at {_TEXT} NOT NULL,
            PRIMARY KEY (kb, key),
            FOREIGN KEY (kb, source_url) REFERENCES doc_sources(kb, url) ON DELETE CASCADE
        )""",
        "CREATE INDEX idx_doc_pages_source ON doc_pages (kb, source_url)",
        "CREATE INDEX idx_doc_pages_item ON doc_pages (item_id)",
    ],
    # Version 2: the names code chunks define and use (the local backend's version 4).
    [
        *(statement.format(text=_TEXT) for statement in CHUNK_NAMES_TABLE),
        """INSERT INTO chunk_names (chunk_id, item_id, role, name, short)
        SELECT c.id, c.item_id, n.role, n.name,
            coalesce(nullif(substring(n.name from '[^./:]*$'), ''), n.name)
        FROM knowledge_chunks c
        CROSS JOIN LATERAL (
            SELECT DISTINCT r.role, e.name
            FROM (VALUES ('symbol', 'symbols'), ('reference', 'references'),
                ('reference', 'imports')) AS r(role, key)
            CROSS JOIN LATERAL json_array_elements_text(
                CASE WHEN json_typeof(c.metadata::json -> r.key) = 'array'
                THEN c.metadata::json -> r.key ELSE '[]'::json END
            ) AS e(name)
            WHERE e.name <> ''
        ) n
        WHERE c.metadata LIKE '%"symbols"%'""",
    ],
]
"""The storage's migrations (:func:`~knowledge_agent.backends.postgres.schema.migrate`)."""

SCHEMA_VERSION = len(MIGRATIONS)
