"""How the Ctrl-C benchmark (benchmarks/stress_interrupt.py) judges a run: the one line it
must print, and the files it reports committed against what the folder holds."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.stress_checks import ChildResult, Verdict
from benchmarks.stress_interrupt import Interrupted, committed_count, interrupt_problems

LINE = "interrupted: {} {} committed; run the same command again to finish\n"
CHANGED = 10


def folder(*, missing: int = 0, stale: int = 0, **fields: Any) -> ChildResult:
    """A verify() answer for a folder that reopened consistent, with ``missing`` of the
    changed files not stored and ``stale`` stored in an older version."""
    verdict = Verdict(opened=True, consistent=True, **fields)
    verdict.missing_files = [f"m{n}" for n in range(missing)]
    verdict.stale_files = [f"s{n}" for n in range(stale)]
    return ChildResult("ok", verdict.to_dict())


def stopped(committed: int, stderr: str | None = None) -> Interrupted:
    files = "file" if committed == 1 else "files"
    text = LINE.format(committed, files) if stderr is None else stderr
    return Interrupted(130, text, stop_seconds=0.3)


@pytest.mark.parametrize(("committed", "missing", "stale"), [(0, 6, 4), (1, 9, 0), (10, 0, 0)])
def test_a_stop_that_stored_what_it_reported_passes(
    committed: int, missing: int, stale: int
) -> None:
    assert committed_count(LINE.format(committed, "file" if committed == 1 else "files")) == (
        committed
    )
    assert interrupt_problems(stopped(committed), folder(missing=missing, stale=stale), 10) == []


def test_a_reported_count_the_folder_does_not_hold_fails() -> None:
    problems = interrupt_problems(stopped(4), folder(missing=3, stale=2), CHANGED)
    assert problems == ["5 of 10 files stored in their current version, 4 reported committed"]


@pytest.mark.parametrize(
    "stderr",
    [
        "interrupted\n",
        LINE.format(3, "files") + "Error: something else\n",
        "Traceback (most recent call last):\n  ...\nKeyboardInterrupt\n",
        "interrupted: 3 files committed\n",
    ],
)
def test_exit_130_without_exactly_the_one_line_fails(stderr: str) -> None:
    assert committed_count(stderr) is None
    problems = interrupt_problems(stopped(0, stderr), folder(missing=7), CHANGED)
    assert len(problems) == 1
    assert problems[0].startswith(("stderr is not the one line", "a traceback on stderr"))


@pytest.mark.parametrize("code", [0, 130, -2])
def test_a_run_that_printed_its_result_must_have_stored_everything(code: int) -> None:
    stderr = LINE.format(10, "files") if code == 130 else ""
    finished = Interrupted(code, stderr, stop_seconds=0.01, finished=True)
    assert interrupt_problems(finished, folder(), CHANGED) == []
    assert interrupt_problems(finished, folder(missing=1), CHANGED) == [
        "9 of 10 files stored in their current version, 10 reported committed"
    ]


def test_a_traceback_fails_even_after_the_result() -> None:
    traceback = "Traceback (most recent call last):\n  ...\nKeyboardInterrupt\n"
    late = Interrupted(0, traceback, stop_seconds=0.01, finished=True)
    problems = interrupt_problems(late, folder(), CHANGED)
    assert len(problems) == 1 and problems[0].startswith("a traceback on stderr")


def test_death_by_the_signal_before_the_result_fails() -> None:
    silent = Interrupted(-2, "", 0.01)
    assert interrupt_problems(silent, folder(missing=10), CHANGED) == [
        "stderr is not the one line: ''",
        "exit -2",
    ]


def test_a_command_that_kept_running_or_left_workers_fails() -> None:
    hung = Interrupted(-9, "", 120.0, stopped=False, leftovers=1)
    problems = interrupt_problems(hung, folder(missing=10), CHANGED)
    assert "still running 120 s after Ctrl-C" in problems
    assert "processes of its group outlived the command" in problems


def test_duplicates_unexpected_items_and_an_inconsistent_folder_fail() -> None:
    answer = folder(duplicates=["a.md"], unexpected=["b.md"], missing=10)
    answer.value["consistent"] = False
    answer.value["status_problems"] = {"count": 1, "examples": ["2 chunks missing"]}
    problems = interrupt_problems(stopped(0), answer, CHANGED)
    assert "1 duplicates" in problems and "1 unexpected" in problems
    assert "inconsistent: 2 chunks missing" in problems


def test_a_folder_that_did_not_reopen_is_reported_without_counting() -> None:
    closed = ChildResult("ok", Verdict(open_error="DatabaseError: malformed").to_dict())
    problems = interrupt_problems(stopped(2), closed, CHANGED)
    assert problems == ["reopen failed: DatabaseError: malformed"]
    assert interrupt_problems(stopped(2), ChildResult("timeout", error="no answer"), CHANGED) == [
        "verification timeout: no answer"
    ]
