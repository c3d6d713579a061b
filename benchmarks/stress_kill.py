"""kill -9 at random moments of ``knowledge-agent add``, of a re-add of edited files, of
``remove`` and of ``rebuild``; after each kill the data folder must reopen consistent with every
stored item findable, and re-running the command must finish the job.

A trial: a fresh data folder (empty for ``add``, a copy of a complete base for the others), the
command started in its own process group, SIGKILL to the group after a delay drawn uniformly
from the command's measured duration, then :func:`~benchmarks.stress_checks.verify` in a child
process; then the same command again to completion and a second verification against what
the folder must hold now.

On a database, the kill is timed by what the server sees instead (:class:`WriteProbe`): a
delay drawn within the time the command's write transactions stay open, counted from the
first one seen, and then SIGKILL the moment one is seen open, so that kills land inside a
transaction that has written some files and not committed them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.stress_checks import (
    CliRun,
    examples,
    log,
    run_child,
    run_cli,
    start_cli,
    verdict_problems,
    verify,
    wait_group_gone,
)
from benchmarks.stress_corpus import Corpus, edit_files, write_corpus

VERIFY_TIMEOUT = 600.0


@dataclass
class KillFamily:
    """How one command is set up, run and judged.

    ``prepare(trial, data_dir)`` readies the data folder and the files for a trial and returns
    the command's arguments; ``expected()`` is {file path: token} the folder must hold once
    the command has run to completion."""

    name: str
    prepare: Callable[[int, Path], list[str]]
    expected: Callable[[], dict[str, str]]
    # ``remove`` run again after a kill that came too late has nothing left to remove.
    rerun_may_exit_1: bool = False
    # What ``verify`` opens for a trial (after ``prepare``): its data folder, or a database.
    target: Callable[[int, Path], str] = lambda trial, data_dir: str(data_dir)
    # What the server of a trial's database sees, read while its command runs: with it,
    # each kill lands inside an open write transaction (see the module docstring).
    probe: Callable[[int], WriteProbe] | None = None


@dataclass
class WriteState:
    """One look at a database: whether a write transaction (one that has written item rows
    and not ended) is open, and how many items are committed."""

    writing: bool
    committed: int


class WriteProbe:
    """Looks at one database from a connection of its own: :meth:`look` is one round trip."""

    _QUERY = """
        SELECT (SELECT count(*) FROM knowledge_items),
               EXISTS (SELECT 1 FROM pg_locks
                       WHERE relation = to_regclass('knowledge_items')
                         AND mode = 'RowExclusiveLock' AND granted
                         AND pid <> pg_backend_pid())
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: Any = None

    def look(self) -> WriteState:
        import psycopg

        try:
            if self._conn is None:
                self._conn = psycopg.connect(self._url, autocommit=True)
            row: Any = self._conn.execute(self._QUERY).fetchone()
            return WriteState(bool(row[1]), int(row[0]))
        except psycopg.Error:  # the tables are not made yet
            return WriteState(False, 0)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class WriteWatch:
    """What a :class:`WriteProbe` saw of one run: seconds from the start to the first and
    the last look that saw a write open; at the kill, whether the last look saw one open and
    the items committed then; after the kill, the items committed."""

    first_open_s: float | None = None
    last_open_s: float | None = None
    open_at_kill: bool = False
    committed_at_kill: int = 0
    committed_after_kill: int = 0

    @property
    def open_span_s(self) -> float:
        """Seconds from the first write seen open to the last (0 when none was seen)."""
        if self.first_open_s is None or self.last_open_s is None:
            return 0.0
        return self.last_open_s - self.first_open_s

    @property
    def rolled_back(self) -> bool:
        """The kill landed inside a write transaction, which the server rolled back: one was
        open at the last look before the kill, and no item committed since that look."""
        return self.open_at_kill and self.committed_after_kill == self.committed_at_kill


def _trial(
    family: KillFamily, trial: int, work: Path, delay: float, timeout: float
) -> dict[str, Any]:
    """A trial killed after ``delay`` seconds; for a family with a ``probe``, at the first
    moment a write transaction is seen open once ``delay`` seconds have passed since the
    first was."""
    data_dir = work / f"trial{trial:03d}"
    args = family.prepare(trial, data_dir)
    target = family.target(trial, data_dir)
    watch = WriteWatch()
    if family.probe is None:
        killed = run_cli(args, timeout=timeout, kill_after=delay, workdir=work)
    else:
        probe = family.probe(trial)
        try:
            killed, watch = run_watching_writes(args, probe, delay, timeout, work)
        finally:
            probe.close()
    after_kill = run_child(verify, target, timeout=VERIFY_TIMEOUT)
    rerun = run_cli(args, timeout=timeout, workdir=work)
    after_rerun = run_child(verify, target, family.expected(), timeout=VERIFY_TIMEOUT)
    kill_problems = verdict_problems(after_kill)
    rerun_problems = verdict_problems(after_rerun, complete=True)
    allowed = (0, 1) if family.rerun_may_exit_1 else (0,)
    if rerun.timed_out or rerun.traceback or rerun.returncode not in allowed:
        rerun_problems.append(f"re-run failed (exit {rerun.returncode}): {rerun.stderr_tail()}")
    if not killed.killed and (killed.traceback or killed.returncode != 0):
        kill_problems.append(
            f"finished before the kill with exit {killed.returncode}: {killed.stderr_tail()}"
        )
    if killed.leftovers:
        kill_problems.append("processes of the killed group survived the kill")
    shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "trial": trial,
        "delay_s": round(delay, 3),
        "killed": killed.killed,
        "exit": killed.returncode,
        "reopened": after_kill.ok and after_kill.value["opened"],
        "after_kill": kill_problems,
        "after_rerun": rerun_problems,
        "items_after_kill": after_kill.value["items"] if after_kill.ok else None,
        "in_transaction": killed.killed and watch.rolled_back,
        "semantic_below_top": after_kill.value["semantic_below_top"] if after_kill.ok else None,
        "ok": not kill_problems and not rerun_problems,
    }


def command_duration(family: KillFamily, work: Path, timeout: float) -> float:
    """Seconds the family's command takes run to completion once (trial 0), from which the
    moments of the kills or signals of its trials are drawn; for a family with a ``probe``,
    the seconds its write transactions were seen open, first to last."""
    work.mkdir(parents=True, exist_ok=True)
    timing_dir = work / "timing"
    args = family.prepare(0, timing_dir)
    if family.probe is None:
        timing: CliRun = run_cli(args, timeout=timeout, workdir=work)
        seconds = timing.seconds
    else:
        probe = family.probe(0)
        try:
            timing, watch = run_watching_writes(args, probe, None, timeout, work)
        finally:
            probe.close()
        seconds = watch.open_span_s
        log(f"  {family.name}: {timing.seconds:.1f} s, its writes open for {seconds:.2f} s")
    if timing.returncode != 0:
        log(f"  {family.name}: the timing run failed: {timing.stderr_tail()}")
    shutil.rmtree(timing_dir, ignore_errors=True)
    return seconds


def run_watching_writes(
    args: list[str], probe: WriteProbe, delay: float | None, timeout: float, work: Path
) -> tuple[CliRun, WriteWatch]:
    """Run ``knowledge-agent ARGS`` in a session of its own, looking at its database as fast
    as the probe answers. With ``delay``, SIGKILL its group at the first look that sees a
    write transaction open once ``delay`` seconds have passed since the first one was seen
    (no kill if the command ends first); killed after ``timeout`` all the same."""
    watch = WriteWatch()
    with open(work / ".stress-stderr", "w+b") as stderr:
        started = time.perf_counter()
        process = start_cli(args, subprocess.DEVNULL, stderr)  # type: ignore[arg-type]
        killed = False
        while process.poll() is None:
            state = probe.look()
            now = time.perf_counter() - started
            if state.writing:
                watch.last_open_s = now
                if watch.first_open_s is None:
                    watch.first_open_s = now
            due = delay is not None and watch.first_open_s is not None
            if due and state.writing and now - watch.first_open_s >= delay:  # type: ignore[operator]
                os.killpg(process.pid, signal.SIGKILL)
                killed = True
                watch.open_at_kill = True
                watch.committed_at_kill = state.committed
                break
            if now > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                break
        process.wait()
        seconds = time.perf_counter() - started
        leftovers = wait_group_gone(process.pid) if killed else 0
        if killed:
            watch.committed_after_kill = _committed_once_ended(probe, watch)
        stderr.seek(0)
        timed_out = not killed and process.returncode < 0
        run = CliRun(process.returncode, b"", stderr.read(), seconds, killed, timed_out, leftovers)
        return run, watch


def _committed_once_ended(probe: WriteProbe, watch: WriteWatch) -> int:
    """Items committed once the killed writer's transaction has ended (the server ends it
    when it sees the client gone: at once when idle, after its statement when active)."""
    state = probe.look()
    for _ in range(5000):  # of 2 ms: a bound, not a timing
        if not state.writing:
            break
        time.sleep(0.002)
        state = probe.look()
    return state.committed


def run_family(
    family: KillFamily, trials: int, work: Path, seed: int, timeout: float
) -> dict[str, Any]:
    """Measure the command once on trial 0 (run to completion), then ``trials`` killed runs."""
    rng = random.Random(seed)
    duration = command_duration(family, work, timeout)
    when = "s" if family.probe is None else "s after the first write was seen open"
    span = "to completion" if family.probe is None else "of writes open"
    log(f"  {family.name}: {duration:.2f} s {span}; {trials} kills within that")
    results = []
    for trial in range(1, trials + 1):
        delay = rng.uniform(0, duration)
        result = _trial(family, trial, work, delay, timeout)
        results.append(result)
        state = "ok" if result["ok"] else "; ".join(result["after_kill"] + result["after_rerun"])
        inside = ", inside an open write transaction" if result["in_transaction"] else ""
        log(f"    trial {trial}/{trials}: kill at {delay:.2f} {when}{inside} — {state}")
    return summarize(family.name, duration, results)


def summarize(name: str, duration: float, results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if r["ok"]]
    return {
        "command": name,
        "duration_s": round(duration, 2),
        "trials": len(results),
        "killed_before_end": sum(r["killed"] for r in results),
        "killed_in_transaction": sum(r["in_transaction"] for r in results),
        "reopened": sum(r["reopened"] for r in results),
        "consistent_after_kill": sum(not r["after_kill"] for r in results),
        "complete_after_rerun": sum(not r["after_rerun"] for r in results),
        "ok": len(ok),
        "failed_trials": examples([r for r in results if not r["ok"]]),
        "trial_results": results,
    }


# -- the four commands ---------------------------------------------------------------------------


def add_family(corpus: Corpus) -> KillFamily:
    """``add`` of the whole corpus into an empty data folder."""
    expected = {str(path): planted for path, planted in corpus.tokens().items()}

    def prepare(trial: int, data_dir: Path) -> list[str]:
        return ["--data-dir", str(data_dir), "add", str(corpus.root)]

    return KillFamily("add", prepare, lambda: expected)


def database_add_family(corpus: Corpus, server: Any) -> KillFamily:
    """``add`` of the whole corpus into a new empty database of ``server`` per trial (see
    benchmarks/pg_server.py)."""
    expected = {str(path): planted for path, planted in corpus.tokens().items()}
    urls: dict[int, str] = {}

    def prepare(trial: int, data_dir: Path) -> list[str]:
        urls[trial] = server.new_database()
        return ["--backend", urls[trial], "add", str(corpus.root)]

    return KillFamily("add", prepare, lambda: expected, target=lambda trial, _: urls[trial],
                      probe=lambda trial: WriteProbe(urls[trial]))  # fmt: skip


def edit_family(corpus: Corpus, base: Path) -> KillFamily:
    """``add`` again after every third file was edited (its token replaced), on a copy of a
    complete base."""
    edited = corpus.paths[::3]
    current = {str(path): planted for path, planted in corpus.tokens().items()}

    def prepare(trial: int, data_dir: Path) -> list[str]:
        shutil.copytree(base, data_dir)
        for path, planted in edit_files(edited, trial).items():
            current[str(path)] = planted
        return ["--data-dir", str(data_dir), "add", str(corpus.root)]

    return KillFamily("re-add of edited files", prepare, lambda: dict(current))


def remove_family(corpus: Corpus, base: Path) -> KillFamily:
    """``remove`` of the collected folder (every item), on a copy of a complete base."""

    def prepare(trial: int, data_dir: Path) -> list[str]:
        shutil.copytree(base, data_dir)
        return ["--data-dir", str(data_dir), "remove", str(corpus.root)]

    return KillFamily("remove", prepare, dict, rerun_may_exit_1=True)


def rebuild_family(corpus: Corpus, base: Path) -> KillFamily:
    """``rebuild`` of both indexes, on a copy of a complete base."""
    expected = {str(path): planted for path, planted in corpus.tokens().items()}

    def prepare(trial: int, data_dir: Path) -> list[str]:
        shutil.copytree(base, data_dir)
        return ["--data-dir", str(data_dir), "rebuild"]

    return KillFamily("rebuild", prepare, lambda: expected)


class KillWorkspace:
    """The corpus and the complete base the kill scenarios share, built on first use.

    The edit scenario rewrites files of the corpus, so it runs after the others."""

    def __init__(self, root: Path, files: int, seed: int, timeout: float) -> None:
        self.root = root
        self.files = files
        self.seed = seed
        self.timeout = timeout
        self._corpus: Corpus | None = None
        self._base: Path | None = None

    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            self._corpus = write_corpus(self.root / "files", self.files, self.seed)
            log(
                f"  corpus: {len(self._corpus.paths):,} files, "
                f"{self._corpus.total_bytes / 1e6:.1f} MB"
            )
        return self._corpus

    @property
    def base(self) -> Path:
        """A data folder holding the whole corpus, added to completion."""
        if self._base is None:
            base = self.root / "base"
            run = run_cli(
                ["--data-dir", str(base), "add", str(self.corpus.root)],
                timeout=self.timeout,
                workdir=self.root,
            )
            if run.returncode != 0:
                raise RuntimeError(f"building the base failed: {run.stderr_tail()}")
            self._base = base
        return self._base

    def family(self, name: str) -> KillFamily:
        if name == "add":
            return add_family(self.corpus)
        makers = {"edit": edit_family, "remove": remove_family, "rebuild": rebuild_family}
        return makers[name](self.corpus, self.base)
