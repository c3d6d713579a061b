"""The names of code chunks as rows, so "which chunks define or use X" is an index lookup.

A chunk's metadata lists the symbols it holds (``symbols``, qualified names such as
``Parser.parse_args``) and the names its code uses and imports (``references``,
``imports``). Each becomes a ``chunk_names`` row: role ``symbol`` or ``reference``
(imports are uses too), the name, and its part after the last ``.``, ``/`` or ``:``
(``parse_args``; ``sleep`` of ``time.sleep``; ``a`` of ``./lib/a``), so a short name
finds the dotted ones. The rows are written with the chunks and deleted with them
(``ON DELETE CASCADE``); both backends share these statements.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from knowledge_agent.models.knowledge_chunk import KnowledgeChunk

__all__ = [
    "CHUNK_NAMES_TABLE",
    "NAME_ROLES",
    "name_rows",
    "short_name",
    "sqlite_chunk_names_migration",
]

NAME_ROLES = {"symbol": ("symbols",), "reference": ("references", "imports")}
"""Each role and the chunk metadata lists it is made of."""

CHUNK_NAMES_TABLE = [
    """CREATE TABLE chunk_names (
        chunk_id {text} NOT NULL REFERENCES knowledge_chunks(id) ON DELETE CASCADE,
        item_id {text} NOT NULL,
        role {text} NOT NULL,
        name {text} NOT NULL,
        short {text} NOT NULL
    )""",
    "CREATE INDEX idx_chunk_names_name ON chunk_names (name, role)",
    "CREATE INDEX idx_chunk_names_short ON chunk_names (short, role)",
    "CREATE INDEX idx_chunk_names_chunk ON chunk_names (chunk_id)",
]
"""The table, with ``{text}`` the backend's text type."""

INSERT_NAMES = (
    "INSERT INTO chunk_names (chunk_id, item_id, role, name, short) VALUES (?, ?, ?, ?, ?)"
)

_SEPARATOR = re.compile(r"[./:]")


def short_name(name: str) -> str:
    """The last part of a dotted, ``::`` or path-like name."""
    return _SEPARATOR.split(name)[-1] or name


def name_rows(
    item_id: str, chunks: Iterable[KnowledgeChunk]
) -> list[tuple[str, str, str, str, str]]:
    """``(chunk_id, item_id, role, name, short)`` of every name the chunks' metadata lists."""
    rows: list[tuple[str, str, str, str, str]] = []
    for chunk in chunks:
        rows.extend(_chunk_rows(chunk.id, item_id, chunk.metadata))
    return rows


def _chunk_rows(
    chunk_id: str, item_id: str, metadata: dict[str, Any]
) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for role, keys in NAME_ROLES.items():
        names: dict[str, None] = {}
        for key in keys:
            listed = metadata.get(key)
            if isinstance(listed, list):
                names.update((name, None) for name in listed if isinstance(name, str) and name)
        rows.extend((chunk_id, item_id, role, name, short_name(name)) for name in names)
    return rows


def sqlite_chunk_names_migration(conn: sqlite3.Connection) -> None:
    """Create ``chunk_names`` and fill it from the chunks already stored."""
    for statement in CHUNK_NAMES_TABLE:
        conn.execute(statement.format(text="TEXT"))
    cursor = conn.execute(
        "SELECT id, item_id, metadata FROM knowledge_chunks WHERE metadata LIKE '%\"symbols\"%'"
    )
    while batch := cursor.fetchmany(1000):
        rows = [
            row
            for chunk_id, item_id, metadata in batch
            for row in _chunk_rows(chunk_id, item_id, _json(metadata))
        ]
        conn.executemany(INSERT_NAMES, rows)


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def names_query(names: Sequence[str], role: str) -> tuple[str, list[str]]:
    """SQL (``?`` placeholders) selecting ``(chunk_id, item_id)`` of the chunks whose
    ``role`` rows hold any of ``names``, whole or as the last part."""
    marks = ", ".join("?" for _ in names)
    sql = (
        "SELECT DISTINCT chunk_id, item_id FROM chunk_names "
        f"WHERE role = ? AND (name IN ({marks}) OR short IN ({marks}))"
    )
    return sql, [role, *names, *names]
