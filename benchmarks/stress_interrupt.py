"""Ctrl-C at random moments of ``knowledge-agent add`` of generated files and of ``sync`` after
edits and new files: how long the command takes to stop, what it says, what the folder holds.

A trial: a fresh data folder (empty for ``add``, a copy of a complete base for ``sync``), the
command started in its own process group with SIGINT at its default, and SIGINT to the group,
as a terminal sends it, after a delay drawn uniformly between the command's start-up (what
``knowledge-agent --version`` takes: the same imports) and its end (measured once, run to
completion). Then the time from the signal to the command's exit, its exit code and stderr,
and :func:`~benchmarks.stress_checks.verify` in a child process: the folder consistent, every
stored item findable, exactly the committed files stored. Then the same command again to
completion and a second verification.

A run stopped by the Ctrl-C exits 130 with one line naming the files it committed. A run that
had printed its result (on stdout) had finished its job: the Ctrl-C may still reach it while it
closes the base or the interpreter shuts down, so it may exit 0, 130 or by the signal, with
nothing on stderr but that line, and the folder must hold every file.

A Ctrl-C during start-up, while the command line is still being imported, must end the same
way (the entry point catches it); one probe at half the start-up time records what it does.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.stress_checks import (
    ChildResult,
    examples,
    log,
    run_child,
    run_cli,
    start_cli,
    verdict_problems,
    verify,
    wait_group_gone,
)
from benchmarks.stress_corpus import Corpus, TextMaker, edit_files, token
from benchmarks.stress_kill import KillFamily, KillWorkspace, add_family, command_duration

VERIFY_TIMEOUT = 600.0
STOP_GOAL_S = 5.0  # the bound the Ctrl-C tests used to assert
STOP_LIMIT_S = 120.0  # a command still running this long after Ctrl-C is killed: "did not stop"
COMMITTED_LINE = re.compile(
    r"interrupted: (\d+) files? committed; run the same command again to finish"
)


@dataclass(frozen=True)
class InterruptFamily:
    """A command and how many files it has to commit (``changed``): after a Ctrl-C, exactly
    the number it reports committed are stored in their current version."""

    family: KillFamily
    changed: int


@dataclass
class Interrupted:
    """One Ctrl-C'd run. ``finished``: it printed its result. ``stop_seconds`` is from SIGINT
    to the command's exit (None when it exited before the signal); ``stopped`` is False when
    it was still running :data:`STOP_LIMIT_S` after it and had to be killed."""

    returncode: int
    stderr: str
    stop_seconds: float | None
    finished: bool = False
    stopped: bool = True
    leftovers: int = 0  # processes of its group alive after it exited (should be 0)


def run_interrupted(
    args: Sequence[str], *, delay: float, timeout: float, workdir: Path
) -> Interrupted:
    """``knowledge-agent ARGS`` in a session of its own, SIGINT to its process group after
    ``delay`` seconds (if still running), then wait for it to exit."""
    with (
        open(workdir / ".stress-stdout", "w+b") as stdout,
        open(workdir / ".stress-stderr", "w+b") as stderr,
    ):
        process = start_cli(args, stdout, stderr)
        stop_seconds: float | None = None
        stopped = True
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            signalled = time.perf_counter()
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=min(STOP_LIMIT_S, timeout))
            except subprocess.TimeoutExpired:
                stopped = False
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            stop_seconds = time.perf_counter() - signalled
        leftovers = wait_group_gone(process.pid)
        if leftovers:
            os.killpg(process.pid, signal.SIGKILL)
        stderr.seek(0)
        text = stderr.read().decode("utf-8", "replace")
        finished = stdout.seek(0, os.SEEK_END) > 0
    return Interrupted(process.returncode, text, stop_seconds, finished, stopped, leftovers)


def committed_count(stderr: str) -> int | None:
    """The files an interrupted collection reports committed, if its stderr is exactly the
    one line saying so; else None."""
    lines = stderr.strip().splitlines()
    if len(lines) != 1:
        return None
    match = COMMITTED_LINE.fullmatch(lines[0])
    return int(match.group(1)) if match else None


def said_one_line(run: Interrupted) -> bool:
    """stderr is the one line naming the files committed, or empty after a finished job."""
    if committed_count(run.stderr) is not None:
        return True
    return run.finished and not run.stderr.strip()


def exit_ok(run: Interrupted) -> bool:
    """130, or after a finished job also 0 or death by SIGINT (a shell shows 130 for both)."""
    return run.returncode in ((0, 130, -signal.SIGINT) if run.finished else (130,))


def interrupt_problems(run: Interrupted, after: ChildResult, changed: int) -> list[str]:
    """What is wrong with a Ctrl-C'd run and the folder it left, given the :func:`verify`
    answer (with the expected final state) and the number of files the command had to
    commit. A run stopped by the Ctrl-C exits 130 with the one line naming ``n`` files, and
    exactly ``n`` of the ``changed`` files are stored in their current version; a run that
    printed its result exits 0, 130 or by SIGINT with every file stored."""
    problems = verdict_problems(after)
    if not run.stopped:
        problems.append(f"still running {STOP_LIMIT_S:g} s after Ctrl-C")
    if run.leftovers:
        problems.append("processes of its group outlived the command")
    tail = repr(run.stderr.strip()[-200:])
    if "Traceback" in run.stderr:
        problems.append(f"a traceback on stderr: {tail}")
    elif not said_one_line(run):
        problems.append(f"stderr is not the one line: {tail}")
    committed = changed if run.finished else committed_count(run.stderr)
    if not exit_ok(run):
        problems.append(f"exit {run.returncode}")
    if not after.ok or not after.value["opened"]:
        return problems
    data = after.value
    for key in ("duplicates", "unexpected"):
        if data[key]["count"]:
            problems.append(f"{data[key]['count']} {key}")
    pending = data["missing_files"]["count"] + data["stale_files"]["count"]
    if committed is not None and changed - pending != committed:
        problems.append(
            f"{changed - pending} of {changed} files stored in their current version, "
            f"{committed} reported committed"
        )
    return problems


def sync_family(corpus: Corpus, base: Path, new_files: int, seed: int) -> InterruptFamily:
    """``sync`` on a copy of a complete base after every third file was edited (its token
    replaced) and ``new_files`` files were added to the collected folder. The new files are
    written here: build the base, and run ``add`` trials, before calling this."""
    maker = TextMaker(seed + 1)
    folder = corpus.root / "new"
    folder.mkdir(parents=True, exist_ok=True)
    current = {str(path): planted for path, planted in corpus.tokens().items()}
    for n in range(new_files):
        path = folder / f"new{n:05d}.md"
        planted = token(n, "twr")
        path.write_text(maker.document(f"New {n}", planted, maker.size()), encoding="utf-8")
        current[str(path)] = planted
    edited = corpus.paths[::3]

    def prepare(trial: int, data_dir: Path) -> list[str]:
        shutil.copytree(base, data_dir)
        for path, planted in edit_files(edited, trial).items():
            current[str(path)] = planted
        return ["--data-dir", str(data_dir), "sync"]

    family = KillFamily("sync after edits and new files", prepare, lambda: dict(current))
    return InterruptFamily(family, len(edited) + new_files)


def startup_seconds(work: Path, runs: int = 3) -> float:
    """The median time of ``knowledge-agent --version``: the package's imports and click."""
    times = [run_cli(["--version"], timeout=120, workdir=work).seconds for _ in range(runs)]
    return statistics.median(times)


def _trial(
    family: InterruptFamily, trial: int, work: Path, delay: float, timeout: float
) -> dict[str, Any]:
    data_dir = work / f"trial{trial:03d}"
    args = family.family.prepare(trial, data_dir)
    expected = family.family.expected()
    run = run_interrupted(args, delay=delay, timeout=timeout, workdir=work)
    after = run_child(verify, str(data_dir), expected, timeout=VERIFY_TIMEOUT)
    problems = interrupt_problems(run, after, family.changed)
    rerun = run_cli(args, timeout=timeout, workdir=work)
    after_rerun = run_child(verify, str(data_dir), expected, timeout=VERIFY_TIMEOUT)
    rerun_problems = verdict_problems(after_rerun, complete=True)
    if rerun.timed_out or rerun.traceback or rerun.returncode != 0:
        rerun_problems.append(f"re-run failed (exit {rerun.returncode}): {rerun.stderr_tail()}")
    shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "trial": trial,
        "delay_s": round(delay, 3),
        "exit": run.returncode,
        "stop_s": None if run.stop_seconds is None else round(run.stop_seconds, 3),
        "finished": run.finished,
        "committed": committed_count(run.stderr),
        "one_line": said_one_line(run),
        "exit_ok": exit_ok(run),
        "after_interrupt": problems,
        "after_rerun": rerun_problems,
        "ok": not problems and not rerun_problems,
    }


def run_interrupt_family(
    family: InterruptFamily, trials: int, work: Path, seed: int, startup: float, timeout: float
) -> dict[str, Any]:
    """Measure the command once (trial 0, to completion), then ``trials`` Ctrl-C'd runs."""
    rng = random.Random(seed)
    duration = command_duration(family.family, work, timeout)
    log(f"  {family.family.name}: {duration:.1f} s to completion; {trials} Ctrl-Cs within that")
    results = []
    for trial in range(1, trials + 1):
        delay = rng.uniform(min(startup, duration), duration)
        result = _trial(family, trial, work, delay, timeout)
        results.append(result)
        problems = result["after_interrupt"] + result["after_rerun"]
        state = "; ".join(problems) if problems else "ok"
        log(
            f"    trial {trial}/{trials}: Ctrl-C at {delay:.2f} s, exit {result['exit']}"
            f"{' after its result' if result['finished'] else ''}, "
            f"stopped in {result['stop_s']} s — {state}"
        )
    return summarize(family.family.name, duration, results)


def summarize(name: str, duration: float, results: list[dict[str, Any]]) -> dict[str, Any]:
    stops = [r["stop_s"] for r in results if r["stop_s"] is not None]
    return {
        "command": name,
        "duration_s": round(duration, 2),
        "trials": len(results),
        "stopped_by_ctrl_c": sum(not r["finished"] for r in results),
        "finished_first": sum(r["finished"] for r in results),
        "exit_ok": sum(r["exit_ok"] for r in results),
        "stop_ms_p50": round(statistics.median(stops) * 1000) if stops else None,
        "stop_ms_max": round(max(stops) * 1000) if stops else None,
        "committed": sorted(r["committed"] for r in results if r["committed"] is not None),
        "one_line": sum(r["one_line"] for r in results),
        "consistent_after_interrupt": sum(not r["after_interrupt"] for r in results),
        "complete_after_rerun": sum(not r["after_rerun"] for r in results),
        "ok": sum(r["ok"] for r in results),
        "failed_trials": examples([r for r in results if not r["ok"]]),
        "trial_results": results,
    }


def startup_probe(work: Path, startup: float) -> dict[str, Any]:
    """Ctrl-C at half the start-up time of an ``add``: what a user pressing it at once sees."""
    folder = work / "probe-files"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "note.md").write_text(f"# Probe\n\n{token(0)}\n", encoding="utf-8")
    data_dir = work / "probe-data"
    args = ["--data-dir", str(data_dir), "add", str(folder)]
    run = run_interrupted(args, delay=startup / 2, timeout=120, workdir=work)
    lines = run.stderr.strip().splitlines()
    return {
        "delay_s": round(startup / 2, 3),
        "exit": run.returncode,
        "stderr_lines": len(lines),
        "traceback": "Traceback" in run.stderr,
        "last_line": lines[-1] if lines else "",
        "data_folder_created": data_dir.exists(),
    }


def run_interrupts(
    work: Path, files: int, trials: int, seed: int, timeout: float = 900
) -> dict[str, Any]:
    """The start-up probe, then ``add`` and ``sync`` trials on a corpus of ``files`` files."""
    work.mkdir(parents=True, exist_ok=True)
    space = KillWorkspace(work, files, seed, timeout)
    startup = startup_seconds(work)
    log(f"  start-up (knowledge-agent --version): {startup:.2f} s")
    probe = startup_probe(work, startup)
    # The sync family adds files to the corpus: the base and the add trials come first.
    base = space.base
    add = InterruptFamily(add_family(space.corpus), len(space.corpus.paths))
    figures = {"add": run_interrupt_family(add, trials, work / "add", seed, startup, timeout)}
    sync = sync_family(space.corpus, base, max(1, files // 3), seed)
    figures["sync"] = run_interrupt_family(sync, trials, work / "sync", seed, startup, timeout)
    return {"startup_s": round(startup, 3), "startup_probe": probe, "families": figures}
