"""The mutation benchmark's module map (benchmarks/mutation.py): it names what mutmut mutates,
every function it names exists, and its score leaves out the mutants judged equivalent."""

from __future__ import annotations

import fnmatch

import pytest

from benchmarks import mutation
from benchmarks.mutation import (
    MODULES,
    ModuleResult,
    Mutant,
    check_config,
    globs,
    interval,
    sample,
    score,
    status,
)


def test_the_module_map_and_the_mutmut_configuration_name_the_same_files() -> None:
    check_config()  # raises SystemExit naming the files when they differ


def test_every_module_names_only_functions_that_exist() -> None:
    for module in MODULES:
        assert globs(module)  # a named function that is gone stops the run


def test_a_mutant_belongs_to_one_module_even_where_modules_share_a_file() -> None:
    names = [
        "knowledge_agent.search.ranking.passages.x_confidence__mutmut_3",
        "knowledge_agent.search.ranking.passages.x_passage_evidence__mutmut_3",
        "knowledge_agent.search.search_engine_impl.xǁSearchEngineImplǁ_confidence__mutmut_1",
        "knowledge_agent.search.search_engine_impl.xǁSearchEngineImplǁ_chunk_search__mutmut_1",
    ]
    owners = {
        name: [m for m in MODULES if any(fnmatch.fnmatchcase(name, p) for p in globs(m))]
        for name in names
    }
    assert owners == {
        names[0]: ["confidence"],
        names[1]: ["passages"],
        names[2]: ["confidence"],
        names[3]: ["engine"],
    }


def test_the_score_is_caught_over_the_mutants_not_judged_equivalent() -> None:
    result = ModuleResult(
        "fusion",
        [
            Mutant("a", "f.py", status(1)),
            Mutant("b", "f.py", status(0)),
            Mutant("c", "f.py", status(0)),
            Mutant("d", "f.py", status(24)),
        ],
    )
    assert [m.status for m in result.mutants] == ["killed", "survived", "survived", "timeout"]
    assert score(result, {}) == 2 / 4  # a timeout is caught: the tests never ended
    assert score(result, {"b": "why"}) == 2 / 3


def test_a_sampled_module_is_scored_over_the_mutants_run_with_an_interval() -> None:
    run = [Mutant(f"k{i}", "f.py", status(1)) for i in range(9)] + [Mutant("s", "f.py", status(0))]
    result = ModuleResult(
        "engine", [*run, *(Mutant(f"n{i}", "f.py", status(None)) for i in range(90))]
    )
    assert score(result, {}) == 9 / 10
    low, high = interval(result, {})
    assert 0.55 < low < 0.6 and 0.98 < high < 0.99  # Wilson, 9 of 10
    assert score(result, {"s": "why"}) == 1.0
    assert interval(ModuleResult("engine", run), {}) is None


def test_a_larger_sample_extends_the_same_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"m{i}" for i in range(200)]
    recorded = ModuleResult("engine", [Mutant(name, "f.py", status(None)) for name in names])
    monkeypatch.setattr(mutation, "results", lambda module: recorded)
    small, large = sample("engine", 20, 0), sample("engine", 50, 0)
    assert large[:20] == small and len(set(large)) == 50 and set(large) <= set(names)
    assert small != sorted(small) and sample("engine", 20, 1) != small
    assert sample("passages", 20, 0) != small  # each module draws on its own


def test_test_ids_pytest_escapes_differently_are_selected_by_their_function() -> None:
    from benchmarks.mutation_pytest import pytest_load_initial_conftests

    args = [
        "-p",
        "no:randomly",
        "-p",
        "no:random-order",
        "tests/t.py::test_odd[memory-'\\\\\\\\']",
        "tests/t.py::test_odd[disk-'\\u91cd']",
        "tests/t.py::test_odd[disk-'AND']",
        "tests/t.py::test_other[\U0001f600]",
        "tests/t.py::test_plain",
    ]
    pytest_load_initial_conftests(None, None, args)  # type: ignore[arg-type]
    assert args == [
        "-p",
        "no:randomly",
        "-p",
        "no:random-order",
        "tests/t.py::test_odd",
        "tests/t.py::test_odd[disk-'AND']",
        "tests/t.py::test_other",
        "tests/t.py::test_plain",
    ]
