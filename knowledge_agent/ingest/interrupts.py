"""Ctrl-C during collection runs: stop at a file (or page) boundary, never inside a commit.

Under :func:`graceful_interrupts` (the command line's) SIGINT sets a flag and raises
``KeyboardInterrupt``, except inside :func:`committing`, where it is raised as soon as the
commit and its counts are done. Runs on other threads (a watcher's) poll
:func:`check_interrupt` at their next file. :func:`timed` turns the interrupt into
``CollectInterrupted`` carrying the report of what was committed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

from knowledge_agent.ingest.report import CollectInterrupted, CollectReport

__all__ = [
    "check_interrupt",
    "committing",
    "graceful_interrupts",
    "interrupt_requested",
    "timed",
]

# Set by the graceful_interrupts handler on Ctrl-C: runs on any thread stop at their next file.
interrupt_requested_event = threading.Event()
# Per thread: how deep in a commit section it is, and whether a Ctrl-C waits for its end.
_commit_state = threading.local()


@contextlib.contextmanager
def graceful_interrupts() -> Iterator[None]:
    """Ctrl-C handling for a command-line run of collections; a no-op off the main thread.

    SIGINT still raises ``KeyboardInterrupt`` at once, except while a file is being committed
    and counted, where it is raised as soon as that file is done, so the count in the
    resulting ``CollectInterrupted`` is exactly what the database holds. Collections on
    other threads (a watcher's) stop at their next file. A handler other than Python's
    default is left alone.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    interrupt_requested_event.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupt_requested_event.clear()


def _on_sigint(signum: int, frame: object) -> None:
    interrupt_requested_event.set()
    if getattr(_commit_state, "depth", 0):
        _commit_state.pending = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """A commit, its counts and its progress events, not split by Ctrl-C."""
    state = _commit_state
    state.depth = getattr(state, "depth", 0) + 1
    try:
        yield
    finally:
        state.depth -= 1
        if not state.depth and getattr(state, "pending", False):
            state.pending = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def timed(report: CollectReport) -> Iterator[None]:
    """Set ``report.duration_s``; Ctrl-C becomes ``CollectInterrupted`` carrying the report."""
    started = time.perf_counter()
    try:
        yield
    except KeyboardInterrupt as exc:
        report.duration_s = time.perf_counter() - started
        raise CollectInterrupted(report) from exc
    report.duration_s = time.perf_counter() - started


def check_interrupt() -> None:
    """Stop a run at a file boundary once Ctrl-C was pressed (for runs off the main thread)."""
    if interrupt_requested_event.is_set():
        raise KeyboardInterrupt


def interrupt_requested() -> bool:
    """Whether Ctrl-C was pressed during the current :func:`graceful_interrupts` block."""
    return interrupt_requested_event.is_set()
