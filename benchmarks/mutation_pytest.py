"""A pytest plugin for mutation runs (benchmarks/mutation.py loads it with ``-p``).

Hypothesis runs derandomised, without deadlines and without its example database: every
mutant meets the same examples (a score does not depend on luck or on which mutant ran
before), and a machine loaded by the parallel mutant runs fails no test by its clock.

With ``MUTATION_MAX_TEST_SECONDS`` set, a mutant's run (and the unmutated run before them)
leaves out the tests that took longer than that while mutmut recorded which tests call which
function: a surviving mutant costs the time of every test that calls its function, and the
slowest few (command-line and multi-process tests) would cost most of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

# mutmut's record, in its working copy (this file runs from mutants/benchmarks/).
_STATS = Path(__file__).resolve().parents[1] / "mutmut-stats.json"
# MUTANT_UNDER_TEST values that are not a mutant's name.
_PHASES = {"stats", "fail", "list_all_tests", "mutant_generation"}


def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis in the mutation profile; and while mutmut records which tests call which
    function, child processes do not record.

    mutmut keeps the recording mode in this process as well as in the environment; a child
    inheriting it would record too, and fails when its working folder holds no mutmut
    configuration. What a child calls never reaches the record anyway.
    """
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        del os.environ["MUTANT_UNDER_TEST"]
    settings.register_profile("mutation", derandomize=True, deadline=None, database=None)
    settings.load_profile("mutation")


def slow_tests(limit: float) -> set[str]:
    """The tests whose recorded run took longer than ``limit`` seconds."""
    if not _STATS.exists():
        return set()
    durations = json.loads(_STATS.read_text(encoding="utf-8"))["duration_by_test"]
    return {test for test, seconds in durations.items() if seconds > limit}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    limit = os.environ.get("MUTATION_MAX_TEST_SECONDS")
    if not limit or float(limit) <= 0 or os.environ.get("MUTANT_UNDER_TEST") in _PHASES:
        return
    slow = slow_tests(float(limit))
    dropped = [item for item in items if item.nodeid in slow]
    if dropped:
        items[:] = [item for item in items if item.nodeid not in slow]
        config.hook.pytest_deselected(items=dropped)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """Name a parametrised test with a backslash or a non-ASCII character in its id by its
    function: mutmut passes the ids it recorded, and pytest's escaping of such ids differs
    between the run that recorded them and a run that selects them ("not found")."""
    seen: set[str] = set()
    kept = []
    for arg in args:
        name, bracket, _ = arg.partition("[")
        if "::" in name and bracket and ("\\" in arg or not arg.isascii()):
            if name in seen:
                continue
            seen.add(name)
            arg = name
        kept.append(arg)
    args[:] = kept
