"""Running things the stress harness cannot trust: a function in a child process with a time
limit, the ``knowledge-agent`` command (killable as a process group), and the check that a
data folder reopens consistent with every stored item findable in both indexes.

Every check of a knowledge base runs in a child process, so a hang, a crash or code planted
in an index cannot take the harness down with it: it becomes a figure instead.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

_STARTED = time.perf_counter()
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
_EXAMPLES = 10  # failures kept per list in the details: enough to reproduce, not a dump


def log(message: str) -> None:
    """Progress on stderr, with the seconds since the run started."""
    print(f"[{time.perf_counter() - _STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


def examples(values: Sequence[Any]) -> list[Any]:
    return list(values[:_EXAMPLES])


# -- a function in a child process ---------------------------------------------------------------


@dataclass(frozen=True)
class ChildResult:
    """``status`` is ok (``value`` holds the return value), error (``error`` holds the
    traceback), timeout (killed after the limit) or crashed (died without answering)."""

    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.ok:
            return "ok"
        last = self.error.strip().splitlines()[-1] if self.error.strip() else ""
        return f"{self.status}: {last}" if last else self.status


def _child_main(connection: Any, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # The package's warnings (an index rebuilt, a file skipped) would interleave with the
    # progress lines; the checks report what matters.
    logging.getLogger().addHandler(logging.NullHandler())
    try:
        connection.send(("ok", function(*args), ""))
    except BaseException:
        connection.send(("error", None, traceback.format_exc()))
    finally:
        connection.close()


def run_child(function: Callable[..., Any], *args: Any, timeout: float) -> ChildResult:
    """``function(*args)`` in a fresh (spawned) process, killed after ``timeout`` seconds.
    ``function`` must be importable at module level and return picklable plain data."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(sender, function, args), daemon=True)
    started = time.perf_counter()
    process.start()
    sender.close()
    answer = None
    try:
        if receiver.poll(timeout):
            answer = receiver.recv()
    except (EOFError, OSError):
        answer = None
    finally:
        receiver.close()
    seconds = time.perf_counter() - started
    if process.is_alive():
        process.join(5)
    if process.is_alive():
        process.kill()
        process.join(10)
        if answer is None:
            return ChildResult("timeout", error=f"no answer after {timeout:g} s", seconds=seconds)
    if answer is None:
        return ChildResult("crashed", error=f"exit code {process.exitcode}", seconds=seconds)
    status, value, error = answer
    return ChildResult(status, value, error, seconds)


# -- the command line ----------------------------------------------------------------------------


def cli_command() -> list[str]:
    """The installed ``knowledge-agent`` script of this interpreter's environment."""
    script = Path(sys.executable).with_name("knowledge-agent")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "knowledge_agent.cli"]


@dataclass
class CliRun:
    """One ``knowledge-agent`` run: exit code (negative: killed by that signal), output,
    wall seconds, and whether the harness killed it before it finished."""

    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    killed: bool = False
    timed_out: bool = False
    leftovers: int = 0  # processes of its group still alive after the kill (should be 0)

    @property
    def traceback(self) -> bool:
        return b"Traceback (most recent call last)" in self.stderr

    def stderr_tail(self, lines: int = 3) -> str:
        text = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return " | ".join(text[-lines:])


def wait_group_gone(pgid: int, limit: float = 10.0) -> int:
    """Wait until no process of group ``pgid`` is left; returns 1 if some still are."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return 0
        except PermissionError:
            return 0
        time.sleep(0.02)
    return 1


def _default_sigint() -> None:
    # A harness started in the background of a shell inherits SIGINT ignored, and Python
    # keeps an ignored SIGINT ignored: the command would never see a Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(
    args: Sequence[str | bytes], stdout: IO[bytes], stderr: IO[bytes]
) -> subprocess.Popen:
    """Start ``knowledge-agent ARGS`` from this tree in a session of its own (one killpg
    reaches its workers, as a terminal's signal reaches its foreground job), SIGINT default."""
    return subprocess.Popen(
        [*cli_command(), *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=dict(os.environ, PYTHONPATH=str(_PROJECT_ROOT), NO_COLOR="1", COLUMNS="200"),
        start_new_session=True,
        preexec_fn=_default_sigint,
    )


def run_cli(
    args: Sequence[str | bytes],
    *,
    timeout: float,
    kill_after: float | None = None,
    workdir: Path | None = None,
) -> CliRun:
    """Run ``knowledge-agent ARGS`` in a session of its own. With ``kill_after``, SIGKILL the
    whole process group (the command and its extraction workers) after that many seconds, if
    it has not finished; after ``timeout`` it is killed the same way and marked timed out."""
    out_dir = workdir or Path.cwd()
    with (
        open(out_dir / ".stress-stdout", "w+b") as stdout,
        open(out_dir / ".stress-stderr", "w+b") as stderr,
    ):
        started = time.perf_counter()
        process = start_cli(args, stdout, stderr)
        limit = timeout if kill_after is None else min(kill_after, timeout)
        killed = timed_out = False
        try:
            process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            killed = kill_after is not None and kill_after <= timeout
            timed_out = not killed
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        seconds = time.perf_counter() - started
        leftovers = wait_group_gone(process.pid) if killed or timed_out else 0
        stdout.seek(0)
        stderr.seek(0)
        return CliRun(
            process.returncode,
            stdout.read(),
            stderr.read(),
            seconds,
            killed=killed,
            timed_out=timed_out,
            leftovers=leftovers,
        )


# -- is a data folder consistent, and is every item findable? -----------------------------------


@dataclass
class Verdict:
    """What reopening a data folder showed. ``problems`` is empty when everything held."""

    opened: bool = False
    open_error: str = ""
    consistent: bool = False
    status_problems: list[str] = field(default_factory=list)
    items: int = 0
    chunks: int = 0
    keyword_items: int = 0
    semantic_items: int = 0
    pending_changes: int = 0
    not_found_keyword: list[str] = field(default_factory=list)
    not_found_semantic: list[str] = field(default_factory=list)
    semantic_below_top: int = 0  # found only within a path filter (hash collision rank)
    untokened: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    stale_files: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        for key, value in data.items():
            if isinstance(value, list):
                data[key] = {"count": len(value), "examples": examples(value)}
        return data


def open_core(target: str) -> Any:
    """A KnowledgeAgentCore on ``target``: a data folder, or a ``postgresql://`` URL."""
    from benchmarks.stress_postgres import is_url
    from knowledge_agent import KnowledgeAgentCore

    return KnowledgeAgentCore(backend=target) if is_url(target) else KnowledgeAgentCore(target)


def target_args(target: str) -> list[str]:
    """The ``knowledge-agent`` options that open ``target`` (a data folder or a URL)."""
    from benchmarks.stress_postgres import is_url

    return ["--backend", target] if is_url(target) else ["--data-dir", target]


def item_found(core: Any, item: Any, planted: str, mode: str) -> tuple[bool, bool]:
    """Whether a search for ``planted`` returns ``item`` (top 10), and whether it took a
    search restricted to the item's own path: the TF-IDF index hashes terms, so a unique word
    can share a column with a common one and rank its document below the first ten."""
    results = core.search(planted, mode=mode, limit=10, context_window=0)
    if any(result.item.id == item.id for result in results):
        return True, False
    if item.source_uri:
        scoped = core.search(
            planted, mode=mode, limit=10, context_window=0, path_prefix=item.source_uri
        )
        if any(result.item.id == item.id for result in scoped):
            return True, True
    return False, False


def all_items(core: Any) -> list[Any]:
    items: list[Any] = []
    while True:
        page = core.list_items(limit=1000, offset=len(items))
        items.extend(page)
        if len(page) < 1000:
            return items


def verify(data_dir: str, expected: dict[str, str] | None = None) -> dict[str, Any]:
    """Reopen ``data_dir`` (a data folder, or a PostgreSQL URL: then its tables are checked
    whole too) with the API (a writer-side open: it may replay the journal), take
    ``check()``, and search every stored item by the token its text carries, keyword and
    semantic. With ``expected`` ({file path: token}), also whether each file is exactly one
    item carrying its current token and nothing else is stored. Runs in a child process (see
    :func:`run_child`)."""
    from benchmarks.stress_corpus import tokens_in
    from benchmarks.stress_postgres import is_url, rows_whole

    verdict = Verdict()
    started = time.perf_counter()
    try:
        core = open_core(data_dir)
    except Exception as exc:
        verdict.open_error = f"{type(exc).__name__}: {exc}"
        return verdict.to_dict()
    try:
        verdict.opened = True
        status = core.check()
        verdict.consistent = status.consistent
        verdict.status_problems = list(status.problems)
        if is_url(data_dir):  # the tables themselves: every row with the rows it needs
            verdict.status_problems += rows_whole(data_dir)
            verdict.consistent = verdict.consistent and not verdict.status_problems
        verdict.items, verdict.chunks = status.items, status.chunks
        verdict.keyword_items, verdict.semantic_items = status.keyword_items, status.semantic_items
        verdict.pending_changes = status.pending_changes
        items = all_items(core)
        by_source: dict[str, list[Any]] = {}
        for item in items:
            by_source.setdefault(item.source_uri or "", []).append(item)
            planted = tokens_in(item.content)
            if not planted:
                verdict.untokened.append(item.id)
                continue
            for mode, missed in (
                ("keyword", verdict.not_found_keyword),
                ("semantic", verdict.not_found_semantic),
            ):
                found, scoped = item_found(core, item, planted[0], mode)
                if not found:
                    missed.append(f"{item.source_uri or item.id} ({planted[0]})")
                verdict.semantic_below_top += scoped
        if expected is not None:
            for path, planted in expected.items():
                stored = by_source.get(path, [])
                if not stored:
                    verdict.missing_files.append(path)
                elif len(stored) > 1:
                    verdict.duplicates.append(path)
                elif planted not in stored[0].content:
                    verdict.stale_files.append(path)
            verdict.unexpected = [source for source in by_source if source not in expected]
    except Exception as exc:
        verdict.status_problems.append(f"verification raised {type(exc).__name__}: {exc}")
        verdict.consistent = False
    finally:
        core.close()
        verdict.seconds = time.perf_counter() - started
    return verdict.to_dict()


def verdict_problems(answer: ChildResult, *, complete: bool = False) -> list[str]:
    """The problems of a :func:`verify` run, or why it gave no answer."""
    if not answer.ok:
        return [f"verification {answer.describe()}"]
    data = answer.value
    found: list[str] = []
    if not data["opened"]:
        return [f"reopen failed: {data['open_error']}"]
    if not data["consistent"]:
        found.append("inconsistent: " + "; ".join(data["status_problems"]["examples"]))
    for key, label in (
        ("not_found_keyword", "items not found by keyword"),
        ("not_found_semantic", "items not found by semantic"),
    ):
        if data[key]["count"]:
            found.append(f"{data[key]['count']} {label}")
    if complete:
        for key in ("missing_files", "stale_files", "unexpected", "duplicates"):
            if data[key]["count"]:
                found.append(f"{data[key]['count']} {key.replace('_', ' ')}")
    return found
