"""What the TF-IDF and dense indexes do alike around their segments: the public methods
that only delegate (one-item updates, a streamed rebuild, the journal position, noticing a
newer generation on disk) and the closed / locked checks.

Each index keeps what is its own: how rows are made (vectorised or embedded), its
collection(s), :meth:`~SegmentIndex.update`, :meth:`~SegmentIndex.refit`, ``_persist`` and
``_load``.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from knowledge_agent.backends.local.checksums import Damage
from knowledge_agent.errors import ConfigError, SearchIndexError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch, grouped

__all__ = ["SegmentIndex"]

_Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]
_Self = TypeVar("_Self", bound="SegmentIndex")


class SegmentIndex(ABC):
    """The shared part of :class:`~knowledge_agent.backends.local.tfidf.index.SemanticSearcher`
    and :class:`~knowledge_agent.backends.local.dense.index.DenseIndex`."""

    _label: ClassVar[str]  # "TF-IDF index", "dense index": how messages name it
    _lock: threading.RLock
    _closed: bool
    _applied_seq: int
    _store: Any  # its ``version()`` is the manifest's on disk (None: kept in memory)
    _on_disk: tuple[int, int, int] | None  # the manifest this state reflects

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def update(
        self, upserts: Sequence[_Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None: ...

    @abstractmethod
    def refit(self) -> Any: ...

    @abstractmethod
    def chunk_count(self) -> int: ...

    @abstractmethod
    def _fit_batch(self) -> int:
        """Rows per batch of :meth:`fit_chunks`."""

    @abstractmethod
    def _persist(self) -> None: ...

    @abstractmethod
    def _load(self) -> None: ...

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SearchIndexError(f"the {self._label} is closed")

    def _acquire_open(self) -> None:
        """Take the lock for a rebuild, which holds it until it ends; refused when closed."""
        self._lock.acquire()
        try:
            self._check_open()
        except BaseException:
            self._lock.release()
            raise

    # -- updates -------------------------------------------------------------------------

    def update_chunks_for_item(self, item: KnowledgeItem, chunks: Sequence[KnowledgeChunk]) -> None:
        """Replace one item's rows: ``update(upserts=[(item, chunks)])``."""
        self.update(upserts=[(item, chunks)])

    def remove_chunks_for_item(self, item_id: str) -> None:
        """Drop one item's rows: ``update(deletes=[item_id])``."""
        self.update(deletes=[item_id])

    def fit_chunks(self, pairs: Iterable[_Pair | AnalysedBatch]) -> int:
        """Rebuild from scratch, streaming ``pairs`` in batches; returns the chunk count.

        ``pairs`` may hold analysed batches as well as pairs. The old index stays in place
        until the new one is complete. ``applied_seq`` is reset to 0: call
        :meth:`set_applied_seq` with the journal position the data reflects.
        """
        refit = self.refit()
        try:
            for group in grouped(pairs, self._fit_batch(), row_per_item=True):
                refit.add(group)
            return refit.finish()
        except BaseException:
            refit.cancel()
            raise

    # -- state ---------------------------------------------------------------------------

    def has_chunks(self) -> bool:
        """Whether any chunk row is indexed."""
        return self.chunk_count() > 0

    @property
    def applied_seq(self) -> int:
        """The storage journal position this index reflects."""
        with self._lock:
            return self._applied_seq

    def set_applied_seq(self, seq: int) -> None:
        """Record (and persist) the journal position the index now reflects."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ConfigError(f"applied_seq must be a non-negative integer, got {seq!r}")
        with self._lock:
            self._check_open()
            if seq != self._applied_seq:
                self._applied_seq = seq
                self._persist()

    # -- sharing -------------------------------------------------------------------------

    def verify(self, *, full: bool = True) -> list[Damage]:
        """The damaged files of the generation on disk now (none in memory): the manifest,
        every file's size, and with ``full`` every file's checksum."""
        return [] if self._store is None else self._store.verify(full=full)

    @property
    def legacy(self) -> bool:
        """Whether the generation held was read from the previous release's format (a
        manifest without sums, upgraded by :meth:`upgrade`)."""
        with self._lock:
            return self._store is not None and self._store.legacy is not None

    def upgrade(self) -> bool:
        """Seal the generation held if it is in the previous release's format: its files'
        sums are recorded in a new manifest, the segment files untouched (see
        :meth:`~knowledge_agent.backends.local.segments.store.ManifestDirectory.upgrade`). False
        when there is nothing to upgrade. Only the writer calls this."""
        if self._store is None:
            return False
        with self._lock:
            self._check_open()
            if not self._store.upgrade():
                return False
            self._on_disk = self._store.version()  # the same state, sealed
            return True

    def refresh(self) -> bool:
        """Load the generation on disk if another process wrote one since; True if so.

        Segments already held are reused (they never change once written). An unreadable
        new generation raises :class:`SearchIndexError` and leaves the current state alone.
        """
        if self._store is None:
            return False
        with self._lock:
            self._check_open()
            if self._store.version() == self._on_disk:
                return False
            self._load()
            return True
