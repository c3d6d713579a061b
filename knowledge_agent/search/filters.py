"""Search filters, applied inside each engine before ranking (never after a global top-k)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property

from knowledge_agent.errors import QueryError
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.patterns import check_glob, glob_regex

__all__ = ["SearchFilters", "to_epoch"]


def to_epoch(value: datetime) -> float:
    """POSIX seconds; a naive datetime is taken to be UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def _names(value: str | Iterable[str] | None, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise QueryError(f"{name} must be a string or a list of strings, got {value!r}") from None
    if not all(isinstance(entry, str) for entry in names):
        raise QueryError(f"{name} must be a string or a list of strings, got {value!r}")
    return names


def _datetime(value: datetime | str | None, name: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise QueryError(f"{name} is not an ISO 8601 date: {value!r}") from None
    raise QueryError(f"{name} must be a datetime or an ISO 8601 string, got {value!r}")


@dataclass(frozen=True)
class SearchFilters:
    """Restrictions on which items a search may return; empty fields restrict nothing.

    ``path_prefix`` and ``path_glob`` match an item's ``source_uri`` (``fnmatch`` rules:
    ``*`` also matches ``/``); each holds several values that are OR-ed (a path under any of
    the prefixes, matching any of the globs). The date bounds are inclusive and compare
    ``updated_at``.

    ``symbol`` and ``references`` keep the code chunks that define (or, for references,
    use or import) any of the names given, whole (``Parser.parse_args``) or as the last
    part (``parse_args``); the engine resolves them to ``chunk_ids`` (and the items holding
    those, ``chunk_items``) before ranking, which is what the indexes apply.
    """

    kb: tuple[str, ...] = ()
    source_type: tuple[str, ...] = ()
    doc_type: tuple[str, ...] = ()
    language: tuple[str, ...] = ()
    path_prefix: tuple[str, ...] = ()
    path_glob: tuple[str, ...] = ()
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    symbol: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    chunk_ids: frozenset[str] | None = None
    chunk_items: frozenset[str] | None = None

    @classmethod
    def build(
        cls,
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
    ) -> SearchFilters:
        """Filters from user-facing options: a value or a list of values, ISO dates allowed."""
        return cls(
            kb=_names(kb, "kb"),
            source_type=_names(source_type, "source_type"),
            doc_type=_names(doc_type, "doc_type"),
            language=_names(language, "language"),
            path_prefix=tuple(p for p in _names(path_prefix, "path_prefix") if p),
            path_glob=tuple(
                check_glob(glob, "path_glob") for glob in _names(path_glob, "path_glob") if glob
            ),
            updated_after=_datetime(updated_after, "updated_after"),
            updated_before=_datetime(updated_before, "updated_before"),
            symbol=tuple(name for name in _names(symbol, "symbol") if name),
            references=tuple(name for name in _names(references, "references") if name),
        )

    @property
    def names_unresolved(self) -> bool:
        """Whether ``symbol`` / ``references`` still wait for :meth:`resolved`."""
        return bool(self.symbol or self.references) and self.chunk_ids is None

    def resolved(self, chunks: Iterable[tuple[str, str]]) -> SearchFilters:
        """These filters restricted to ``chunks`` ((chunk id, item id) pairs, the chunks
        the names select), the names cleared."""
        pairs = list(chunks)
        return dataclasses.replace(
            self,
            symbol=(),
            references=(),
            chunk_ids=frozenset(chunk for chunk, _ in pairs),
            chunk_items=frozenset(item for _, item in pairs),
        )

    @property
    def keys(self) -> frozenset[str] | None:
        """The chunk ids and item ids an index row may have (None: any): a chunk row passes
        by its chunk id, an item row by its item id."""
        if self.chunk_ids is None or self.chunk_items is None:
            return None
        return self.chunk_ids | self.chunk_items

    def is_empty(self) -> bool:
        """True when the filters let every item through."""
        return self == SearchFilters()

    @cached_property
    def _glob(self) -> re.Pattern[str] | None:
        if not self.path_glob:
            return None
        return glob_regex(self.path_glob, "path_glob")

    def matches_path(self, path: str) -> bool:
        """Whether a ``source_uri`` passes the path prefixes and globs."""
        if self.path_prefix and not path.startswith(self.path_prefix):
            return False
        return self._glob is None or self._glob.match(path) is not None

    def matches_time(self, updated_at: float) -> bool:
        """Whether an ``updated_at`` (POSIX seconds) lies inside the date bounds."""
        if self.updated_after is not None and updated_at < to_epoch(self.updated_after):
            return False
        return self.updated_before is None or updated_at <= to_epoch(self.updated_before)

    def matches(self, item: KnowledgeItem) -> bool:
        """The reference semantics every engine must agree with."""
        for allowed, value in (
            (self.kb, item.kb),
            (self.source_type, item.source_type),
            (self.doc_type, item.doc_type),
            (self.language, item.language),
        ):
            if allowed and value not in allowed:
                return False
        if self.chunk_items is not None and item.id not in self.chunk_items:
            return False
        return self.matches_path(item.source_uri or "") and self.matches_time(
            to_epoch(item.updated_at)
        )
