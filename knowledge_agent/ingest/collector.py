"""Collector: bring a knowledge base in line with the files under a root.

A run walks the root, compares every file with its tracked source row (size and mtime
first, then a content hash), extracts the new and changed files — in worker processes
when there are many — and writes each one to SQLite in its own transaction together with
its source row. Files that disappeared are removed. The search indexes are not touched
here: the caller syncs them once, from the journal, after the run.

An ``intro.md`` directly under a folder root is not a document: its text is the knowledge
base's description (its intro for agents). It is tracked like any file — a source row
without an item — so a change updates the description and its removal clears it.

Ctrl-C ends a run with ``CollectInterrupted`` carrying the report of the files committed so
far; the worker processes stop after the file each is on, skipping their queued ones. Under
:func:`graceful_interrupts` (the command line's) the signal never falls between a file's
commit and its count, and runs on other threads (the watcher's) stop at their next file.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledge_agent.analysis import detect_language
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.errors import (
    IngestError,
    StorageError,
    UnsupportedSourceError,
    WriteGroupError,
)
from knowledge_agent.ingest.doc_types import doc_type_for
from knowledge_agent.ingest.interrupts import (
    check_interrupt,
    committing,
    graceful_interrupts,
    interrupt_requested,
    timed,
)
from knowledge_agent.ingest.items import build_item
from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue
from knowledge_agent.ingest.walker import FoundFile, WalkOptions, walk
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.processors import ProcessedDocument, process_bytes
from knowledge_agent.processors.encoding import decode_bytes
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.sources import SourceRecord, path_to_db

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event as EventType

__all__ = [
    "INTRO_FILE",
    "Collector",
    "FileStamp",
    "ProgressCallback",
    "Stamp",
    "graceful_interrupts",
]

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[CollectProgress], None]


@dataclass(frozen=True)
class FileStamp:
    """What a source knows of a file beyond the file itself (its last git commit, say):
    ``updated_at`` becomes its item's, in place of the time it was collected, and
    ``metadata`` is added to the item's."""

    updated_at: datetime
    metadata: Mapping[str, Any]


Stamp = Callable[[FoundFile], FileStamp | None]
"""``stamp(file)``: the :class:`FileStamp` of a file whose item is being built, or None."""

INTRO_FILE = "intro.md"
"""The file at a folder root whose text becomes the knowledge base's description."""

# Below this many files, starting worker processes costs more than it saves.
_PARALLEL_THRESHOLD = 32
# Jobs in flight at once, in files and in bytes: bounds the extracted documents held in
# memory, and keeps the workers busy while this process writes an index update (the core
# indexes every 8 MB of files during a collect).
_WINDOW_FILES = 2048
_WINDOW_BYTES = 16_000_000
# Jobs sent to a worker at once: fewer round trips for many small files.
_CHUNK = 4
# Extracted files stored in one SQLite transaction: at most this many files, bytes or
# seconds of waiting, so progress and other writers are not held up for long.
_GROUP_FILES = 256
_GROUP_BYTES = 4_000_000
_GROUP_SECONDS = 0.25

# In a worker process: set by the parent when the run was interrupted.
_worker_cancel: EventType | None = None


# How often a worker checks that the process that started it is still there.
_PARENT_CHECK_SECONDS = 1.0


def _init_worker(cancel: EventType) -> None:
    """Worker initializer. Ctrl-C reaches the whole process group, but only the parent
    decides what to do about it: workers print no traceback and stop when it says so.
    A worker whose parent is gone (killed) ends too."""
    global _worker_cancel
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_cancel = cancel
    threading.Thread(
        target=_end_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True
    ).start()


def _end_with_parent(parent: int) -> None:
    """End this worker once ``parent`` is gone. An orphaned pool worker would otherwise
    wait for work forever: it and its siblings hold the write end of the pipe it reads, so
    the parent's death never reaches it as an end of file — and it keeps the data folder's
    files, and the parent's stderr, open."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_SECONDS)
    os._exit(1)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Hold SIGINT back while worker processes start: they inherit the mask, so a Ctrl-C
    before their initializer runs cannot interrupt them; the parent gets it afterwards."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stop_pool(executor: ProcessPoolExecutor, cancel: EventType, *, finished: bool) -> None:
    """Shut the pool down; after an interrupted run, without doing its pending work.

    Queued jobs are cancelled and the workers skip the files already handed to them, so
    the wait is for the file each worker is on. Terminating them instead can kill one
    half-way through sending a result, and the pool then waits for the rest of it forever;
    not waiting at all races the interpreter's exit, which joins the pool's thread anyway.
    """
    if not finished:
        cancel.set()
    executor.shutdown(wait=True, cancel_futures=not finished)


@dataclass(frozen=True)
class _Job:
    path: str
    config: ChunkConfig
    known_hash: str
    size: int = 0


@dataclass(frozen=True)
class _Outcome:
    path: str
    content_hash: str = ""
    document: ProcessedDocument | None = None
    error: IngestError | None = None

    @property
    def unchanged(self) -> bool:
        return self.document is None and self.error is None


@dataclass(frozen=True)
class _Pending:
    """An extracted file's item and source row, waiting for its group's write."""

    record: SourceRecord
    item: KnowledgeItem
    chunks: list[KnowledgeChunk]
    old_chunks: int  # the chunks its new version replaces
    size: int
    place: int  # its index among the group's progress steps


def _extract(job: _Job) -> _Outcome:
    """Read, hash and process one file; runs in a worker process. Never raises."""
    try:
        data = Path(job.path).read_bytes()
    except OSError as exc:
        return _Outcome(job.path, error=IngestError(job.path, exc.strerror or str(exc)))
    digest = hashlib.sha256(data).hexdigest()
    if digest == job.known_hash:
        return _Outcome(job.path, digest)
    try:
        document = process_bytes(data, job.path, job.config)
        # Detected here, in the worker, rather than in the process that writes.
        document.language = document.language or detect_language(document.content)
        return _Outcome(job.path, digest, document=document)
    except IngestError as exc:
        return _Outcome(job.path, digest, error=exc)
    except Exception as exc:  # a processor bug must not stop the folder
        logger.exception("processing %s failed", job.path)
        return _Outcome(
            job.path, digest, error=IngestError(job.path, f"{type(exc).__name__}: {exc}")
        )


def _extract_chunk(jobs: list[_Job]) -> list[_Outcome]:
    """Extract a few files in a worker; fewer once the run is cancelled (then unused)."""
    outcomes: list[_Outcome] = []
    for job in jobs:
        if _worker_cancel is not None and _worker_cancel.is_set():
            break
        outcomes.append(_extract(job))
    return outcomes


def _mtime_iso(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc).isoformat()


class Collector:
    """Collects files into one SQLite store; see the module docstring."""

    def __init__(
        self,
        storage: SQLiteStorageManager,
        chunk_config: ChunkConfig,
        *,
        doc_type_rules: Mapping[str, str] | None = None,
        workers: int | None = None,
    ) -> None:
        self.storage = storage
        self.chunk_config = chunk_config
        self.doc_type_rules = doc_type_rules
        self.workers = workers if workers is not None else min(4, os.cpu_count() or 1)

    # -- runs -----------------------------------------------------------------------------

    def collect(
        self,
        kb: str,
        root: str,
        options: WalkOptions,
        *,
        full: bool = False,
        progress: ProgressCallback | None = None,
        stamp: Stamp | None = None,
    ) -> CollectReport:
        """Index new and changed files under ``root``, remove vanished ones.

        A missing root raises ``IngestError``. With ``full``, every file is re-extracted.
        ``stamp`` dates the items built (see :class:`FileStamp`).
        """
        report = CollectReport(kb=kb)

        def not_text(relative: str, kind: str) -> None:
            report.not_text.add(os.path.join(root, *relative.split("/")), kind)

        with timed(report):
            found = list(walk(root, options, on_excluded=not_text))
            known = self.storage.sources.get_sources(kb, root)
            present = {str(file.path) for file in found}
            vanished = [path for path in known if path not in present]
            # A file tracked under another root of this kb keeps its item (no duplicate):
            # the rows of the files not tracked under this root, looked up at once.
            known |= self.storage.sources.get_sources_by_path(kb, present - known.keys())
            self._run(kb, root, found, known, vanished, options, full, report, progress, stamp)
        return report

    def apply_changes(
        self,
        kb: str,
        root: str,
        options: WalkOptions,
        changed: Iterable[Path],
        deleted: Iterable[Path],
        progress: ProgressCallback | None = None,
        stamp: Stamp | None = None,
    ) -> CollectReport:
        """Index these changed files and remove these deleted ones (the watcher's and a git
        work tree's path: the caller knows which files changed and that they are included)."""
        report = CollectReport(kb=kb)
        with timed(report):
            self._apply(kb, root, options, changed, deleted, report, progress, stamp)
        return report

    def _apply(
        self,
        kb: str,
        root: str,
        options: WalkOptions,
        changed: Iterable[Path],
        deleted: Iterable[Path],
        report: CollectReport,
        progress: ProgressCallback | None,
        stamp: Stamp | None,
    ) -> None:
        found: list[FoundFile] = []
        gone = {str(path) for path in deleted}
        for path in changed:
            try:
                stat = path.stat()
            except OSError:
                gone.add(str(path))
                continue
            found.append(
                FoundFile(
                    path=path,
                    relative=path.name if path == Path(root) else path.relative_to(root).as_posix(),
                    size=stat.st_size,
                    mtime_ns=stat.st_mtime_ns,
                    too_large=stat.st_size > options.max_file_size,
                )
            )
        # Only the rows of these paths: a watched folder may track a hundred thousand files.
        paths = [*gone, *(str(file.path) for file in found)]
        known = self.storage.sources.get_sources_by_path(kb, paths)
        vanished = [path for path in gone if path in known and known[path].root == root]
        self._run(kb, root, found, known, vanished, options, False, report, progress, stamp)

    def remove_missing_root(self, kb: str, root: str, report: CollectReport) -> None:
        """A collected single file that no longer exists: drop its item and its root."""
        for path in self.storage.sources.get_sources(kb, root):
            self._remove(kb, path, report)
            report.removed += 1
        self.storage.sources.delete_root(kb, root)

    # -- the pipeline ------------------------------------------------------------------------

    def _run(
        self,
        kb: str,
        root: str,
        found: Sequence[FoundFile],
        known: dict[str, SourceRecord],
        vanished: Sequence[str],
        options: WalkOptions,
        full: bool,
        report: CollectReport,
        progress: ProgressCallback | None,
        stamp: Stamp | None,
    ) -> None:
        intro_path = os.path.join(root, INTRO_FILE)
        intro = next((file for file in found if str(file.path) == intro_path), None)
        intro_gone = intro_path in vanished
        found = [file for file in found if file is not intro]
        vanished = [path for path in vanished if path != intro_path]
        total = len(found) + len(vanished) + (intro is not None or intro_gone)
        bytes_total = sum(f.size for f in found) + (intro.size if intro else 0)
        done = bytes_done = 0

        def step(path: str, status: str, size: int = 0) -> None:
            nonlocal done, bytes_done
            done += 1
            bytes_done += size
            if progress is not None:
                progress(CollectProgress(path, status, done, total, bytes_done, bytes_total))

        if intro is not None or intro_gone:
            check_interrupt()
            with committing():
                if intro is None:
                    status = self._clear_intro(kb, intro_path, report)
                else:
                    record = known.get(intro_path)
                    status = self._read_intro(kb, root, intro, record, options, full, report)
                step(intro_path, status, intro.size if intro else 0)

        for path in vanished:
            check_interrupt()
            with committing():
                self._remove(kb, path, report)
                report.removed += 1
                step(path, "removed")

        todo: list[tuple[FoundFile, SourceRecord | None]] = []
        for file in found:
            check_interrupt()
            record = known.get(str(file.path))
            if file.too_large:
                reason = _too_large(file, options)
                with committing():
                    self._skip(kb, root, file, record, reason, report, kind="too large")
                    step(str(file.path), "skipped", file.size)
            elif not full and record is not None and _same_stat(record, file):
                report.unchanged += 1
                step(str(file.path), "unchanged", file.size)
            else:
                todo.append((file, record))

        records = {str(file.path): (file, record) for file, record in todo}
        jobs = [
            _Job(
                str(file.path),
                self.chunk_config,
                "" if full or not record else record.content_hash,
                file.size,
            )
            for file, record in todo
        ]
        # Closed explicitly: an interrupted run must stop the workers now, not whenever the
        # traceback holding the generator is freed.
        with contextlib.closing(self._extract_all(jobs)) as outcomes:
            group: list[_Outcome] = []
            group_bytes = 0
            started = time.monotonic()
            for outcome in outcomes:
                check_interrupt()
                group.append(outcome)
                group_bytes += records[outcome.path][0].size
                if (
                    len(group) >= _GROUP_FILES
                    or group_bytes >= _GROUP_BYTES
                    or time.monotonic() - started >= _GROUP_SECONDS
                ):
                    self._store_group(kb, root, records, group, report, step, stamp)
                    group, group_bytes, started = [], 0, time.monotonic()
            self._store_group(kb, root, records, group, report, step, stamp)

    def _store_group(
        self,
        kb: str,
        root: str,
        records: dict[str, tuple[FoundFile, SourceRecord | None]],
        group: list[_Outcome],
        report: CollectReport,
        step: Callable[[str, str, int], None],
        stamp: Stamp | None,
    ) -> None:
        """Store extracted files in one transaction; progress once they are committed.

        A storage may find a write of the group failed only once the group ends (a database
        checks and indexes a group's writes in batches): that write was rolled back alone
        (``WriteGroupError``), and its file is reported failed, as one that could not be
        read, rather than the run stopping.
        """
        if not group:
            return
        stored: list[tuple[str, str, int]] = []
        written: dict[str, tuple[int, tuple[int, ...]]] = {}  # item id: place, counts added
        pending: list[_Pending] = []
        with committing():
            try:
                with self.storage.write_group("collect"):
                    for outcome in group:
                        if interrupt_requested():
                            break  # the rest of the group is simply not done yet
                        file, record = records[outcome.path]
                        if outcome.document is not None and outcome.error is None:
                            # Written with the group's other documents below, in one go.
                            pending.append(
                                self._pending(kb, root, file, record, outcome, stamp, len(stored))
                            )
                            stored.append((outcome.path, "processed", file.size))
                            continue
                        status = self._store(kb, root, file, record, outcome, report, stamp)
                        stored.append((outcome.path, status, file.size))
                    self._write_pending(pending, report, written)
            except WriteGroupError as exc:
                left = self._written_again(exc, pending)
                if left is not None:
                    self._failed_writes(root, left, records, written, stored, report)
            finally:
                # A document whose write raised (the run stops) is not reported done.
                done = {place for place, _ in written.values()}
                for place, (path, status, size) in enumerate(stored):
                    if status != "processed" or place in done:
                        step(path, status, size)
        check_interrupt()

    def _write_pending(
        self,
        pending: list[_Pending],
        report: CollectReport,
        written: dict[str, tuple[int, tuple[int, ...]]],
    ) -> None:
        """Write extracted documents: all in one transaction (one statement per table);
        when that fails, one at a time, so each one that can be is stored and the error
        is the write of the file it belongs to."""
        if not pending:
            return
        entries = [(entry.record, entry.item, entry.chunks) for entry in pending]
        try:
            self.storage.sources.save_source_items(entries)
        except StorageError:
            if len(pending) == 1:
                raise
            logger.debug("a group write failed; writing its %d files one by one", len(pending))
            for entry in pending:
                self.storage.sources.save_source_item(entry.record, entry.item, entry.chunks)
                self._count(entry, report, written)
            return
        for entry in pending:
            self._count(entry, report, written)

    def _written_again(
        self, error: WriteGroupError, pending: list[_Pending]
    ) -> WriteGroupError | None:
        """A write of several files that the group rolled back when it checked their batch
        (a database finds a failure only then) written again one file at a time, in a group
        of its own: only the files whose own write fails stay failed. The failures left."""
        by_id = {entry.item.id: entry for entry in pending}
        left: list[tuple[list[str], Exception]] = []
        again: list[_Pending] = []
        for item_ids, cause in error.failures:
            ours = [by_id[item_id] for item_id in item_ids if item_id in by_id]
            if len(ours) > 1:
                again += ours
            else:
                left.append((item_ids, cause))
        if again:
            logger.debug("a write of %d files failed; writing them one by one", len(again))
            try:
                with self.storage.write_group(error.operation):
                    for entry in again:
                        self.storage.sources.save_source_item(
                            entry.record, entry.item, entry.chunks
                        )
            except WriteGroupError as exc:
                left += exc.failures
        return WriteGroupError(error.operation, left) if left else None

    @staticmethod
    def _count(
        entry: _Pending, report: CollectReport, written: dict[str, tuple[int, tuple[int, ...]]]
    ) -> None:
        added = (1, len(entry.chunks), entry.old_chunks, entry.size)
        report.processed += 1
        report.chunks_added += added[1]
        report.chunks_removed += added[2]
        report.bytes_processed += added[3]
        report.item_ids.append(entry.item.id)
        written[entry.item.id] = (entry.place, added)

    def _failed_writes(
        self,
        root: str,
        error: WriteGroupError,
        records: dict[str, tuple[FoundFile, SourceRecord | None]],
        written: dict[str, tuple[int, tuple[int, ...]]],
        stored: list[tuple[str, str, int]],
        report: CollectReport,
    ) -> None:
        """Count the files of the writes ``error`` says were rolled back as failed, and
        record them so: what was indexed before stays, and the next run retries them."""
        lost: set[str] = set()
        for item_ids, cause in error.failures:
            reason = " ".join(str(cause).split())
            places = [(item_id, written[item_id]) for item_id in item_ids if item_id in written]
            if not places:  # not a file's write (none of this group's files wrote these)
                report.failed.append(FileIssue(root, reason))
                continue
            for item_id, (place, added) in places:
                lost.add(item_id)
                path, _, size = stored[place]
                stored[place] = (path, "failed", size)
                report.processed -= added[0]
                report.chunks_added -= added[1]
                report.chunks_removed -= added[2]
                report.bytes_processed -= added[3]
                report.failed.append(FileIssue(path, reason))
                logger.warning("could not store %s: %s", path, reason)
                record = records[path][1]
                self.storage.sources.save_source(
                    SourceRecord(
                        kb=report.kb,
                        path=path,
                        root=root,
                        size=-1,
                        mtime_ns=0,
                        status="failed",
                        item_id=record.item_id if record else None,
                        error=reason,
                    )
                )
        report.item_ids[:] = [item_id for item_id in report.item_ids if item_id not in lost]

    def _extract_all(self, jobs: list[_Job]) -> Iterator[_Outcome]:
        """Outcomes in job order; worker processes when there are many jobs."""
        if self.workers <= 1 or len(jobs) < _PARALLEL_THRESHOLD:
            yield from map(_extract, jobs)
            return
        chunks = (jobs[start : start + _CHUNK] for start in range(0, len(jobs), _CHUNK))
        position = 0  # jobs whose outcome was yielded
        context = multiprocessing.get_context()
        cancel = context.Event()
        executor = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(cancel,),
        )
        in_flight: deque[tuple[Future[list[_Outcome]], int, int]] = deque()  # files, bytes
        files = size = 0

        def fill() -> None:
            nonlocal files, size
            while files < _WINDOW_FILES and size < _WINDOW_BYTES:
                chunk = next(chunks, None)
                if chunk is None:
                    return
                chunk_size = sum(job.size for job in chunk)
                in_flight.append((executor.submit(_extract_chunk, chunk), len(chunk), chunk_size))
                files += len(chunk)
                size += chunk_size

        finished = broken = False
        try:
            with _sigint_blocked():  # the workers start with the first submissions
                fill()
            while in_flight:
                future, chunk_files, chunk_size = in_flight.popleft()
                outcomes = future.result()
                files -= chunk_files
                size -= chunk_size
                fill()
                for outcome in outcomes:
                    position += 1
                    yield outcome
            finished = True
        except (BrokenProcessPool, OSError) as exc:
            logger.warning("worker processes failed (%s); extracting in this process", exc)
            broken = True
        finally:
            _stop_pool(executor, cancel, finished=finished)
        if broken:
            yield from map(_extract, jobs[position:])

    def _store(
        self,
        kb: str,
        root: str,
        file: FoundFile,
        record: SourceRecord | None,
        outcome: _Outcome,
        report: CollectReport,
        stamp: Stamp | None,
    ) -> str:
        path = str(file.path)
        base = SourceRecord(
            kb=kb,
            path=path,
            root=root,
            size=file.size,
            mtime_ns=file.mtime_ns,
            status="indexed",
            item_id=record.item_id if record else None,
            content_hash=outcome.content_hash,
        )
        if outcome.unchanged:
            # Touched but not changed: remember the new mtime so the hash is not read again.
            self.storage.sources.save_source(
                replace(base, status=record.status if record else "indexed")
            )
            report.unchanged += 1
            return "unchanged"
        error = outcome.error
        if isinstance(error, UnsupportedSourceError):
            self._skip(kb, root, file, record, error.reason, report)
            return "skipped"
        # An extracted document is written with its group (_pending); this is a failure.
        assert error is not None
        # Keep what was indexed before (the failure may be passing); no size, mtime or
        # hash to compare against makes the next run try again.
        logger.warning("could not ingest %s: %s", path, error.reason)
        self.storage.sources.save_source(
            replace(base, size=-1, mtime_ns=0, content_hash="", status="failed", error=error.reason)
        )
        report.failed.append(FileIssue(path, error.reason))
        return "failed"

    def _pending(
        self,
        kb: str,
        root: str,
        file: FoundFile,
        record: SourceRecord | None,
        outcome: _Outcome,
        stamp: Stamp | None,
        place: int,
    ) -> _Pending:
        """The item of an extracted file and its source row, ready to be written."""
        assert outcome.document is not None
        item = self._item(kb, root, file, record, outcome.document, stamp)
        source = SourceRecord(
            kb=kb,
            path=str(file.path),
            root=root,
            size=file.size,
            mtime_ns=file.mtime_ns,
            status="indexed",
            item_id=item.id,
            content_hash=outcome.content_hash,
        )
        old_chunks = self.storage.count_chunks(item_id=item.id) if record else 0
        return _Pending(source, item, outcome.document.chunks, old_chunks, file.size, place)

    def _item(
        self,
        kb: str,
        root: str,
        file: FoundFile,
        record: SourceRecord | None,
        document: ProcessedDocument,
        stamp: Stamp | None,
    ) -> KnowledgeItem:
        metadata = dict(document.metadata)
        metadata.update(
            {
                "relative_path": path_to_db(file.relative),
                "root": path_to_db(root),
                "size": file.size,
                "modified_at": _mtime_iso(file.mtime_ns),
            }
        )
        item = build_item(
            self.storage,
            document.content,
            item_id=record.item_id if record else None,
            title=document.title or file.path.name,
            source_type=document.source_type,
            source_uri=path_to_db(str(file.path)),
            content_type=document.content_type,
            doc_type=doc_type_for(file.relative, Path(root).name, self.doc_type_rules),
            language=document.language,
            tags=document.tags,
            metadata=metadata,
            kb=kb,
        )
        stamped = stamp(file) if stamp is not None else None
        if stamped is not None:
            item.updated_at = stamped.updated_at
            item.metadata.update(stamped.metadata)
        return item

    def _skip(
        self,
        kb: str,
        root: str,
        file: FoundFile,
        record: SourceRecord | None,
        reason: str,
        report: CollectReport,
        *,
        kind: str = "",
    ) -> None:
        path = str(file.path)
        if record is not None and record.item_id:
            self._remove(kb, path, report)
        self.storage.sources.save_source(
            SourceRecord(kb, path, root, file.size, file.mtime_ns, "skipped", error=reason)
        )
        report.skipped.append(FileIssue(path, reason, kind))

    def _read_intro(
        self,
        kb: str,
        root: str,
        file: FoundFile,
        record: SourceRecord | None,
        options: WalkOptions,
        full: bool,
        report: CollectReport,
    ) -> str:
        """Make the text of ``intro.md`` the knowledge base's description; the progress status.

        Counted as processed when read (no item: it is not searchable text), unchanged when
        its size and time, or its hash, say it is the one already applied.
        """
        path = str(file.path)
        # The intro this row applied; a row with an item is an intro.md that was indexed as
        # a document before this convention, and is replaced below.
        applied = record if record and record.status == "indexed" and not record.item_id else None
        if file.too_large:
            self._skip(kb, root, file, record, _too_large(file, options), report, kind="too large")
            return "skipped"
        if applied is not None and not full and _same_stat(applied, file):
            report.unchanged += 1
            return "unchanged"
        try:
            data = file.path.read_bytes()
        except OSError as exc:
            report.failed.append(FileIssue(path, exc.strerror or str(exc)))
            return "failed"
        digest = hashlib.sha256(data).hexdigest()
        base = SourceRecord(
            kb, path, root, file.size, file.mtime_ns, "indexed", content_hash=digest
        )
        if applied is not None and not full and applied.content_hash == digest:
            self.storage.sources.save_source(base)  # touched, not changed: remember the new time
            report.unchanged += 1
            return "unchanged"
        if record is not None and record.item_id:
            self._remove(kb, path, report)
        text, _ = decode_bytes(data)
        self.storage.sources.ensure_kb(kb, text.strip())
        self.storage.sources.save_source(base)
        logger.info("%s: %s is the description of knowledge base %s", root, INTRO_FILE, kb)
        report.processed += 1
        report.bytes_processed += file.size
        return "processed"

    def _clear_intro(self, kb: str, path: str, report: CollectReport) -> str:
        """``intro.md`` is gone: so is the description it gave (counted as removed)."""
        self._remove(kb, path, report)
        self.storage.sources.ensure_kb(kb, "")
        report.removed += 1
        return "removed"

    def _remove(self, kb: str, path: str, report: CollectReport) -> None:
        record = self.storage.sources.get_source(kb, path)
        if record is not None and record.item_id:
            report.chunks_removed += self.storage.count_chunks(item_id=record.item_id)
        self.storage.sources.delete_source(kb, path)


def _size_text(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _too_large(file: FoundFile, options: WalkOptions) -> str:
    return f"{_size_text(file.size)} is over the {_size_text(options.max_file_size)} limit"


def _same_stat(record: SourceRecord, file: FoundFile) -> bool:
    return record.size == file.size and record.mtime_ns == file.mtime_ns
