"""kill -9 at random moments of ``knowledge-agent add``, of a re-add of edited files, of
``remove`` and of ``rebuild``; after each kill the data folder must reopen consistent with every
stored item findable, and re-running the command must finish the job.

A trial: a fresh data folder (empty for ``add``, a copy of a complete base for the others), the
command started in its own process group, SIGKILL to the group after a delay drawn uniformly
from the command's measured duration, then :func:`~benchmarks.stress_checks.verify` in a child
process; then the same command again to completion and a second verification against what
the folder must hold now.
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
    # Items a trial's target holds now, read while its command runs: with it, each kill
    # comes when a number of items drawn between 1 and all but one are stored (mid-write,
    # whatever the machine's load), not after a drawn delay.
    stored: Callable[[int, Path], int] | None = None


def _trial(
    family: KillFamily, trial: int, work: Path, delay: float, timeout: float
) -> dict[str, Any]:
    """A trial killed after ``delay`` seconds, or, for a family with ``stored``, once
    ``delay`` items are stored."""
    data_dir = work / f"trial{trial:03d}"
    args = family.prepare(trial, data_dir)
    target = family.target(trial, data_dir)
    if family.stored is None:
        killed = run_cli(args, timeout=timeout, kill_after=delay, workdir=work)
    else:
        killed = run_until_stored(args, lambda: family.stored(trial, data_dir), int(delay),
                                  timeout, work)  # fmt: skip
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
        "semantic_below_top": after_kill.value["semantic_below_top"] if after_kill.ok else None,
        "ok": not kill_problems and not rerun_problems,
    }


def command_duration(family: KillFamily, work: Path, timeout: float) -> float:
    """Seconds the family's command takes run to completion once (trial 0), from which the
    moments of the kills or signals of its trials are drawn."""
    work.mkdir(parents=True, exist_ok=True)
    timing_dir = work / "timing"
    timing: CliRun = run_cli(family.prepare(0, timing_dir), timeout=timeout, workdir=work)
    if timing.returncode != 0:
        log(f"  {family.name}: the timing run failed: {timing.stderr_tail()}")
    shutil.rmtree(timing_dir, ignore_errors=True)
    return timing.seconds


def run_until_stored(
    args: list[str], stored: Callable[[], int], count: int, timeout: float, work: Path
) -> CliRun:
    """Run ``knowledge-agent ARGS`` in a session of its own and SIGKILL its group as soon as
    ``stored()`` (read every 2 ms) reaches ``count``; killed after ``timeout`` all the same."""
    with open(work / ".stress-stderr", "w+b") as stderr:
        started = time.perf_counter()
        process = start_cli(args, subprocess.DEVNULL, stderr)  # type: ignore[arg-type]
        killed = False
        while process.poll() is None:
            over = time.perf_counter() - started > timeout
            if over or stored() >= count:
                os.killpg(process.pid, signal.SIGKILL)
                killed = not over
                break
            time.sleep(0.002)
        process.wait()
        seconds = time.perf_counter() - started
        leftovers = wait_group_gone(process.pid) if killed else 0
        stderr.seek(0)
        timed_out = not killed and process.returncode < 0
        return CliRun(process.returncode, b"", stderr.read(), seconds, killed, timed_out, leftovers)


def run_family(
    family: KillFamily, trials: int, work: Path, seed: int, timeout: float
) -> dict[str, Any]:
    """Measure the command once on trial 0 (run to completion), then ``trials`` killed runs."""
    rng = random.Random(seed)
    duration = command_duration(family, work, timeout)
    items = len(family.expected())
    when = "s" if family.stored is None else f"of {items} items stored"
    log(f"  {family.name}: {duration:.1f} s to completion; {trials} kills within that")
    results = []
    for trial in range(1, trials + 1):
        if family.stored is None:
            delay = rng.uniform(0, duration)
        else:
            delay = rng.randint(1, max(1, items - 1))
        result = _trial(family, trial, work, delay, timeout)
        results.append(result)
        state = "ok" if result["ok"] else "; ".join(result["after_kill"] + result["after_rerun"])
        log(f"    trial {trial}/{trials}: kill at {delay:.2f} {when} — {state}")
    return summarize(family.name, duration, results)


def summarize(name: str, duration: float, results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if r["ok"]]
    return {
        "command": name,
        "duration_s": round(duration, 2),
        "trials": len(results),
        "killed_before_end": sum(r["killed"] for r in results),
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

    polling: dict[int, Any] = {}  # trial → an open connection (a write lasts milliseconds)

    def stored(trial: int, _: Path) -> int:
        import psycopg

        try:
            if trial not in polling:
                for conn in polling.values():
                    conn.close()
                polling.clear()
                polling[trial] = psycopg.connect(urls[trial], autocommit=True)
            row: Any = polling[trial].execute("SELECT count(*) FROM knowledge_items").fetchone()
            return int(row[0])
        except psycopg.Error:  # the tables are not made yet
            polling.pop(trial, None)
            return 0

    return KillFamily("add", prepare, lambda: expected, target=lambda trial, _: urls[trial],
                      stored=stored)  # fmt: skip


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
