"""Keep folders in sync: report debounced batches of changed and deleted files.

``FolderWatcher`` watches folders (or single files) and calls ``on_changes`` with a
``ChangeSet`` once the watched paths have been quiet for ``debounce`` seconds. It reports files
only, and only those ``walk`` would yield under the same ``WalkOptions``.

A ``ChangeSet`` is the net difference between the files as they were at the previous delivery
(or at ``start``) and as they are now:

* a file modified ten times in a burst is reported once, in ``changed``;
* a file created and deleted again within one batch is not reported at all;
* a file that existed before and was deleted (or deleted and re-created) within one batch is
  in ``deleted`` (or ``changed``) only, never in both;
* a deleted or moved-away folder reports every known file below it as deleted; a moved file
  is a deletion of its old path and a change of its new one;
* a file that stops matching the rules (say a ``.gitignore`` now lists it) is reported
  deleted, one that starts matching them is reported changed.

A batch waits for ``debounce`` seconds of quiet, but never longer than ten times
``debounce`` after its first change, so a file that is written to all the time is still
reported now and then. Activity in excluded folders (``.git/``, ``node_modules/`` …) does not
count as activity.

Two backends: ``watchdog`` (OS notifications, the ``[watch]`` extra) and ``polling`` (a
``walk`` snapshot every ``poll_interval`` seconds, works everywhere). With ``backend="auto"``
a watchdog observer that cannot start (say the inotify watch limit is reached) falls back to
polling. The watchdog backend does not see changes inside symlinked folders, which the OS does
not report; polling does.

The callback runs on the watcher's own thread. If it raises, the error is logged and the batch
counts as delivered; the watcher keeps running. A ``KeyboardInterrupt`` from the callback (a
Ctrl-C that stopped the collection it was running) stops the watcher instead, and is kept in
``interrupted``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowledge_agent.errors import ConfigError, IngestError
from knowledge_agent.extras import missing_extra
from knowledge_agent.ingest.walker import WalkOptions, _Checker, walk

__all__ = ["BACKENDS", "ChangeSet", "FolderWatcher"]

logger = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("auto", "watchdog", "polling")
"""Accepted values of ``FolderWatcher(backend=…)``."""

_WATCH_EXTRA = missing_extra("watching with watchdog", "watch")
_TICK = 0.1  # longest sleep of the loop: bounds how late a stop or a due batch is noticed
_MAX_DELAY_FACTOR = 10  # a batch is delivered at most this many debounces after it began

Snapshot = dict[str, tuple[int, int]]  # absolute path -> (size, mtime_ns)


@dataclass(frozen=True)
class ChangeSet:
    """One debounced batch: files created or modified, and files that disappeared.

    Paths are absolute (``os.path.abspath``, symlinks not resolved); a path is never in both.
    """

    changed: frozenset[Path] = field(default_factory=frozenset)
    deleted: frozenset[Path] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        """True when there is anything to apply."""
        return bool(self.changed or self.deleted)


class FolderWatcher:
    """Watch folders or files and report debounced ``ChangeSet`` batches to ``on_changes``.

    ``backend`` is ``"auto"`` (watchdog when installed, else polling), ``"watchdog"`` or
    ``"polling"``; ``backend_name`` tells which one is used. Use ``start()``/``stop()`` (or
    ``with``) for a background thread, or ``run(stop_event)`` to block the calling thread.
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        on_changes: Callable[[ChangeSet], None],
        *,
        options: WalkOptions | None = None,
        debounce: float = 1.0,
        poll_interval: float = 1.0,
        backend: str = "auto",
    ) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]  # one path given bare: forgive it
        if not paths:
            raise ConfigError("paths: give at least one folder or file to watch")
        if not callable(on_changes):
            raise ConfigError(f"on_changes must be callable, got {on_changes!r}")
        if options is not None and not isinstance(options, WalkOptions):
            raise ConfigError(f"options must be a WalkOptions, got {options!r}")
        self.debounce = _positive("debounce", debounce)
        self.poll_interval = _positive("poll_interval", poll_interval)
        self.options = options if options is not None else WalkOptions()
        self.on_changes = on_changes
        roots: list[str] = []
        for path in paths:
            root = os.path.abspath(os.fspath(path))
            if not os.path.exists(root):
                raise IngestError(str(path), "no such file or directory")
            if root not in roots:
                roots.append(root)
        self.roots: tuple[str, ...] = tuple(roots)

        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self._observer_class: Any = None
        if backend in ("auto", "watchdog"):
            try:
                from watchdog.observers import Observer  # optional: the [watch] extra
            except ImportError as exc:
                if backend == "watchdog":
                    raise ConfigError(_WATCH_EXTRA) from exc
            else:
                self._observer_class = Observer
        self.backend_name = "watchdog" if self._observer_class is not None else "polling"
        self._auto = backend == "auto"

        self._lock = threading.Lock()  # guards the pending event sets (watchdog thread)
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        # The Ctrl-C that cut the last batch short (the callback raised it), if any.
        self.interrupted: KeyboardInterrupt | None = None
        self._observer: Any = None
        # polling: the state at the last delivery, and at the last poll
        self._delivered: Snapshot = {}
        self._latest: Snapshot = {}
        self._missing: set[str] = set()  # roots found missing, to log that once
        # watchdog: files believed to exist and be included, and the events since the last batch
        self._known: set[str] = set()
        self._touched: set[str] = set()
        self._removed: set[str] = set()
        self._removed_dirs: set[str] = set()
        self._new_dirs: set[str] = set()
        self._rule_dirs: set[str] = set()
        self._dirty = False
        self._first_activity = 0.0
        self._last_activity = 0.0
        # one rule checker per root, for the cheap by-name filter of watchdog events
        self._filters = [_Checker(root, self.options) for root in self.roots]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Take the initial state, then watch on a daemon thread; returns at once.

        Changes made after ``start`` returns are reported. ``RuntimeError`` if already running.
        """
        self._begin()
        self._thread = threading.Thread(
            target=self._loop_then_end,
            args=(self._stop_requested,),
            name=f"FolderWatcher({self.roots[0]})",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop watching and wait up to ``timeout`` seconds for the thread; safe to repeat.

        Changes still waiting for their debounce are dropped.
        """
        self._stop_requested.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.warning("watcher thread did not stop within %s s", timeout)
            else:
                self._thread = None

    def run(self, stop_event: threading.Event) -> None:
        """Watch on the calling thread until ``stop_event`` is set (or ``stop()`` is called)."""
        self._begin()
        self._loop_then_end(stop_event)

    def __enter__(self) -> FolderWatcher:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _begin(self) -> None:
        """Take the initial state and start the OS observer, before returning to the caller."""
        if self._running:
            raise RuntimeError("this watcher is already running")
        self._running = True
        self._stop_requested.clear()
        self.interrupted = None
        self._dirty = False
        try:
            if self._observer_class is not None:
                try:
                    self._start_observer()
                except OSError as exc:
                    if not self._auto:
                        raise IngestError(self.roots[0], f"cannot watch: {exc}") from exc
                    logger.warning("watchdog cannot watch (%s); polling instead", exc)
                    self._observer_class = None
                    self.backend_name = "polling"
            if self._observer_class is None:
                self._delivered = self._latest = self._snapshot()
        except BaseException:
            self._stop_observer()
            self._running = False
            raise

    def _loop_then_end(self, stop_event: threading.Event) -> None:
        try:
            self._loop(stop_event)
        finally:
            self._stop_observer()
            self._running = False

    def _loop(self, stop_event: threading.Event) -> None:
        next_poll = time.monotonic() + self.poll_interval
        while not (stop_event.is_set() or self._stop_requested.is_set()):
            now = time.monotonic()
            try:
                if self._observer is None and now >= next_poll:
                    self._poll()
                    next_poll = time.monotonic() + self.poll_interval
                if self._dirty and now >= self._due():
                    self._deliver()
            except Exception:  # keep watching whatever one round ran into
                logger.exception("watching %s failed; retrying", ", ".join(self.roots))
            now = time.monotonic()
            wait = _TICK
            if self._observer is None:
                wait = min(wait, next_poll - now)
            if self._dirty:
                wait = min(wait, self._due() - now)
            # Waiting on stop_event wakes run() callers at once; stop() is seen within a tick.
            stop_event.wait(max(wait, 0.005))

    def _due(self) -> float:
        """When the pending batch is to be delivered (monotonic clock)."""
        quiet = self._last_activity + self.debounce
        return min(quiet, self._first_activity + _MAX_DELAY_FACTOR * self.debounce)

    def _mark_activity(self) -> None:
        now = time.monotonic()
        if not self._dirty:
            self._first_activity = now
        self._last_activity = now
        self._dirty = True

    def _deliver(self) -> None:
        """Compute the batch and hand it to the callback (never raises)."""
        try:
            changes = self._flush_events() if self._observer is not None else self._flush_poll()
        except Exception:
            logger.exception("could not compute the changes under %s", ", ".join(self.roots))
            return
        if not changes:
            return
        try:
            self.on_changes(changes)
        except KeyboardInterrupt as exc:
            # Raised on this thread only by a collection told to stop (Ctrl-C): stop too.
            logger.debug("the change callback was interrupted; the watcher stops")
            self.interrupted = exc
            self._stop_requested.set()
        except Exception:
            if self._stop_requested.is_set():  # closing under a running update: expected
                logger.debug("the change callback failed while stopping", exc_info=True)
            else:
                logger.exception("the change callback failed; the watcher keeps running")

    # -- polling -----------------------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        """{path: (size, mtime_ns)} of every file walk() yields under the roots."""
        snapshot: Snapshot = {}
        for root in self.roots:
            try:
                for found in walk(root, self.options):
                    snapshot[str(found.path)] = (found.size, found.mtime_ns)
            except IngestError as exc:  # the root vanished (or became unreadable)
                if root not in self._missing:
                    logger.warning("cannot watch %s: %s", root, exc.reason)
                    self._missing.add(root)
                continue
            self._missing.discard(root)
        return snapshot

    def _poll(self) -> None:
        current = self._snapshot()
        if current != self._latest:
            self._latest = current
            self._mark_activity()

    def _flush_poll(self) -> ChangeSet:
        self._dirty = False
        before, after = self._delivered, self._latest
        self._delivered = after
        changed = [path for path, sig in after.items() if before.get(path) != sig]
        deleted = [path for path in before if path not in after]
        return _change_set(changed, deleted)

    # -- watchdog ----------------------------------------------------------------------------

    def _start_observer(self) -> None:
        observer = self._observer_class()
        sink = _EventSink(self)
        try:
            for root in self.roots:
                if os.path.isdir(root):
                    observer.schedule(sink, root, recursive=True)
                else:  # a single file: watch its folder, events are filtered by path
                    observer.schedule(sink, os.path.dirname(root), recursive=False)
            # Start the observer before the initial walk so nothing between the two is lost.
            observer.start()
        except BaseException:
            try:  # stop the emitters that did start; the observer thread itself did not
                observer.stop()
            except Exception:
                logger.debug("could not stop a watchdog observer that failed to start")
            raise
        self._observer = observer
        with self._lock:
            self._touched.clear()
            self._removed.clear()
            self._removed_dirs.clear()
            self._new_dirs.clear()
            self._rule_dirs.clear()
        known: set[str] = set()
        for root in self.roots:
            try:
                known.update(str(found.path) for found in walk(root, self.options))
            except IngestError as exc:
                logger.warning("cannot watch %s: %s", root, exc.reason)
        self._known = known

    def _stop_observer(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=5.0)

    def _on_event(self, event: Any) -> None:
        """Record one watchdog event (observer thread): cheap, the work is done at delivery."""
        kind = event.event_type
        if kind not in ("created", "modified", "deleted", "moved", "closed"):
            return  # opened / closed_no_write / attrib change no content
        src = self._local(event.src_path)
        dest = self._local(event.dest_path) if kind == "moved" else None
        if all(
            checker.surely_excluded(path)
            for path in (src, dest)
            if path is not None
            for checker in self._filters
        ):
            return  # inside .git/, node_modules/ and the like: not even activity
        with self._lock:
            if event.is_directory:
                if kind == "modified" or kind == "closed":
                    return  # a folder's listing changed: its files have their own events
                if kind == "deleted" or kind == "moved":
                    self._removed_dirs.add(src)
                if kind == "created":
                    self._new_dirs.add(src)
                if dest is not None:
                    self._new_dirs.add(dest)
            else:
                if kind == "deleted" or kind == "moved":
                    self._removed.add(src)
                else:
                    self._touched.add(src)
                if dest is not None:
                    self._touched.add(dest)
                for path in (src, dest):
                    if path is not None and os.path.basename(path) == ".gitignore":
                        self._rule_dirs.add(os.path.dirname(path))
            self._mark_activity()

    def _local(self, raw: str | bytes) -> str:
        """An event path in the spelling of our roots (FSEvents reports resolved paths)."""
        path = os.path.abspath(os.fsdecode(raw))
        for root in self.roots:
            if path == root or path.startswith(root + os.sep):
                return path
        for root in self.roots:
            real = os.path.realpath(root)
            if real != root and (path == real or path.startswith(real + os.sep)):
                return root + path[len(real) :]
        return path

    def _flush_events(self) -> ChangeSet:
        """Turn the recorded events into a ChangeSet by looking at the files as they are now."""
        with self._lock:
            touched, self._touched = self._touched, set()
            removed, self._removed = self._removed, set()
            removed_dirs, self._removed_dirs = self._removed_dirs, set()
            new_dirs, self._new_dirs = self._new_dirs, set()
            rule_dirs, self._rule_dirs = self._rule_dirs, set()
            self._dirty = False
        checkers = [_Checker(root, self.options) for root in self.roots]
        known = self._known

        def included(path: str) -> bool:
            return any(checker.included(path) for checker in checkers)

        changed: set[str] = set()
        deleted: set[str] = set()
        # Whatever was removed and is not back (and included) now is gone.
        gone = (removed & known) | _under_any(known, removed_dirs)
        deleted.update(path for path in gone if not included(path))
        for path in touched:
            if included(path):
                changed.add(path)
            elif path in known:
                deleted.add(path)
        # Folders created or moved in: their files may predate the folder's OS watch, so all of
        # them count as changed. Folders whose .gitignore changed: files may have entered or
        # left the rules. Either way, walk each outermost such folder once.
        new_dirs = _outermost(new_dirs)
        rule_dirs = {d for d in _outermost(rule_dirs) if not _under_any({d}, new_dirs)}
        for folder in new_dirs | rule_dirs:
            present: set[str] = set()
            for checker in checkers:
                present.update(str(found.path) for found in checker.walk_below(folder))
            changed.update(present if folder in new_dirs else present - known)
            stale = _under_any(known, {folder}) - present
            deleted.update(path for path in stale if not included(path))
        changed -= deleted
        known.difference_update(deleted)
        known.update(changed)
        return _change_set(changed, deleted)


class _EventSink:
    """The watchdog event handler: forwards every event to the watcher.

    Duck-typed (watchdog only calls ``dispatch``), so this module imports without watchdog.
    """

    def __init__(self, watcher: FolderWatcher) -> None:
        self._watcher = watcher

    def dispatch(self, event: Any) -> None:
        try:
            self._watcher._on_event(event)
        except Exception:  # never let one odd event kill the observer thread
            logger.exception("could not record file system event %r", event)


def _positive(name: str, value: float) -> float:
    """Validate a positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _under_any(paths: set[str], folders: set[str]) -> set[str]:
    """The paths that are one of ``folders`` or lie below one (by path, not on disk)."""
    if not folders:
        return set()
    hits = set()
    for path in paths:
        current = path
        while True:
            if current in folders:
                hits.add(path)
                break
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return hits


def _outermost(folders: set[str]) -> set[str]:
    """Drop the folders that lie below another one of the set."""
    return {
        d
        for d in folders
        if os.path.dirname(d) == d or not _under_any({os.path.dirname(d)}, folders)
    }


def _change_set(changed: Sequence[str] | set[str], deleted: Sequence[str] | set[str]) -> ChangeSet:
    return ChangeSet(
        changed=frozenset(Path(path) for path in changed),
        deleted=frozenset(Path(path) for path in deleted),
    )
