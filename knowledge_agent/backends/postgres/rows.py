"""Rows of the storage's tables as Python values, and back.

The stores written for SQLite (``SourceStore``, ``DocSourceStore``) read rows by column name
and by position and write ``?`` placeholders: :class:`Row` and :func:`pg_sql` let them run on
psycopg unchanged. PostgreSQL text cannot hold NUL, which SQLite stores; the text fields of
items and chunks go through :func:`text_to_db` and :func:`text_from_db`, so round trips give
back equal values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any, cast

from knowledge_agent.errors import QueryError
from knowledge_agent.models import ItemSummary, KnowledgeChunk, KnowledgeItem
from knowledge_agent.storage.sqlite_storage import (
    CHUNK_COLUMNS,
    ITEM_COLUMNS,
    ItemFacts,
    item_fields,
)
from knowledge_agent.storage.sqlite_storage import row_to_chunk as _sqlite_row_to_chunk

__all__ = [
    "CHUNK_INSERT",
    "CHUNK_SELECT",
    "ESCAPE",
    "FACTS_SELECT",
    "FILTER_FIELDS",
    "ITEMS_WRITE",
    "ITEM_SELECT",
    "ITEM_UPSERT",
    "SUMMARY_SELECT",
    "Row",
    "check_batch_size",
    "chunk_columns",
    "chunks_columns",
    "item_to_row",
    "items_columns",
    "opt_to_db",
    "pg_sql",
    "row_factory",
    "row_to_chunk",
    "row_to_facts",
    "row_to_item",
    "row_to_summary",
    "text_from_db",
    "text_to_db",
]

_ITEM_TEXTS = frozenset(ITEM_COLUMNS) - {"tags", "metadata", "created_at", "updated_at"}
_CHUNK_TEXTS = frozenset({"id", "item_id", "content", "heading"})
_FACTS_COLUMNS = tuple(ItemFacts.__dataclass_fields__)
_FACTS_TEXTS = frozenset({"id", "kb", "source_type", "doc_type", "source_uri", "title"})
ITEM_SELECT = f"SELECT {', '.join(ITEM_COLUMNS)} FROM knowledge_items"
SUMMARY_SELECT = (
    f"SELECT {', '.join(name for name in ITEM_COLUMNS if name != 'content')}, "
    "length(content) AS content_chars FROM knowledge_items"
)
FACTS_SELECT = f"SELECT {', '.join(_FACTS_COLUMNS)} FROM knowledge_items"
CHUNK_SELECT = f"SELECT {', '.join(CHUNK_COLUMNS)} FROM knowledge_chunks"
FILTER_FIELDS = ("kb", "source_type", "doc_type", "language")
ITEM_UPSERT = (
    f"INSERT INTO knowledge_items ({', '.join(ITEM_COLUMNS)}, changed_at) "
    f"VALUES ({', '.join('?' for _ in ITEM_COLUMNS)}, ?) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in (*ITEM_COLUMNS[1:], "changed_at"))
)
# One statement for all of an item's chunks: a row per array element.
CHUNK_INSERT = (
    f"INSERT INTO knowledge_chunks ({', '.join(CHUNK_COLUMNS)}) "
    "SELECT * FROM unnest(?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[], "
    "?::bigint[], ?::bigint[], ?::text[])"
)

# Many items in one statement, their knowledge bases first (each created with the
# ``created_at`` of its first item, as item-by-item upserts would): a row per array element,
# upserted in the arrays' order.
_ITEM_ROW = (*ITEM_COLUMNS, "changed_at")
ITEMS_WRITE = (
    "WITH x AS MATERIALIZED (SELECT * FROM unnest("
    + ", ".join("?::text[]" for _ in _ITEM_ROW)
    + f") WITH ORDINALITY AS x({', '.join(_ITEM_ROW)}, n)), "
    "kb AS (INSERT INTO knowledge_bases (name, created_at) "
    "SELECT DISTINCT ON (kb) kb, created_at FROM x ORDER BY kb, n "
    "ON CONFLICT (name) DO NOTHING) "
    f"INSERT INTO knowledge_items ({', '.join(_ITEM_ROW)}) "
    f"SELECT {', '.join(_ITEM_ROW)} FROM x ORDER BY n "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in _ITEM_ROW[1:])
)

# -- text as stored ----------------------------------------------------------------------

# The escape character: a noncharacter, which no real text holds.
ESCAPE = "\U0010ffff"
_ESCAPED = re.compile(f"{ESCAPE}([{ESCAPE}0])")


def text_to_db(text: str) -> str:
    """``text`` as PostgreSQL can store it: NUL becomes U+10FFFF ``0`` and U+10FFFF is
    doubled; text without either (all real text) is stored as it is."""
    if "\x00" not in text and ESCAPE not in text:
        return text
    return text.replace(ESCAPE, ESCAPE * 2).replace("\x00", ESCAPE + "0")


def text_from_db(text: str) -> str:
    """The text :func:`text_to_db` stored as ``text``."""
    if ESCAPE not in text:
        return text
    return _ESCAPED.sub(lambda match: ESCAPE if match.group(1) == ESCAPE else "\x00", text)


def opt_to_db(text: str | None) -> str | None:
    return None if text is None else text_to_db(text)


class Row:
    """A row readable by position and by column name, like ``sqlite3.Row``, so the stores
    written for SQLite read it unchanged."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        return self._values[key if isinstance(key, int) else self._index[key]]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[str]:
        return list(self._index)


def row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    """A psycopg row factory of :class:`Row`."""
    index = {column.name: n for n, column in enumerate(cursor.description or ())}
    return lambda values: Row(values, index)


def _db_row(row: Row, texts: frozenset[str]) -> dict[str, Any]:
    return {
        name: text_from_db(value) if name in texts and value is not None else value
        for name, value in zip(row.keys(), row, strict=True)
    }


def row_to_item(row: Row) -> KnowledgeItem:
    fields = _db_row(row, _ITEM_TEXTS)
    return KnowledgeItem(content=fields["content"], **item_fields(fields))  # type: ignore[arg-type]


def row_to_summary(row: Row) -> ItemSummary:
    fields = _db_row(row, _ITEM_TEXTS)
    return ItemSummary(content_chars=fields["content_chars"], **item_fields(fields))  # type: ignore[arg-type]


def row_to_facts(row: Row) -> ItemFacts:
    return ItemFacts(**_db_row(row, _FACTS_TEXTS))


def row_to_chunk(row: Row) -> KnowledgeChunk:
    return _sqlite_row_to_chunk(_db_row(row, _CHUNK_TEXTS))  # type: ignore[arg-type]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _changed_at(item: KnowledgeItem) -> str:
    """When the item last changed for its author: the file's mtime when it has one (what
    SQLite computes with ``json_extract(metadata, '$.modified_at')``), else ``updated_at``."""
    modified = item.metadata.get("modified_at") if isinstance(item.metadata, dict) else None
    if modified is None:
        return item.updated_at.isoformat()
    return text_to_db(modified if isinstance(modified, str) else _dumps(modified))


def item_to_row(item: KnowledgeItem) -> tuple[Any, ...]:
    return (
        text_to_db(item.id),
        text_to_db(item.title),
        text_to_db(item.content),
        text_to_db(item.source_type),
        opt_to_db(item.source_uri),
        text_to_db(item.content_type),
        text_to_db(item.doc_type),
        text_to_db(item.language),
        _dumps(list(item.tags)),
        _dumps(item.metadata),
        text_to_db(item.content_hash),
        text_to_db(item.kb),
        item.created_at.isoformat(),
        item.updated_at.isoformat(),
        _changed_at(item),
    )


def chunk_columns(item_id: str, chunks: Sequence[KnowledgeChunk]) -> list[str]:
    """The chunks as one array literal per column, for :data:`CHUNK_INSERT` (psycopg would
    dump a list element by element in Python)."""
    return chunks_columns([(item_id, chunks)])


def items_columns(items: Sequence[KnowledgeItem]) -> list[str]:
    """The items' rows (:func:`item_to_row`) as one array literal per column, for
    :data:`ITEMS_WRITE`."""
    rows = [item_to_row(item) for item in items]
    return [_text_array(column) for column in zip(*rows, strict=True)]


def chunks_columns(entries: Sequence[tuple[str, Sequence[KnowledgeChunk]]]) -> list[str]:
    """:func:`chunk_columns` of several items' chunks (each pair: item id, its chunks), in
    one statement's columns."""
    chunks = [chunk for _, item_chunks in entries for chunk in item_chunks]
    owners = [text_to_db(item_id) for item_id, item_chunks in entries for _ in item_chunks]
    return [
        _text_array([text_to_db(chunk.id) for chunk in chunks]),
        _text_array(owners),
        _number_array([chunk.chunk_index for chunk in chunks]),
        _text_array([text_to_db(chunk.content) for chunk in chunks]),
        _text_array([text_to_db(chunk.heading) for chunk in chunks]),
        _number_array([chunk.start_position for chunk in chunks]),
        _number_array([chunk.end_position for chunk in chunks]),
        _text_array([_dumps(chunk.metadata) for chunk in chunks]),
    ]


def _text_array(values: Sequence[str | None]) -> str:
    """An array literal of these strings (each quoted, so none reads as NULL; None is
    NULL)."""
    if None in values:
        return "{" + ",".join("NULL" if v is None else _text_array([v])[1:-1] for v in values) + "}"
    return _quoted_array(cast("Sequence[str]", values))


def _quoted_array(values: Sequence[str]) -> str:
    """An array literal of these strings (each quoted, so none reads as NULL)."""
    quoted = (value.replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return '{"' + '","'.join(quoted) + '"}' if values else "{}"


def _number_array(values: Sequence[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise QueryError(f"batch_size must be at least 1, got {batch_size}")


@lru_cache(maxsize=512)
def pg_sql(sql: str) -> str:
    """SQLite's ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")
