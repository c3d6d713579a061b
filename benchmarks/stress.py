"""Stress and robustness of a data folder: kill -9 and Ctrl-C, concurrent processes, planted
pickles, hostile queries and bad files. Prints each figure beside its goal; exits 1 when a goal
is not met.

    python benchmarks/stress.py --quick                  # short versions, about 9 minutes
    python benchmarks/stress.py                          # the full runs, about 50 minutes
    python benchmarks/stress.py --only kill_add,pickles --json stress.json
    python benchmarks/stress.py --only one_writer --seconds 30
    python benchmarks/stress.py --quick --only ctrl_c

Scenarios (``--only`` takes these names):

kill_add       ``knowledge-agent add`` of generated files (1,500; 300 with --quick), SIGKILL to
               its process group at a random moment, 50 trials (3): the folder must reopen,
               ``check()`` consistent, every SQLite item found by its token in both indexes,
               and a re-run must leave every file as exactly one item.
kill_remove    the same for ``remove`` of the collected folder, 10 trials (2);
kill_rebuild   ``rebuild``, 10 trials (2);
kill_edit      ``add`` again after every third file was edited, 10 trials (2).
ctrl_c         Ctrl-C (SIGINT to the process group) at a random moment of ``add`` of the same
               number of generated files, and of ``sync`` after edits and new files, 10
               trials each (3): the time from the signal to the exit (goal: under 5 s),
               exit 130 with one line naming the files committed (after the command printed
               its result: 0, 130 or death by SIGINT, nothing else on stderr), exactly those
               files stored, every item findable, and a re-run finishing the job.
one_writer     1 writer + 4 readers (2 reopen the base per query), 60 s (15): failed reads,
               failed writes, hits to items missing from SQLite.
two_writers    2 writers + 2 readers, 60 s (15): every committed write in SQLite and both
               indexes afterwards, no write raising after it committed.
pickles        every file under index/ replaced by (or spliced with) a pickle that touches a
               marker, then ``knowledge-agent search`` and ``KnowledgeAgentCore.search``:
               executions, and whether the base still answers.
queries        10,000 generated query strings (1,000) through the API in every mode and level,
               200 (20) through ``knowledge-agent search``: exceptions, failed commands.
red_team       attacks on the trust boundary (benchmarks/stress_redteam.py): an agent's tool
               arguments, ``serve --http`` off loopback, a cloned repository's project file,
               links leaving a folder, a hostile site on loopback ports, hostile patterns and
               damaged index files. Per surface, cases held; the worst time and peak memory of
               the bounded cases (slow pages, 1M-URL sitemaps, gzip bombs, ReDoS, 50K globs).
bad_files      seven bad files (a name with byte 0xff, HTML nested 10,000 deep, 20 MB HTML
               (5 MB), UTF-16 and UTF-32 without BOM, a broken PDF, EBCDIC text), each beside
               10 good files: good files indexed, bad ones reported or indexed intact.

With ``--backend postgresql`` (an embedded server started here, or the server of
``--backend-url``, whose user may create databases), the scenarios run on databases instead:

kill_add       ``knowledge-agent --backend URL add`` of generated files (100), SIGKILL inside
               an open write transaction (seen by the server: a session holding a write lock
               on the items, at a moment drawn within the time writes stay open), 20 trials,
               a new database each: the checks of the data folder's kill_add, and the tables
               whole (every item with its chunks, every chunk and item with its keyword
               document, every document with its postings).
writers        4 writers + 8 readers (4 reopen per query) on one database for 60 s: failed
               reads, committed writes missing afterwards (lost writes), hits to missing items.

Everything runs on generated files in a temporary folder (``--workdir`` keeps it); the
package runs in real processes (the ``knowledge-agent`` script, spawned children) and every
check of a data folder runs in a child process with a time limit. The table goes to stdout,
progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.stress_checks import log
from benchmarks.stress_concurrency import run_concurrency
from benchmarks.stress_inputs import run_bad_inputs
from benchmarks.stress_interrupt import STOP_GOAL_S, run_interrupts
from benchmarks.stress_kill import KillWorkspace, database_add_family, run_family
from benchmarks.stress_payloads import run_payloads
from benchmarks.stress_queries import run_queries
from benchmarks.stress_redteam import run_red_team

# In the order they run: kill_edit rewrites files the other kill scenarios share.
SCENARIOS = (
    "kill_add",
    "kill_remove",
    "kill_rebuild",
    "kill_edit",
    "ctrl_c",
    "one_writer",
    "two_writers",
    "pickles",
    "queries",
    "bad_files",
    "red_team",
)
KILL_FAMILIES = {
    "kill_add": "add",
    "kill_remove": "remove",
    "kill_rebuild": "rebuild",
    "kill_edit": "edit",
}
POSTGRES_SCENARIOS = ("kill_add", "writers")
_PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Settings:
    """Sizes of one run: the full ones, or the short ``--quick`` ones."""

    files: int
    add_trials: int
    other_trials: int
    interrupt_trials: int
    seconds: float
    concurrency_files: int
    api_queries: int
    cli_queries: int
    huge_queries: int
    query_budget_s: float
    html_megabytes: int
    payload_files: str  # "all", or "one per role"

    @classmethod
    def of(cls, args: argparse.Namespace) -> Settings:
        if args.backend == "postgresql":  # fewer files: a kill trial adds them twice
            settings = cls(100, 20, 20, 0, 60, 300, 0, 0, 0, 0, 0, "")
        elif args.quick:
            settings = cls(300, 3, 2, 3, 15, 150, 1_000, 20, 2, 300, 5, "one per role")
        else:
            settings = cls(1_500, 50, 10, 10, 60, 300, 10_000, 200, 10, 1_800, 20, "all")
        overrides: dict[str, Any] = {}
        if args.trials is not None:
            overrides.update(
                add_trials=args.trials, other_trials=args.trials, interrupt_trials=args.trials
            )
        if args.seconds is not None:
            overrides["seconds"] = args.seconds
        if args.files is not None:
            overrides["files"] = args.files
        return cls(**{**asdict(settings), **overrides})


@dataclass
class Row:
    """One line of the table. ``met`` is None for a figure without a goal."""

    scenario: str
    figure: str
    goal: str = ""
    met: bool | None = None


@dataclass
class Outcome:
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _count_row(scenario: str, label: str, value: int, total: int) -> Row:
    return Row(scenario, f"{label}: {value}/{total}", f"{total}/{total}", value == total)


def _zero_row(scenario: str, label: str, value: int | None) -> Row:
    shown = "no answer" if value is None else str(value)
    return Row(scenario, f"{label}: {shown}", "0", value == 0)


def _info_row(scenario: str, label: str, value: Any) -> Row:
    return Row(scenario, f"{label}: {value}")


# -- the scenarios -------------------------------------------------------------------------------


def kill_scenario(
    name: str, kill: KillWorkspace, settings: Settings, seed: int, server: Any = None
) -> Outcome:
    trials = settings.add_trials if name == "kill_add" else settings.other_trials
    if server is not None:
        family = database_add_family(kill.corpus, server)
    else:
        family = kill.family(KILL_FAMILIES[name])
    figures = run_family(family, trials, kill.root / name, seed, timeout=900)
    rows = [
        _count_row(name, "trials with every check passed", figures["ok"], trials),
        _count_row(name, "reopened after the kill", figures["reopened"], trials),
        _count_row(
            name,
            "consistent + every item findable after the kill",
            figures["consistent_after_kill"],
            trials,
        ),
        _count_row(name, "complete after a re-run", figures["complete_after_rerun"], trials),
        _info_row(name, "killed before it finished", f"{figures['killed_before_end']}/{trials}"),
        _info_row(name, "command duration, s", figures["duration_s"])
        if server is None
        else _info_row(
            name, "seconds its writes stay open (run to completion)", figures["duration_s"]
        ),
    ]
    if server is not None:  # each kill came while the server saw a write transaction open
        stored = [r["items_after_kill"] or 0 for r in figures["trial_results"]]
        rows.append(_info_row(name, "items stored after the kill, min / max", f"{min(stored)} / "
                              f"{max(stored)} of {settings.files}"))  # fmt: skip
        rows.append(_info_row(name, "kills inside an open write transaction (rolled back)",
                              f"{figures['killed_in_transaction']}/{trials}"))  # fmt: skip
    if name == "kill_add":
        partial = sum(
            1
            for r in figures["trial_results"]
            if r["items_after_kill"] and r["items_after_kill"] < settings.files
        )
        rows.append(_info_row(name, "kills that left some but not all files stored", partial))
    return Outcome(rows, figures)


def interrupt_scenario(work: Path, settings: Settings, seed: int) -> Outcome:
    name = "ctrl_c"
    figures = run_interrupts(work / name, settings.files, settings.interrupt_trials, seed)
    rows = []
    for family, data in figures["families"].items():
        trials = data["trials"]
        stopped = data["stop_ms_max"] is not None
        stops = f"{data['stop_ms_p50']} / {data['stop_ms_max']}" if stopped else "none stopped"
        rows += [
            _count_row(name, f"{family}: trials with every check passed", data["ok"], trials),
            Row(
                name,
                f"{family}: stop time after Ctrl-C p50 / max, ms: {stops}",
                f"max < {STOP_GOAL_S * 1000:g}",
                stopped and data["stop_ms_max"] < STOP_GOAL_S * 1000,
            ),
            _count_row(
                name,
                f"{family}: exit 130 (after its result: 0, 130 or by SIGINT)",
                data["exit_ok"],
                trials,
            ),
            _count_row(name, f"{family}: one line on stderr", data["one_line"], trials),
            _count_row(
                name,
                f"{family}: committed files stored, consistent, every item findable",
                data["consistent_after_interrupt"],
                trials,
            ),
            _count_row(
                name, f"{family}: complete after a re-run", data["complete_after_rerun"], trials
            ),
            _info_row(
                name,
                f"{family}: stopped by the Ctrl-C / had printed its result",
                f"{data['stopped_by_ctrl_c']} / {data['finished_first']}",
            ),
            _info_row(name, f"{family}: files reported committed", data["committed"]),
            _info_row(name, f"{family}: command duration, s", data["duration_s"]),
        ]
    probe = figures["startup_probe"]
    rows.append(
        _info_row(
            name,
            f"Ctrl-C at {probe['delay_s']} s, during start-up",
            f"exit {probe['exit']}, {probe['stderr_lines']} stderr lines"
            f"{' (a traceback)' if probe['traceback'] else ''}",
        )
    )
    return Outcome(rows, figures)


def concurrency_scenario(name: str, work: Path, settings: Settings, seed: int) -> Outcome:
    one = name == "one_writer"
    figures = run_concurrency(
        work / name,
        writers=1 if one else 2,
        readers_reopen=2 if one else 1,
        readers_keep=2 if one else 1,
        seconds=settings.seconds,
        files=settings.concurrency_files,
        seed=seed,
    )
    counts = (
        f"{figures['writes']} writes, {figures['reads']} reads "
        f"({figures['reads_reopening']} reopening)"
    )
    if one:
        rows = [
            _zero_row(name, "failed reads", figures["failed_reads"]),
            _zero_row(name, "failed writes", figures["failed_writes"]),
            _zero_row(name, "hits to items missing from SQLite", figures["hits_to_missing_items"]),
            _zero_row(
                name,
                "never-changed files missed by keyword/hybrid reads",
                figures["base_items_missed"],
            ),
            _info_row(name, "committed writes missing afterwards", figures["committed_missing"]),
            _info_row(name, "writes raised after commit", figures["raised_after_commit"]),
        ]
    else:
        rows = [
            _zero_row(
                name,
                "committed writes missing from SQLite or an index afterwards",
                figures["committed_missing"],
            ),
            _zero_row(name, "writes raised after commit", figures["raised_after_commit"]),
            _info_row(name, "failed writes", figures["failed_writes"]),
            _info_row(name, "failed reads", figures["failed_reads"]),
            _info_row(name, "hits to items missing from SQLite", figures["hits_to_missing_items"]),
        ]
    rows.append(_info_row(name, "operations", counts))
    rows.append(
        _info_row(
            name,
            "write latency p50 / max, s",
            f"{figures['write_seconds_p50']} / {figures['write_seconds_max']}",
        )
    )
    return Outcome(rows, figures)


def writers_scenario(work: Path, settings: Settings, seed: int, server: Any) -> Outcome:
    """4 writers + 8 readers on one database of ``server``."""
    name = "writers"
    url = server.new_database()
    figures = run_concurrency(work / name, writers=4, readers_reopen=4, readers_keep=4,
                              seconds=settings.seconds, files=settings.concurrency_files,
                              seed=seed, target=url)  # fmt: skip
    after = figures["after"]
    rows = [
        _zero_row(name, "failed reads", figures["failed_reads"]),
        _zero_row(name, "writes returned but missing afterwards (lost)",
                  figures["committed_missing"]),
        Row(name, f"consistent afterwards, tables whole: {after.get('consistent')}", "True",
            after.get("consistent") is True),
        _zero_row(name, "hits to items missing from the database",
                  figures["hits_to_missing_items"]),
        _zero_row(name, "never-changed files missed by keyword/hybrid reads",
                  figures["base_items_missed"]),
        _info_row(name, "failed writes", figures["failed_writes"]),
        _info_row(name, "writes raised after commit", figures["raised_after_commit"]),
        _info_row(name, "operations", f"{figures['writes']} writes "
                  f"({_by_op(figures['writes_by_op'])}), {figures['reads']} reads "
                  f"({figures['reads_reopening']} reopening)"),
        _info_row(name, "write latency p50 / max, s",
                  f"{figures['write_seconds_p50']} / {figures['write_seconds_max']}"),
    ]  # fmt: skip
    return Outcome(rows, figures)


def _by_op(counts: dict[str, int]) -> str:
    """``{"add_text": 28, "open": 0}`` as ``28 add_text``: the kinds that ran."""
    return ", ".join(f"{count} {op}" for op, count in counts.items() if count)


def pickles_scenario(work: Path, settings: Settings, seed: int) -> Outcome:
    figures = run_payloads(work / "pickles", seed, one_per_role=settings.payload_files != "all")
    cases = figures["cases"]
    rows = [
        _zero_row(
            "pickles", f"payload executions in {cases} cases × (CLI, API)", figures["executions"]
        ),
        _count_row(
            "pickles",
            "cases where the base still answered (CLI and API)",
            figures["cases_answered"],
            cases,
        ),
    ]
    return Outcome(rows, figures)


def queries_scenario(work: Path, settings: Settings, seed: int) -> Outcome:
    figures = run_queries(
        work / "queries",
        settings.api_queries,
        settings.cli_queries,
        seed,
        settings.huge_queries,
        settings.query_budget_s,
    )
    api, cli = figures["api"], figures["cli"]
    done = api["done"] if api["done"] is not None else f"? ({api['child']})"
    rows = [
        Row(
            "queries",
            f"API exceptions: {api['exceptions']} in {done}/{api['planned']} queries",
            f"0 in {api['planned']}",
            api["exceptions"] == 0 and api["done"] == api["planned"],
        ),
        Row(
            "queries",
            f"CLI failed runs: {cli['failures']} in {cli['done']}/{cli['planned']}",
            f"0 in {cli['planned']}",
            cli["failures"] == 0 and cli["done"] == cli["planned"],
        ),
    ]
    return Outcome(rows, figures)


def bad_files_scenario(work: Path, settings: Settings, seed: int) -> Outcome:
    figures = run_bad_inputs(work / "bad_files", seed, settings.html_megabytes)
    reported = sum(1 for case in figures["cases"] if case["reported"])
    rows = [
        _count_row(
            "bad_files", "good files indexed", figures["good_indexed"], figures["good_files"]
        ),
        _count_row(
            "bad_files",
            "bad files reported with path and reason, or indexed intact",
            figures["bad_handled"],
            figures["bad_files"],
        ),
        _info_row("bad_files", "bad files reported", f"{reported}/{figures['bad_files']}"),
    ]
    return Outcome(rows, figures)


def red_team_scenario(work: Path) -> Outcome:
    figures = run_red_team(work / "red_team")
    cases = figures["cases"]
    rows = []
    for surface in dict.fromkeys(case["surface"] for case in cases):
        mine = [case for case in cases if case["surface"] == surface]
        held = sum(case["held"] for case in mine)
        rows.append(_count_row("red_team", f"{surface}: cases held", held, len(mine)))
    for kind in dict.fromkeys(case["bounded"] for case in cases if case["bounded"]):
        mine = [case for case in cases if case["bounded"] == kind]
        timed = [case for case in mine if case["seconds"] is not None]
        worst = max(timed, key=lambda case: case["seconds"] / (case["bound_s"] or 1e9))
        figure = f"{kind}: worst {worst['seconds']} s"
        goal, met = "", None
        if worst["bound_s"] is not None:
            goal, met = (
                f"≤ {worst['bound_s']:g} s",
                all(case["seconds"] <= case["bound_s"] for case in timed if case["bound_s"]),
            )
        peaks = [case["peak_mb"] for case in mine if case["peak_mb"] is not None]
        if peaks:
            figure += f", peak RSS {max(peaks)} MB"
        limits = [case["memory_goal_mb"] for case in mine if case["memory_goal_mb"]]
        if limits:
            goal = " and ".join(filter(None, [goal, f"≤ {min(limits):g} MB"]))
            met = (met is not False) and max(peaks) <= min(limits)
        rows.append(Row("red_team", figure, goal, met))
    return Outcome(rows, figures)


# -- the run -------------------------------------------------------------------------------------


def run_scenario(
    name: str, work: Path, kill: KillWorkspace, settings: Settings, seed: int, server: Any = None
) -> Outcome:
    """One scenario (on databases of ``server`` when given); a harness error becomes a failed
    row with its traceback in the details."""
    started = time.perf_counter()
    log(f"{name}")
    runners: dict[str, Callable[[], Outcome]] = {
        "pickles": lambda: pickles_scenario(work, settings, seed),
        "queries": lambda: queries_scenario(work, settings, seed),
        "bad_files": lambda: bad_files_scenario(work, settings, seed),
        "red_team": lambda: red_team_scenario(work),
        "ctrl_c": lambda: interrupt_scenario(work, settings, seed),
        "one_writer": lambda: concurrency_scenario(name, work, settings, seed),
        "two_writers": lambda: concurrency_scenario(name, work, settings, seed),
        "writers": lambda: writers_scenario(work, settings, seed, server),
    }
    try:
        if name in KILL_FAMILIES:
            outcome = kill_scenario(name, kill, settings, seed, server)
        else:
            outcome = runners[name]()
    except Exception as exc:
        outcome = Outcome(
            [Row(name, f"the scenario could not run: {type(exc).__name__}: {exc}", "runs", False)],
            {"error": traceback.format_exc()},
        )
    outcome.seconds = round(time.perf_counter() - started, 1)
    for row in outcome.rows:
        if row.met is not None:
            log(f"  {'met' if row.met else 'NOT MET'}: {row.figure} (goal {row.goal})")
    return outcome


def render(rows: list[Row]) -> str:
    """A Markdown table: scenario | figure | goal | met?"""
    lines = ["| scenario | figure | goal | met? |", "|---|---|---|---|"]
    for row in rows:
        met = "" if row.met is None else ("yes" if row.met else "**NO**")
        lines.append(f"| {row.scenario} | {row.figure} | {row.goal} | {met} |")
    return "\n".join(lines)


def summary_lines(name: str, details: dict[str, Any]) -> list[str]:
    """A few lines a reader needs to act on a scenario's figures."""
    if "error" in details:
        return [details["error"].strip().splitlines()[-1]]
    lines: list[str] = []
    if name in KILL_FAMILIES:
        for trial in details["failed_trials"][:5]:
            problems = "; ".join(trial["after_kill"] + trial["after_rerun"])
            lines.append(f"trial {trial['trial']} (kill at {trial['delay_s']} s): {problems}")
    elif name == "ctrl_c":
        for family, data in details["families"].items():
            for trial in data["failed_trials"][:5]:
                problems = "; ".join(trial["after_interrupt"] + trial["after_rerun"])
                lines.append(
                    f"{family} trial {trial['trial']} (Ctrl-C at {trial['delay_s']} s): {problems}"
                )
        probe = details["startup_probe"]
        lines.append(
            f"Ctrl-C during start-up (knowledge-agent --version takes {details['startup_s']} s):"
            f" exit {probe['exit']}, last stderr line {probe['last_line']!r}"
        )
    elif name in ("one_writer", "two_writers", "writers"):
        for key in ("failed_write_kinds", "failed_read_kinds"):
            if details[key]:
                lines.append(f"{key.replace('_', ' ')}: {details[key]}")
        for key in ("failed_write_examples", "failed_read_examples"):
            for example in details[key][:2]:
                lines.append(f"{key[:-9].replace('_', ' ')}: {example.get('error')}")
        for example in details["hits_to_missing_examples"][:3]:
            lines.append(f"hit to a missing item: {example}")
        after = details["after"]
        for key in ("missing_sqlite", "missing_index", "raised_after_commit"):
            if isinstance(after.get(key), dict):
                for example in after[key]["examples"][:3]:
                    lines.append(f"{key.replace('_', ' ')}: {example}")
    elif name == "pickles":
        for case in details["cases_executed"]:
            ways = [w for w in ("cli", "api") if case.get(f"{w}_executed")]
            lines.append(f"executed via {'+'.join(ways)}: {case['file']} ({case['tampering']})")
        for case in details["cases_unanswered"][:5]:
            lines.append(
                f"no answer after: {case['file']} ({case['tampering']}): "
                f"{case.get('cli')} {case.get('api')}"
            )
    elif name == "queries":
        for example in details["api"]["exception_examples"][:5]:
            lines.append(
                f"API {example['mode']}/{example['level']} {example['query']!r}: {example['error']}"
            )
        for example in details["cli"]["failure_examples"][:5]:
            lines.append(f"CLI {example['query']!r} → exit {example['exit']}: {example['stderr']}")
        for slow in details["api"]["slowest"][:2]:
            lines.append(f"slowest: {slow['seconds']} s ({slow['kind']})")
    elif name == "red_team":
        for case in details["cases"]:
            if not case["held"]:
                lines.append(f"NOT HELD {case['surface']}: {case['name']}: {case['detail']}")
    elif name == "bad_files":
        for case in details["cases"]:
            lines.append(
                f"{case['kind']} ({case['bad_bytes'] / 1e6:.1f} MB): {case['goods_indexed']}/10"
                f" good; {case['verdict']}{'; ' + case['stderr'] if case.get('stderr') else ''}"
            )
    return lines


def provenance() -> dict[str, Any]:
    """The machine, and the code measured: its commit and whether the package had
    uncommitted changes (the working tree is shared)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=_PROJECT_ROOT,
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
            return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "commit": git("rev-parse", "HEAD"),
        "package_files_modified": git(
            "status", "--porcelain", "--", "knowledge_agent"
        ).splitlines(),
    }


def main(argv: list[str] | None = None) -> int:
    intro, _, rest = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(
        description=" ".join(intro.split()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=rest,
    )
    parser.add_argument("--only", default=None, help="comma-separated scenario names")
    parser.add_argument("--quick", action="store_true", help="short versions (about 9 minutes)")
    parser.add_argument(
        "--trials", type=int, default=None, help="trials of every kill and Ctrl-C scenario"
    )
    parser.add_argument(
        "--seconds", type=float, default=None, help="duration of each concurrency scenario"
    )
    parser.add_argument("--files", type=int, default=None, help="files of the kill corpus")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write figures and details here")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="keep the generated files and data folders here (must be new)",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "postgresql"),
        default="local",
        help="postgresql: kill_add and writers on PostgreSQL databases",
    )
    parser.add_argument(
        "--backend-url",
        default=None,
        help="with --backend postgresql: a server whose user may create databases "
        "(default: an embedded server started for the run)",
    )
    args = parser.parse_args(argv)
    if args.backend_url and args.backend != "postgresql":
        parser.error("--backend-url needs --backend postgresql")
    names = POSTGRES_SCENARIOS if args.backend == "postgresql" else SCENARIOS
    chosen = list(names) if args.only is None else [n.strip() for n in args.only.split(",")]
    unknown = [name for name in chosen if name not in names]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {', '.join(names)}")
    chosen = [name for name in names if name in chosen]
    if args.trials is not None and args.trials < 1:
        parser.error("--trials must be at least 1")
    settings = Settings.of(args)
    started = time.perf_counter()
    meta = provenance()
    if args.workdir is not None:
        if args.workdir.exists() and any(args.workdir.iterdir()):
            parser.error(f"--workdir {args.workdir} is not empty")
        args.workdir.mkdir(parents=True, exist_ok=True)
        holder = None
        work = args.workdir.resolve()
    else:
        holder = tempfile.TemporaryDirectory(prefix="ka-stress-")
        work = Path(holder.name).resolve()
    server = None
    try:
        if args.backend == "postgresql":
            from benchmarks.pg_server import server_for

            server = server_for(args.backend_url)
        kill = KillWorkspace(work / "kill", settings.files, args.seed, timeout=900)
        outcomes = {
            name: run_scenario(name, work, kill, settings, args.seed, server) for name in chosen
        }
    finally:
        if server is not None:
            server.stop()
        if holder is not None:
            holder.cleanup()
    rows = [row for outcome in outcomes.values() for row in outcome.rows]
    print(render(rows))
    for name, outcome in outcomes.items():
        lines = summary_lines(name, outcome.details)
        print(f"\n{name} ({outcome.seconds} s)" + (":" if lines else ""))
        for line in lines:
            print(f"  - {line}")
    failed = [row for row in rows if row.met is False]
    total = round(time.perf_counter() - started, 1)
    print(
        f"\n{len(failed)} of {sum(r.met is not None for r in rows)} goals not met; {total} s"
        f"{' (--quick)' if args.quick else ''}."
    )
    if args.json:
        report = {
            "settings": asdict(settings),
            "quick": args.quick,
            "backend": args.backend,
            "scenarios": chosen,
            "seconds": total,
            "provenance": meta,
            "rows": [asdict(row) for row in rows],
            "details": {name: {"seconds": o.seconds, **o.details} for name, o in outcomes.items()},
        }
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
