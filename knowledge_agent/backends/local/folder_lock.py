"""FolderLock: one writer at a time on a data folder, across processes.

The lock is an OS-level advisory lock on ``{data_dir}/write.lock``: ``fcntl.flock`` on POSIX,
``msvcrt.locking`` on Windows — both from the standard library, so no dependency, and both
released by the operating system when the holder dies (a kill -9 never leaves a stale lock,
unlike a lock *file* whose existence is the lock). ``flock`` locks belong to an open file, not
to a process, so two :class:`FolderLock` objects in one process exclude each other too.

The holder writes its process id into the file, only for the "waiting for process N" message;
the lock itself is the OS lock, never the file's content.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from knowledge_agent.errors import LockTimeoutError

__all__ = ["LOCK_FILE", "FolderLock"]

logger = logging.getLogger(__name__)

LOCK_FILE = "write.lock"
_POLL_S = 0.05  # first pause between attempts; doubles up to _POLL_MAX_S
_POLL_MAX_S = 0.25

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


# The locks of this process, for the fork hook below.
_LOCKS: weakref.WeakSet[FolderLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    """In a forked child (a collect's worker processes): close the inherited lock files.

    A ``flock`` belongs to the open file, which a fork shares: a child holding a copy would
    keep the lock after its parent died (a kill -9 during a collect) until it exited. Closing
    the copy drops the child's share; unlocking it would release the parent's lock.
    """
    for lock in list(_LOCKS):
        fd, lock._fd = lock._fd, None
        lock._depth = 0
        lock._guard = threading.Lock()  # another thread may have held it at the fork
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)


class FolderLock:
    """The write lock of one data folder; reentrant within the object.

    :meth:`acquire` waits (``timeout=None``: as long as it takes) and calls ``on_wait`` once
    with a message when it has to; :meth:`try_acquire` never waits. Each successful call is
    matched by one :meth:`release`.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder) / LOCK_FILE
        self._fd: int | None = None
        self._depth = 0
        self._guard = threading.Lock()
        _LOCKS.add(self)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._depth > 0

    def acquire(
        self,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        """Take the lock, waiting up to ``timeout`` seconds (None: no limit).

        ``LockTimeoutError`` when the time runs out; Ctrl-C interrupts the wait.
        """
        if self.try_acquire():
            return
        message = self._wait_message()
        logger.info("%s", message)
        if on_wait is not None:
            on_wait(message)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = _POLL_S
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeoutError(
                    f"timed out after {timeout:g} s waiting for the write lock {self.path} "
                    f"(held by {self._holder()})"
                )
            time.sleep(pause if deadline is None else min(pause, deadline - time.monotonic()))
            pause = min(pause * 2, _POLL_MAX_S)
            if self.try_acquire():
                return

    def try_acquire(self) -> bool:
        """Take the lock if it is free now; True when taken (or already held here)."""
        with self._guard:
            if self._depth:
                self._depth += 1
                return True
            fd = self._open()
            if fd is None:
                return False
            if not _try_lock(fd):
                os.close(fd)
                return False
            self._fd = fd
            self._depth = 1
            self._note_holder(fd)
            return True

    def release(self) -> None:
        """Undo one :meth:`acquire` / successful :meth:`try_acquire`."""
        with self._guard:
            if self._depth == 0:
                raise RuntimeError(f"{self.path} is not held")
            self._depth -= 1
            if self._depth == 0 and self._fd is not None:
                fd, self._fd = self._fd, None
                try:
                    _unlock(fd)
                finally:
                    os.close(fd)

    def _open(self) -> int | None:
        """The lock file, opened for writing (created if needed); None where that is
        impossible (a read-only folder: nobody can write there, so nobody needs the lock)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            logger.debug("cannot open %s for writing: %s", self.path, exc)
            return None

    @staticmethod
    def _note_holder(fd: int) -> None:
        # Best effort: only ever read for a message, so a full disk must not stop the lock.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, str(os.getpid()).encode("ascii"))

    def _holder(self) -> str:
        try:
            pid = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            pid = ""
        return f"process {pid}" if pid.isdigit() else "another process"

    def _wait_message(self) -> str:
        return f"waiting for {self._holder()}, which is writing to {self.path.parent}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path.parent)!r}, held={self.held})"
