"""Writing a keyword index in batches: deleting many items, a rebuild's commits, and
cancelling a writer."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from whoosh.writing import CLEAR, SegmentWriter

from knowledge_agent.backends.local.keyword.internals import postings
from knowledge_agent.errors import SearchIndexError

__all__ = ["BatchWriter", "cancel", "delete_terms"]

logger = logging.getLogger(__name__)

Work = TypeVar("Work")

_FEW_VALUES = 64  # values to delete looked up one by one rather than by a pass over the terms


def delete_terms(writer: SegmentWriter, fieldname: str, values: Iterable[str]) -> None:
    """``writer.delete_by_term(fieldname, value)`` for every value.

    Whoosh looks each value up in every segment (a query per value: 0.6 s for 2,000 items
    over eight segments); here, for many values, each segment's terms of the field are read
    once and only the values found are looked up. A few values (a file re-indexed) are
    looked up directly: reading 18K item ids per segment cost more than the update.
    """
    if not writer.segments:
        return  # an empty index (a first import): nothing to look up
    fobj = writer.schema[fieldname]
    wanted = {fobj.to_bytes(value) for value in values}
    if not wanted:
        return
    for reader, base in writer.searcher().reader().leaf_readers():
        if len(wanted) <= _FEW_VALUES:
            found = [tbytes for tbytes in wanted if (fieldname, tbytes) in reader]
        else:
            found = [tbytes for tbytes in reader.lexicon(fieldname) if tbytes in wanted]
        for tbytes in found:
            docs, _ = postings(reader, fieldname, tbytes)
            for docnum in docs.tolist():
                if not reader.is_deleted(docnum):
                    writer.delete_document(base + docnum)


def cancel(writer: SegmentWriter) -> None:
    """Abandon ``writer``'s uncommitted documents and release Whoosh's lock; never raises.

    A writer that cannot close its segment (a full disk) still releases the lock, or the
    next writer of this process would wait for it in vain.
    """
    try:
        writer.cancel()
    except Exception as exc:
        logger.warning("could not cancel a Whoosh writer cleanly: %s", exc)
        lock = getattr(writer, "writelock", None)
        if lock is not None:
            with contextlib.suppress(Exception):
                lock.release()
        with contextlib.suppress(Exception):
            writer._tempstorage.destroy()
        writer.is_closed = True


class BatchWriter(Generic[Work]):
    """Feeds one index during a rebuild: a commit once ``every`` documents are pending, the
    first one dropping every older segment (whoosh's CLEAR merge policy) under the write
    lock. ``add(writer, work)`` adds a piece of work's documents and says how many."""

    def __init__(
        self,
        open_writer: Callable[[], SegmentWriter],
        add: Callable[[SegmentWriter, Work], int],
        every: int,
        where: str,
    ) -> None:
        self._open_writer = open_writer
        self._add = add
        self._every = every
        self._where = where  # for messages: "the chunks index in …"
        self._pending = 0  # documents added since the last commit
        self._cleared = False
        self._writer: SegmentWriter | None = open_writer()

    def add(self, work: Work) -> int:
        assert self._writer is not None
        try:
            added = self._add(self._writer, work)
        except SearchIndexError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc
        self._pending += added
        if self._pending >= self._every:
            self._commit()
            self._writer = self._open_writer()
        return added

    def finish(self) -> None:
        if self._cleared and not self._pending:
            self.cancel()  # nothing added since the last commit
        else:
            self._commit()

    def cancel(self) -> None:
        if self._writer is not None and not self._writer.is_closed:
            cancel(self._writer)
        self._writer = None

    def _commit(self) -> None:
        assert self._writer is not None
        try:
            self._writer.commit(mergetype=None if self._cleared else CLEAR)
        except SearchIndexError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc
        self._writer = None
        self._cleared = True
        self._pending = 0

    def _error(self, exc: Exception) -> SearchIndexError:
        return SearchIndexError(f"rebuilding {self._where} failed: {exc}")
