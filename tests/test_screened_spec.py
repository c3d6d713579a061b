"""ScreenedSpec answers exactly as pathspec's GitIgnoreSpec.check_file, pattern list by list."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pathspec import GitIgnoreSpec

from knowledge_agent.ingest.screened_spec import ScreenedSpec
from knowledge_agent.ingest.walker import DEFAULT_EXCLUDES, NON_TEXT_EXCLUDES

_PIECES = ["a", "b", "doc", "build", ".git", "x.md", "*", "**", "?", "[ab]", "*.md", "!", "\\#"]
_pattern = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4).map(
    lambda parts: "/".join(parts).replace("/!", "/")
)
_lines = st.lists(
    st.one_of(_pattern, _pattern.map(lambda p: "!" + p), _pattern.map(lambda p: p + "/")),
    max_size=8,
)
_path = st.lists(
    st.sampled_from(["a", "b", "doc", "build", ".git", "x.md", "y.txt", "ab", "#n"]),
    min_size=1,
    max_size=5,
).map("/".join)


def _pathspec(spec: GitIgnoreSpec, path: str) -> tuple[bool | None, int | None]:
    result = spec.check_file(path)
    return result.include, result.index


@settings(max_examples=300, deadline=None)
@given(lines=_lines, path=_path, folder=st.booleans())
def test_same_answer_as_pathspec(lines: list[str], path: str, folder: bool) -> None:
    try:
        spec = GitIgnoreSpec.from_lines(lines)
    except ValueError:  # a pattern pathspec refuses (the walker drops such lines)
        assume(False)
    probe = path + "/" if folder else path
    assert ScreenedSpec(spec).check(probe) == _pathspec(spec, probe)


@pytest.mark.parametrize("patterns", [DEFAULT_EXCLUDES, NON_TEXT_EXCLUDES])
@pytest.mark.parametrize(
    "path",
    ["a/b.md", "node_modules/", "x/dist/", "pic.PNG", "pic.png", "a/package-lock.json", "..md"],
)
def test_defaults_same_answer_as_pathspec(patterns: tuple[str, ...], path: str) -> None:
    spec = GitIgnoreSpec.from_lines(list(patterns))
    assert ScreenedSpec(spec).check(path) == _pathspec(spec, path)


def test_the_defaults_are_screened() -> None:
    """The walk's fixed lists are joined into one regex (else every file pays per pattern)."""
    for patterns in (DEFAULT_EXCLUDES, NON_TEXT_EXCLUDES):
        screened = ScreenedSpec(GitIgnoreSpec.from_lines(list(patterns)))
        assert screened._screen is not None
        assert screened.check("notes/page.md") == (None, None)
