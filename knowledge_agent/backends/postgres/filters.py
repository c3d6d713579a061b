"""Search filters as a SQL condition on ``kw_documents`` (alias ``d``), applied before ranking.

Any table with the same filter columns (``kb``, ``source_type``, ``doc_type``, ``language``,
``path``, ``updated_at``) can be filtered alike: name it as ``table`` (the dense vectors do).

Metadata fields and dates compare columns. Paths are matched as the local indexes match them:
the distinct paths that can match (a ``LIKE`` prefix over the ``(level, path)`` index) are
tested with :meth:`SearchFilters.matches_path` itself, so prefix and glob semantics are the
reference ones by construction, and the condition names the paths that passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowledge_agent.search.filters import SearchFilters, to_epoch

if TYPE_CHECKING:
    import psycopg

__all__ = ["filter_condition"]

_FIELDS = ("kb", "source_type", "doc_type", "language")
_GLOB_SPECIALS = "*?["


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _starts(filters: SearchFilters) -> list[str]:
    """Prefixes every matching path starts with: the path prefixes, else each glob's part
    before its first wildcard."""
    if filters.path_prefix:
        return list(filters.path_prefix)
    cut = [
        min((i for i in (glob.find(c) for c in _GLOB_SPECIALS) if i >= 0), default=len(glob))
        for glob in filters.path_glob
    ]
    return [glob[:end] for glob, end in zip(filters.path_glob, cut, strict=True)]


def matching_paths(
    cur: psycopg.Cursor[Any],
    filters: SearchFilters,
    level: int | None,
    table: str = "kw_documents",
) -> list[str]:
    """The distinct paths of ``level``'s documents (every row of ``table`` when None) that
    pass the path prefixes and globs."""
    starts = [_like_prefix(start) for start in _starts(filters)]
    level_is = "" if level is None else "level = %s AND "
    cur.execute(
        f"SELECT DISTINCT path FROM {table} WHERE {level_is}path LIKE ANY(%s::text[])",
        (starts,) if level is None else (level, starts),
    )
    return [path for (path,) in cur.fetchall() if filters.matches_path(path)]


def filter_condition(
    cur: psycopg.Cursor[Any],
    filters: SearchFilters | None,
    level: int | None,
    table: str = "kw_documents",
) -> tuple[str, dict[str, Any]] | None:
    """(SQL condition on ``d``, its named parameters ``f0``, ``f1``, …) for ``filters``;
    ("", {}) when they allow everything; None when they allow nothing (no path matches)."""
    if filters is None or filters.is_empty():
        return "", {}
    conditions: list[str] = []
    params: dict[str, Any] = {}

    def add(condition: str, value: Any) -> None:
        name = f"f{len(params)}"
        params[name] = value
        conditions.append(condition.replace("%s", f"%({name})s"))

    for name in _FIELDS:
        values: tuple[str, ...] = getattr(filters, name)
        if values:
            add(f"d.{name} = ANY(%s::text[])", sorted(set(values)))
    if filters.updated_after is not None:
        add("d.updated_at >= %s", to_epoch(filters.updated_after))
    if filters.updated_before is not None:
        add("d.updated_at <= %s", to_epoch(filters.updated_before))
    if filters.keys is not None:
        # The symbol / references filters: the items holding the chosen chunks, and of
        # their rows the chosen chunks' (or the item's own).
        add("d.item_id = ANY(%s::text[])", sorted(filters.chunk_items or ()))
        add("d.key = ANY(%s::text[])", sorted(filters.keys))
    if filters.path_prefix or filters.path_glob:
        paths = matching_paths(cur, filters, level, table)
        if not paths:
            return None
        add("d.path = ANY(%s::text[])", paths)
    return " AND ".join(conditions), params
