"""The exceptions knowledge_agent raises.

Every error the package raises on purpose derives from ``KnowledgeAgentError``;
errors from SQLite, Whoosh or the file system are mapped at the boundary with
``raise … from exc`` so callers need one ``except`` clause::

    KnowledgeAgentError
    ├── ConfigError          a bad option or configuration value
    ├── StorageError         SQLite could not read or write
    │   ├── LockTimeoutError     the data folder's write lock was not free in time
    │   └── WriteGroupError      writes of a write group rolled back after they returned
    ├── SearchIndexError     a Whoosh or TF-IDF index could not be read or written
    │   └── DamagedIndexError    an index file's bytes are not those written (a checksum)
    ├── IngestError          one source could not be turned into an item (names the path)
    │   └── UnsupportedSourceError   a source with nothing to index (binary, empty, too large)
    ├── QueryError           a query that cannot be run (never for odd query text)
    ├── NotFoundError        an item, chunk or knowledge base that does not exist
    └── EmbeddingError       an embedding or rerank service failed (names the URL and why)

Ctrl-C during a collection run raises
:class:`~knowledge_agent.ingest.report.CollectInterrupted`, a ``KeyboardInterrupt`` (so code
that stops on Ctrl-C keeps doing so) carrying the report of what was committed.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DamagedIndexError",
    "EmbeddingError",
    "IngestError",
    "KnowledgeAgentError",
    "LockTimeoutError",
    "NotFoundError",
    "QueryError",
    "SearchIndexError",
    "StorageError",
    "UnsupportedSourceError",
    "WriteGroupError",
]


class KnowledgeAgentError(Exception):
    """Base class of every error raised by knowledge_agent."""


class ConfigError(KnowledgeAgentError, ValueError):
    """An option or configuration value is invalid."""


class StorageError(KnowledgeAgentError):
    """The SQLite store could not complete an operation."""


class LockTimeoutError(StorageError):
    """Another process held the data folder's write lock for longer than ``lock_timeout``."""


class WriteGroupError(StorageError):
    """Writes of a write group failed after they had returned, when their batch was checked
    or indexed: each was rolled back alone and the group's other writes committed.
    ``operation`` names the group; ``failures`` holds, per write rolled back, the ids of the
    items it wrote and its error."""

    def __init__(self, operation: str, failures: list[tuple[list[str], Exception]]) -> None:
        first_ids, first = failures[0]
        what = f"item {first_ids[0]!r}" if first_ids else "a write"
        more = f" (and {len(failures) - 1} more writes)" if len(failures) > 1 else ""
        super().__init__(
            f"{operation}: {len(failures)} write{'s' if len(failures) > 1 else ''} failed and "
            f"rolled back: {what}: {first}{more}"
        )
        self.operation = operation
        self.failures = failures

    def __reduce__(
        self,
    ) -> tuple[type[WriteGroupError], tuple[str, list[tuple[list[str], Exception]]]]:
        return (type(self), (self.operation, self.failures))


class SearchIndexError(KnowledgeAgentError):
    """A search index (Whoosh or TF-IDF) could not be read or written."""


class DamagedIndexError(SearchIndexError):
    """An index file is damaged: missing, or its size or checksum is not the one recorded
    when it was written (or it failed to decode and then failed that check). The index is
    rebuilt from SQLite: ``knowledge-agent check --repair``."""


class IngestError(KnowledgeAgentError):
    """A source could not be ingested; ``path`` names it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[IngestError], tuple[str, str]]:
        # Keeps the error picklable across worker processes.
        return (type(self), (self.path, self.reason))


class UnsupportedSourceError(IngestError):
    """A source that is skipped rather than failed: binary, empty or over the size limit."""


class QueryError(KnowledgeAgentError):
    """A search request is invalid (a bad filter or limit, not odd query text)."""


class NotFoundError(KnowledgeAgentError, LookupError):
    """The requested item, chunk or knowledge base does not exist."""


class EmbeddingError(KnowledgeAgentError):
    """An embedding or rerank request failed; ``url`` names the endpoint, ``reason`` says why.

    ``status`` is the HTTP status when the server answered, else ``None``.
    """

    def __init__(self, url: str, reason: str, *, status: int | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status

    def __reduce__(self) -> tuple[type[EmbeddingError], tuple[str, str], dict[str, object]]:
        # Keeps the error picklable across worker processes (``status`` is keyword-only).
        return (type(self), (self.url, self.reason), {"status": self.status})
