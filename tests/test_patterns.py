"""Patterns from outside — regular expressions and globs from agents and the command line —
are bounded: in length, in what they compile to and in matching time, and a bad one is a
QueryError naming the argument it came from."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import regex as regex_engine
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore, KnowledgeItem
from knowledge_agent.cli import cli
from knowledge_agent.core.text_search import compile_pattern, matching_lines
from knowledge_agent.errors import QueryError
from knowledge_agent.patterns import (
    MAX_GLOBS,
    MAX_PATTERN_CHARS,
    MAX_REGEX_SIZE,
    TextPattern,
    check_glob,
    gitignore_problem,
    glob_regex,
    unfolded_size,
)

# Each backtracks exponentially on a long run of "a" that does not end the line; the
# regex module stops (a+)+$ early on its own, so these are the ones that still explode.
CATASTROPHIC = [r"(a|aa)+$", r"(\w|\w\w)+$", r"^(a|a)*$"]
LONG_LINE = "a" * 40 + "!"
HUGE_GLOB = "[" * 50_000


@pytest.fixture(scope="module")
def tools() -> Any:
    """The MCP tools (the [mcp] extra): the tests of patterns alone run without it."""
    pytest.importorskip("mcp.server.mcpserver")
    from knowledge_agent.server import mcp_tools

    return mcp_tools


@pytest.fixture(scope="module")
def core() -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore() as knowledge_base:
        knowledge_base.add_text(
            f"# Notes\n\n{LONG_LINE}\nimport os\ndef main():\n    pass\n",
            title="Notes",
            source_uri="/srv/notes/notes.md",
            kb="notes",
        )
        yield knowledge_base


# -- regular expressions ------------------------------------------------------------------


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_regex_ends_with_an_error_naming_it(pattern: str) -> None:
    expression = TextPattern(pattern, regex=True, case_sensitive=False, seconds=0.2)

    with pytest.raises(QueryError) as raised:
        list(matching_lines([KnowledgeItem(content=LONG_LINE)], expression))

    message = str(raised.value)
    assert message.startswith("pattern: the regular expression") and repr(pattern) in message
    assert "took too long to match (over 0.2 s)" in message
    # The budget is spent: the next call fails at once instead of running again.
    with pytest.raises(QueryError, match="took too long"):
        expression.search("b")


def test_knowledge_text_search_stops_a_catastrophic_regex_naming_keyword(
    tools: Any, core: KnowledgeAgentCore
) -> None:
    with pytest.raises(QueryError) as raised:
        tools.knowledge_text_search(core, "notes", CATASTROPHIC[0], regex=True)

    assert str(raised.value).startswith("keyword: the regular expression '(a|aa)+$'")
    # The same call as a literal answers: the budget is per call.
    found = tools.knowledge_text_search(core, "notes", "aaaa")
    assert [item["line"] for item in found["items"]] == [3]


def test_grep_regex_stops_a_catastrophic_regex_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no project file of the developer's is picked up
    data = tmp_path / "data"
    with KnowledgeAgentCore(data) as core:
        core.add_text(LONG_LINE, title="Line")

    result = CliRunner().invoke(cli, ["--data-dir", str(data), "grep", "--regex", CATASTROPHIC[0]])

    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: pattern: the regular expression '(a|aa)+$' took too")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "pattern",
    [
        "(?:a{1000}){1000}",
        "((a{100}){100}){100}",
        "(?:a{9999}|b){9999}",
        "a{99999}b{99999}",
        # Whatever a class, a comment or verbose mode hides, the count still multiplies.
        "(?:[)]x{400}){400}",
        "(?:a{400}(?#(){400}",
        "(?x)(?:a {400} # )\n){400}",
        "(?:[[:alpha:]]{400}){400}",
    ],
)
def test_a_regex_that_unfolds_too_far_is_refused_before_compiling(pattern: str) -> None:
    assert unfolded_size(pattern) > MAX_REGEX_SIZE
    with pytest.raises(QueryError, match=r"^keyword: the regular expression .* unfolds to over"):
        compile_pattern(pattern, regex=True, case_sensitive=True, name="keyword")


@pytest.mark.parametrize(
    ("pattern", "size"),
    [
        ("abc", 3),
        (r"\d{4}-\d{2}-\d{2}", 4 + 1 + 2 + 1 + 2),
        ("[0-9a-f]{40}", 40),
        ("(?:ab){3}", 12),  # the group's "?", ":" and two letters, three times
        (".{0,100000}", 1),  # a range unfolds only its minimum
        ("a{,5}", 1),
        ("x{ 3 }", 6),  # braces with spaces are text
    ],
)
def test_ordinary_regexes_unfold_to_little(pattern: str, size: int) -> None:
    assert unfolded_size(pattern) == size
    assert TextPattern(pattern, regex=True, case_sensitive=True).is_regex


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("(unclosed", "invalid regular expression '(unclosed' in keyword"),
        ("(" * 400 + ")" * 400, "invalid regular expression"),  # nesting past the parser
        ("(?a)(?u)x", "invalid regular expression"),  # conflicting flags: ValueError
        ("(?V1)x", "invalid regular expression"),
        ("a" * (MAX_PATTERN_CHARS + 1), "keyword is 1,001 characters long"),
        ("", "keyword must be a non-empty string"),
    ],
)
def test_a_bad_pattern_is_a_query_error_naming_the_argument(pattern: str, error: str) -> None:
    with pytest.raises(QueryError) as raised:
        compile_pattern(pattern, regex=True, case_sensitive=False, name="keyword")
    assert error in str(raised.value)


def test_a_regex_matches_each_line_on_its_own() -> None:
    item = KnowledgeItem(content="import os\ndef main():\n    pass\nend")
    found = list(
        matching_lines([item], compile_pattern("^def|^end$", regex=True, case_sensitive=True))
    )

    # ^ and $ anchor each line, as grep's do, not only the first and last of the text.
    assert [(match.line_number, match.line) for match in found] == [(2, "def main():"), (4, "end")]


# Pieces of regular expressions, the risky ones included: what sees past a line's end
# (lookarounds, \A, \Z, \X, atomic and possessive) must not make a line go unfound.
_PIECES = st.sampled_from(
    ["a", "b", " ", "\\n", "\\r", ".", "^", "$", "\\s", "\\S", "\\w", "\\W", "\\b", "\\B",
     "\\A", "\\Z", "\\X", "[^a]", "[ab\\n]", "(", ")", "(?:", "(?=", "(?!", "(?<=a)",
     "(?<!\\s)", "(?>", "|", "*", "+", "?", "{2}", "{1,}", "*+", "++", "(?s)", "(?m)", "\\1"]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(
    pieces=st.lists(_PIECES, min_size=1, max_size=8),
    contents=st.lists(st.text(alphabet="ab \n\r", max_size=30), min_size=1, max_size=3),
)
def test_a_regex_finds_exactly_the_lines_it_matches_on_their_own(
    pieces: list[str], contents: list[str]
) -> None:
    pattern = "".join(pieces)
    try:
        expression = compile_pattern(pattern, regex=True, case_sensitive=True)
    except QueryError:
        return  # not a regular expression
    oracle = regex_engine.compile(pattern, regex_engine.VERSION0)
    items = [KnowledgeItem(content=content) for content in contents]

    found = [(m.item_id, m.line_number) for m in matching_lines(items, expression)]

    assert found == [
        (item.id, number)
        for item in items
        for number, line in enumerate(item.content.split("\n"), start=1)
        if oracle.search(line)
    ]


@settings(max_examples=200, deadline=None)
@given(
    pattern=st.text(min_size=1, max_size=40),
    regex=st.booleans(),
    case_sensitive=st.booleans(),
    text=st.text(max_size=200),
)
def test_any_pattern_is_an_answer_or_a_query_error(
    pattern: str, regex: bool, case_sensitive: bool, text: str
) -> None:
    try:
        expression = compile_pattern(pattern, regex=regex, case_sensitive=case_sensitive)
        list(matching_lines([KnowledgeItem(content=text)], expression))
        list(expression.finditer(text))
    except QueryError as exc:
        assert str(exc)


# Text made of a few letters, so that needles are often found; "\n" and "\r" make lines.
_LINES = st.text(alphabet="abAB \n\r\x00é", max_size=80)


@settings(max_examples=300, deadline=None)
@given(
    needle=st.text(alphabet="abAB \r\x00é", min_size=1, max_size=4),
    contents=st.lists(_LINES, max_size=4),
)
def test_a_literal_finds_exactly_the_lines_that_contain_it(
    needle: str, contents: list[str]
) -> None:
    items = [KnowledgeItem(content=content) for content in contents]
    expression = compile_pattern(needle, regex=False, case_sensitive=True)

    found = [(m.item_id, m.line_number) for m in matching_lines(items, expression)]

    assert found == [
        (item.id, number)
        for item in items
        for number, line in enumerate(item.content.split("\n"), start=1)
        if needle in line
    ]


@settings(max_examples=200, deadline=None)
@given(
    needle=st.text(alphabet="abAB ", min_size=1, max_size=4), contents=st.lists(_LINES, max_size=4)
)
def test_a_literal_without_case_finds_the_lines_that_contain_it_in_any_case(
    needle: str, contents: list[str]
) -> None:
    items = [KnowledgeItem(content=content) for content in contents]
    expression = compile_pattern(needle, regex=False, case_sensitive=False)

    found = [(m.item_id, m.line_number) for m in matching_lines(items, expression)]

    assert found == [
        (item.id, number)
        for item in items
        for number, line in enumerate(item.content.split("\n"), start=1)
        if needle.lower() in line.lower()
    ]


# -- globs ---------------------------------------------------------------------------------


def test_a_long_glob_or_too_many_are_refused_naming_the_argument() -> None:
    with pytest.raises(QueryError, match=r"^path_glob is 50,000 characters long"):
        check_glob(HUGE_GLOB, "path_glob")
    with pytest.raises(QueryError, match=r"^path_glob is 50,000 characters long"):
        glob_regex(["*.md", HUGE_GLOB], "path_glob")
    with pytest.raises(QueryError, match=rf"^path_glob holds {MAX_GLOBS + 1} globs"):
        glob_regex(["*.md"] * (MAX_GLOBS + 1), "path_glob")
    with pytest.raises(QueryError, match=r"^path_glob must be a string, got int 3"):
        check_glob(3, "path_glob")


@pytest.mark.parametrize(
    ("tool", "arguments", "name"),
    [
        ("list_items", {"path_glob": HUGE_GLOB}, "path_glob"),
        ("list_items", {"path_glob": ["*.md", HUGE_GLOB]}, "path_glob"),
        ("search_knowledge", {"query": "notes", "path_glob": HUGE_GLOB}, "path_glob"),
        ("search_docs", {"query": "notes", "path_glob": HUGE_GLOB}, "path_glob"),
        ("search_code", {"query": "notes", "file_patterns": [HUGE_GLOB]}, "file_patterns"),
        ("list_items", {"path_glob": ["*.md"] * 21}, "path_glob"),
        ("search_knowledge", {"query": "x", "path_prefix": ["/"] * 21}, "path_prefix"),
        (
            "knowledge_semantic_search",
            {"knowledge_base": "notes", "query": "x", "source_keyword": "a" * 50_000},
            "source_keyword",
        ),
        (
            "knowledge_text_search",
            {"knowledge_base": "notes", "keyword": "x", "source_keyword": "a" * 50_000},
            "source_keyword",
        ),
        ("knowledge_list", {"name_keyword": "a" * 50_000}, "name_keyword"),
        (
            "knowledge_text_search",
            {"knowledge_base": "notes", "keyword": "a" * 50_000},
            "keyword",
        ),
    ],
)
def test_a_pattern_argument_is_bounded_and_named_when_refused(
    tools: Any, core: KnowledgeAgentCore, tool: str, arguments: dict[str, Any], name: str
) -> None:
    with pytest.raises(QueryError) as raised:
        getattr(tools, tool)(core, **arguments)
    assert str(raised.value).startswith(name + " ")


def test_the_longest_glob_allowed_still_works(tools: Any, core: KnowledgeAgentCore) -> None:
    longest = "/srv/notes/" + "?" * 8 + "*" * (tools.MAX_PATTERN_CHARS - 19)
    assert len(longest) == tools.MAX_PATTERN_CHARS

    listed = tools.list_items(core, path_glob=longest)
    found = tools.search_knowledge(core, "main", path_glob=longest)

    assert [item["path"] for item in listed["items"]] == ["/srv/notes/notes.md"]
    assert [result["path"] for result in found["results"]] == ["/srv/notes/notes.md"]


@settings(max_examples=200, deadline=None)
@given(
    glob=st.text(alphabet="*?[]!-^/\\ab.", max_size=30),
    path=st.text(alphabet="/ab.[]!-", max_size=20),
)
def test_any_glob_matches_as_fnmatch_does(glob: str, path: str) -> None:
    assert bool(glob_regex([glob], "path_glob").match(path)) == fnmatch.fnmatchcase(path, glob)


def test_messages_never_carry_a_huge_value() -> None:
    with pytest.raises(QueryError) as raised:
        check_glob(["x" * 100_000], "path_glob")
    assert len(str(raised.value)) < 200
    assert re.search(r"\bpath_glob\b", str(raised.value))


@pytest.mark.parametrize(
    ("pattern", "refused"),
    [
        ("*.py[cod]", False),
        ("**/node_modules/**", False),
        ("*.min.*", False),
        ("a/**/b/**/c/*.md", False),
        ("***", False),  # a run of stars is one wildcard
        ("[*]a*b*c", False),  # a star in a class is a character
        (r"\*a*b*c", False),  # so is an escaped one
        ("*a*b*c", True),
        ("x/*-*-*.log", True),
        ("/".join(["*"] * 9), True),  # nine segments of one star: nine in all
        ("a" * 1001, True),
    ],
)
def test_gitignore_patterns_that_cannot_match_in_bounded_time_are_named(
    pattern: str, refused: bool
) -> None:
    assert (gitignore_problem(pattern) is not None) is refused
