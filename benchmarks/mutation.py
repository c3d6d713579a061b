"""Mutation score of the core modules: how many planted single bugs the test suite catches.

    python benchmarks/mutation.py                    # every core module, one after another
    python benchmarks/mutation.py --module fusion    # one (repeatable)
    python benchmarks/mutation.py --module engine --sample 60   # 60 of its mutants, at random
    python benchmarks/mutation.py --report-only      # the report of what was run, no run

The tester is mutmut 3 (``[tool.mutmut]`` in pyproject.toml). It copies the package and the
tests into ``mutants/``, runs the whole suite once to record which tests call which function,
then runs, for each mutant, only the tests that call the mutated function, fastest first, and
stops at the first failure. The record is kept in ``mutants/`` and reused by later runs; delete
the folder to start over (the next run then records again: longer than the suite). A run of a
module tests all its mutants again. Tests that took over ``--max-test-seconds`` when recorded
are left out of the mutants' runs (benchmarks/mutation_pytest.py).

Tests that start a Python child process (the CLI, the MCP stdio server, interrupt and sharing
tests) see the mutated code too: the run puts ``mutants/`` first on ``PYTHONPATH``, and the
child inherits the name of the active mutant from the environment. What a child calls is not
recorded, though, so such a test runs for a mutant only when it also calls the mutated function
in the test process itself.

A module whose survivors each take minutes (the search engine: a survivor runs every test
that searches) can be scored on a sample: ``--sample N`` runs N of its mutants drawn with a
fixed seed, and a larger N later extends the same draw. The score is then over the mutants run,
with its 95 % (Wilson) interval.

For each module the table gives the mutants, how they ended (killed, survived, timeout, no
tests: no test calls the function) and the score, caught / (mutants run - equivalent), where a
mutant is caught when a test fails or the tests never end (a timeout: an endless loop). Mutants
judged equivalent (no input can tell them from the original) are listed with the reason in
``benchmarks/mutation_equivalent.toml``. The table and the mutants not killed (file, line, the
change) are written to ``mutants/mutation-report.md``.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import math
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
EQUIVALENT = Path(__file__).with_name("mutation_equivalent.toml")
REPORT = MUTANTS / "mutation-report.md"
TIMES = MUTANTS / "mutation-times.json"
SEPARATOR = "ǁ"  # mutmut's separator between a class and a method in a mutant's name


@dataclass(frozen=True)
class Part:
    """A source file, or some functions of it (``only``), or all but some (``skip``).

    Functions are named ``name`` or ``Class.method``.
    """

    path: str
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()


_CONFIDENCE = ("confidence", "unseen_share")
_ENGINE_CONFIDENCE = ("SearchEngineImpl._confidence", "SearchEngineImpl._known_item")

# The core modules, by the name the report uses. A mutant belongs to exactly one of them.
MODULES: dict[str, tuple[Part, ...]] = {
    "fusion": (Part("knowledge_agent/search/ranking/fusion.py"),),
    "confidence": (
        Part("knowledge_agent/search/ranking/passages.py", only=_CONFIDENCE),
        Part("knowledge_agent/search/search_engine_impl.py", only=_ENGINE_CONFIDENCE),
    ),
    "citations": (Part("knowledge_agent/core/citations.py"),),
    "roots": (
        Part("knowledge_agent/server/mcp_tools.py", only=("resolve_roots", "path_within_roots")),
    ),
    "url_policy": (
        Part("knowledge_agent/crawl/policy.py"),
        Part("knowledge_agent/crawl/urls.py"),
        Part("knowledge_agent/crawl/robots.py"),
    ),
    "boosts": (Part("knowledge_agent/search/ranking/boosts.py"),),
    "passages": (
        Part("knowledge_agent/search/ranking/passages.py", skip=_CONFIDENCE),
        Part("knowledge_agent/search/ranking/locate.py"),
    ),
    # The two-stage search: candidates, fusion weights, grouping per item, context, item level.
    "engine": (Part("knowledge_agent/search/search_engine_impl.py", skip=_ENGINE_CONFIDENCE),),
    "chunking": (
        Part("knowledge_agent/chunking/content_chunker.py"),
        Part("knowledge_agent/chunking/headings.py"),
    ),
    "fetcher": (
        Part("knowledge_agent/crawl/fetch.py"),
        Part("knowledge_agent/crawl/transport.py"),
    ),
    "write_behind": (Part("knowledge_agent/backends/local/shared_indexes.py"),),
    "analysis": (Part("knowledge_agent/analysis.py"),),
    "storage": (
        Part("knowledge_agent/storage/connection.py"),
        Part("knowledge_agent/storage/sqlite_storage.py"),
        Part("knowledge_agent/storage/sources.py"),
        Part("knowledge_agent/storage/doc_sources.py"),
    ),
}

# mutmut's exit codes of a mutant's test run, folded into the report's columns.
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests"}
_TIMEOUT = {24, -24, 36, 152, 255}


def check_config() -> None:
    """Stop unless pyproject's ``only_mutate`` names exactly the files of MODULES."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    configured = set(project["tool"]["mutmut"]["only_mutate"])
    listed = {part.path for parts in MODULES.values() for part in parts}
    if configured != listed:
        raise SystemExit(
            "benchmarks/mutation.py: [tool.mutmut] only_mutate and MODULES differ: "
            + ", ".join(sorted(configured ^ listed))
        )


def status(exit_code: int | None) -> str:
    """The report's name for how a mutant ended (``not run`` when it has no result yet)."""
    if exit_code is None:
        return "not run"
    if exit_code in _TIMEOUT:
        return "timeout"
    return _STATUS.get(exit_code, "other")


def _functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Top-level functions and methods of top-level classes (what mutmut mutates), by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{inner.name}"] = inner
    return found


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _mangled(function: str) -> str:
    owner, _, name = function.rpartition(".")
    return f"x{SEPARATOR}{owner}{SEPARATOR}{name}" if owner else f"x_{name}"


def globs(module: str) -> list[str]:
    """mutmut's mutant-name patterns for ``module``; a named function that is gone is an error."""
    patterns = []
    for part in MODULES[module]:
        dotted = _dotted(part.path)
        if not part.only and not part.skip:
            patterns.append(f"{dotted}.*")
            continue
        present = _functions(ROOT / part.path)
        missing = [name for name in (*part.only, *part.skip) if name not in present]
        if missing:
            raise SystemExit(f"benchmarks/mutation.py: {part.path} has no {', '.join(missing)}")
        names = part.only or [name for name in present if name not in part.skip]
        mangled = [_mangled(name) for name in present]
        for name in map(_mangled, names):
            # "name*" also matches the function itself, which mutmut needs to find the tests
            # to run unmutated first (without it, it runs the whole suite); when another
            # function's name starts with this one, only its mutants are named.
            clash = any(other != name and other.startswith(name) for other in mangled)
            patterns.append(f"{dotted}.{name}{'__mutmut_' if clash else ''}*")
    return patterns


@dataclass
class Mutant:
    name: str
    path: str
    status: str


@dataclass
class ModuleResult:
    module: str
    mutants: list[Mutant] = field(default_factory=list)
    seconds: float | None = None

    def count(self, what: str) -> int:
        return sum(1 for mutant in self.mutants if mutant.status == what)


def results(module: str) -> ModuleResult:
    """The recorded outcome of every mutant of ``module`` (from mutmut's files in mutants/)."""
    patterns = globs(module)
    result = ModuleResult(module)
    for path in dict.fromkeys(part.path for part in MODULES[module]):
        meta = MUTANTS / f"{path}.meta"
        if not meta.exists():
            continue
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        for name, code in codes.items():
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
                result.mutants.append(Mutant(name, path, status(code)))
    result.seconds = _json(TIMES).get(module)
    return result


def equivalent() -> dict[str, str]:
    """Mutant name -> why it is equivalent, from benchmarks/mutation_equivalent.toml."""
    if not EQUIVALENT.exists():
        return {}
    entries = tomllib.loads(EQUIVALENT.read_text(encoding="utf-8")).get("mutant", [])
    return {entry["name"]: entry["reason"] for entry in entries}


def sample(module: str, size: int, seed: int) -> list[str]:
    """``size`` of ``module``'s mutants drawn at random; a larger size extends the same draw."""
    names = sorted(mutant.name for mutant in results(module).mutants)
    if not names:
        generate()
        names = sorted(mutant.name for mutant in results(module).mutants)
    if not names:
        raise SystemExit(f"benchmarks/mutation.py: mutmut made no mutants of {module}")
    random.Random(f"{seed}:{module}").shuffle(names)
    return names[:size]


_GENERATE = """
import os
from mutmut.__main__ import (
    copy_also_copy_files, copy_src_dir, create_mutants, set_mutant_under_test, setup_source_paths
)
set_mutant_under_test("mutant_generation")
os.makedirs("mutants", exist_ok=True)
copy_src_dir()
copy_also_copy_files()
setup_source_paths()
create_mutants(os.cpu_count() or 2)
"""


def generate() -> None:
    """Make every mutant (mutmut's first step of a run, without recording or running any),
    so a sample can be drawn before any run."""
    done = subprocess.run([sys.executable, "-c", _GENERATE], cwd=ROOT, capture_output=True)
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"benchmarks/mutation.py: mutmut could not make the mutants: {last}")


def run(
    module: str, max_children: int, max_test_seconds: float, names: Sequence[str] = ()
) -> float:
    """Run mutmut over ``module``'s mutants (or only ``names``); the wall time in seconds.

    Its output goes to a log.
    """
    MUTANTS.mkdir(exist_ok=True)  # on PYTHONPATH before mutmut creates it: Python caches a miss
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(MUTANTS), os.environ.get("PYTHONPATH")])),
        "MUTATION_MAX_TEST_SECONDS": str(max_test_seconds),
    }
    mutmut = Path(sys.executable).with_name("mutmut")
    command = [str(mutmut), "run", "--max-children", str(max_children), *(names or globs(module))]
    log = MUTANTS / f"mutation-{module}.log"
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"mutmut failed on {module} (exit {done.returncode}); see {log}")
    times = _json(TIMES)
    times[module] = round(seconds, 1)
    times["max_test_seconds"] = max_test_seconds
    TIMES.write_text(json.dumps(times, indent=2), encoding="utf-8")
    return seconds


def _scored(result: ModuleResult, equivalents: dict[str, str]) -> int:
    """The mutants that count: those run and not judged equivalent."""
    return sum(
        1
        for mutant in result.mutants
        if mutant.status != "not run" and mutant.name not in equivalents
    )


def _caught(result: ModuleResult) -> int:
    """Mutants a test failed on, or whose tests never ended."""
    return result.count("killed") + result.count("timeout")


def score(result: ModuleResult, equivalents: dict[str, str]) -> float | None:
    """caught / (mutants run - equivalent), or None when nothing is left to score."""
    total = _scored(result, equivalents)
    return _caught(result) / total if total else None


def interval(result: ModuleResult, equivalents: dict[str, str]) -> tuple[float, float] | None:
    """The 95 % Wilson interval of the score of a sampled module (None when all were run)."""
    total = _scored(result, equivalents)
    if not total or not result.count("not run"):
        return None
    z = 1.96
    share = _caught(result) / total
    scale = 1 + z * z / total
    centre = (share + z * z / (2 * total)) / scale
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


def table(results: Sequence[ModuleResult], equivalents: dict[str, str]) -> str:
    """The per-module table, as Markdown."""
    head = (
        "| module | mutants | killed | survived | timeout | no tests | not run | equivalent "
        "| score | time |"
    )
    lines = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for result in results:
        value = score(result, equivalents)
        bounds = interval(result, equivalents)
        value_text = "-" if value is None else f"{value:.1%}"
        if bounds is not None:
            value_text += f" ({bounds[0]:.0%}-{bounds[1]:.0%})"
        judged = sum(1 for mutant in result.mutants if mutant.name in equivalents)
        time_text = f"{result.seconds / 60:.1f} min" if result.seconds is not None else "-"
        lines.append(
            f"| {result.module} | {len(result.mutants)} | {result.count('killed')} "
            f"| {result.count('survived')} | {result.count('timeout')} "
            f"| {result.count('no tests')} | {result.count('not run')} | {judged} "
            f"| {value_text} | {time_text} |"
        )
    return "\n".join(lines)


def change(mutant: Mutant) -> tuple[int | None, list[str]]:
    """The source line a mutant changes and its diff lines (``-`` the original, ``+`` it)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = Path.cwd()
    os.chdir(ROOT)  # mutmut reads mutants/<path> relative to the project
    try:
        diff = get_diff_for_mutant(mutant.name, path=mutant.path)
    finally:
        os.chdir(cwd)
    lines = [
        line
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    mangled = mutant.name.rpartition(".")[2].partition("__mutmut_")[0]
    if mangled.startswith("x_"):
        function = mangled[2:]
    else:  # xǁClassǁmethod
        _, owner, method = mangled.split(SEPARATOR)
        function = f"{owner}.{method}"
    node = _functions(ROOT / mutant.path).get(function)
    if node is None:
        return None, lines
    source = (ROOT / mutant.path).read_text(encoding="utf-8").splitlines()
    removed = [line[1:].strip() for line in lines if line.startswith("-")]
    for number in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        if removed and source[number - 1].strip() == removed[0]:
            return number, lines
    return node.lineno, lines


def survivors(result: ModuleResult, equivalents: dict[str, str]) -> Iterator[str]:
    """Markdown lines: every mutant of ``result`` run, not caught and not judged equivalent."""
    left = [
        mutant
        for mutant in result.mutants
        if mutant.status not in ("killed", "timeout", "not run") and mutant.name not in equivalents
    ]
    for mutant in sorted(left, key=lambda m: (m.path, _number(m.name))):
        line, lines = change(mutant)
        where = f"{mutant.path}:{line}" if line else mutant.path
        yield f"- `{where}` {mutant.status} `{mutant.name}`"
        yield from (f"      {text}" for text in lines)


def _number(name: str) -> tuple[str, int]:
    function, _, number = name.rpartition("__mutmut_")
    return function, int(number) if number.isdigit() else 0


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def left_out() -> list[tuple[float, str, float]]:
    """(limit, test, recorded seconds) of the tests the last run left out, slowest first."""
    limit = _json(TIMES).get("max_test_seconds")
    if not limit:
        return []
    durations = _json(MUTANTS / "mutmut-stats.json").get("duration_by_test", {})
    slow = [(limit, test, seconds) for test, seconds in durations.items() if seconds > limit]
    return sorted(slow, key=lambda entry: -entry[2])


def report(modules: Sequence[str], survivors_to: Path | None) -> str:
    """The table and the survivors of those of ``modules`` that were run; written to REPORT."""
    equivalents = equivalent()
    done = [
        result
        for result in map(results, modules)
        if any(mutant.status != "not run" for mutant in result.mutants)
    ]
    stale = [
        mutant.name
        for result in done
        for mutant in result.mutants
        if mutant.name in equivalents and mutant.status == "killed"
    ]
    parts = [table(done, equivalents)]
    if stale:
        parts.append("\nListed as equivalent but killed (remove them from the list):\n")
        parts += [f"- `{name}`" for name in stale]
    slow = left_out()
    if slow:
        parts.append(f"\nLeft out of the mutants' runs (recorded over {slow[0][0]:g} s):\n")
        parts += [f"- {test} ({seconds:.0f} s)" for _, test, seconds in slow]
    for result in done:
        parts.append(f"\n## {result.module}: not killed\n")
        parts += list(survivors(result, equivalents)) or ["(none)"]
    text = "\n".join(parts) + "\n"
    MUTANTS.mkdir(exist_ok=True)
    REPORT.write_text(text, encoding="utf-8")
    if survivors_to is not None:
        survivors_to.write_text(text, encoding="utf-8")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--module",
        action="append",
        choices=list(MODULES),
        help="a core module to run (repeatable; default: all, in the order of the table)",
    )
    parser.add_argument(
        "--max-children", type=int, default=2, help="mutants tested at once (default 2)"
    )
    parser.add_argument(
        "--max-test-seconds",
        type=float,
        default=5.0,
        help="leave out of mutants' runs the tests that took longer than this when recorded "
        "(default 5; 0 runs them all)",
    )
    parser.add_argument(
        "--sample",
        type=int,
        help="run only this many of each module's mutants, drawn with --seed (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the draw of --sample (default 0)")
    parser.add_argument(
        "--report-only", action="store_true", help="print the report of what was run; run nothing"
    )
    parser.add_argument(
        "--survivors", type=Path, help="also write the table and the survivors to this file"
    )
    args = parser.parse_args(argv)
    if args.max_children < 1:
        parser.error("--max-children must be at least 1")
    if args.sample is not None and args.sample < 1:
        parser.error("--sample must be at least 1")
    check_config()
    if not args.report_only:
        for module in args.module or list(MODULES):
            names = sample(module, args.sample, args.seed) if args.sample else ()
            seconds = run(module, args.max_children, args.max_test_seconds, names)
            print(f"{module}: {seconds / 60:.1f} min", flush=True)
            report(list(MODULES), args.survivors)
    print(report(list(MODULES), args.survivors))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
