"""Every tool argument is hostile: any value gives an answer or an error of the project's tree
naming the argument (never a TypeError, never an empty message), and no argument reads a file
except a path through the roots check."""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from files import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp.server.mcpserver")

from mcp import Client

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.crawl import UrlPolicy
from knowledge_agent.errors import KnowledgeAgentError, QueryError
from knowledge_agent.ingest.walker import WalkOptions
from knowledge_agent.server import create_server
from knowledge_agent.server import mcp_tools as tools

INJECTED = ("core", "roots", "url_policy")
SECRET = "vault-code-7391"
# A prefix on a port where nothing listens: a URL the policy allows fails without a crawl.
CLOSED_PREFIX = "http://127.0.0.1:9/"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("arguments")
    docs = base / "docs"
    write(docs / "deploy.md", "# Deploy\n\nRoll back a release by pointing the symlink back.\n")
    write(docs / "billing.py", 'def invoice_total(lines):\n    """Sum the lines."""\n')
    secret = write(base / "secret" / "keys.md", f"# Keys\n\nThe {SECRET} opens the vault.\n")
    os.symlink(secret, docs / "escape.md")  # inside the root, pointing outside it
    return {"docs": docs, "secret": secret}


@pytest.fixture(scope="module")
def core(folders: dict[str, Path]) -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore(workers=1) as knowledge_base:
        # As the server collects: links are not followed (escape.md leads outside).
        options = WalkOptions(follow_symlinks=False)
        knowledge_base.collect_knowledge(folders["docs"], kb="docs", walk_options=options)
        yield knowledge_base


@pytest.fixture(scope="module")
def base_arguments(core: KnowledgeAgentCore) -> dict[str, dict[str, Any]]:
    """Arguments with which every tool answers; a test changes one of them."""
    (item,) = [item for item in core.list_items(kb="docs") if item.source_type == "markdown"]
    chunk = core.storage.get_chunks_for_item(item.id)[0]
    return {
        "search_knowledge": {"query": "roll back a release"},
        "search_code": {"query": "invoice total"},
        "search_docs": {"query": "roll back a release"},
        "knowledge_list": {},
        "knowledge_text_search": {"knowledge_base": "docs", "keyword": "release"},
        "knowledge_semantic_search": {"knowledge_base": "docs", "query": "roll back"},
        "list_items": {},
        "read_chunk": {"chunk_id": chunk.id},
        "get_knowledge_item": {"item_id": item.id},
        "add_knowledge": {"kb": "scratch", "text": "A note on espresso."},
        "delete_knowledge": {"item_id": "no-such-item"},
        "index_status": {},
    }


def parameters(tool: Callable[..., Any]) -> list[str]:
    return [name for name in inspect.signature(tool).parameters if name not in INJECTED]


CASES = [(tool, name) for tool in tools.TOOLS for name in parameters(tool)]
CASE_IDS = [f"{tool.__name__}.{name}" for tool, name in CASES]
SOURCES = ("path", "url", "text")  # add_knowledge takes exactly one of them

HOSTILE_STRINGS = [
    "",
    " ",
    "\x00",
    "docs\x00.md",
    "x" * 100_000,
    "kb:" + "x" * 5000,
    "kb:c:/etc/passwd#L1-L2@abc",
    "/etc/passwd",
    "~/.bashrc",
    "file:///etc/passwd",
    "../secret/keys.md",
    "escape.md",
    "http://",
    "(a|aa)+$",
    "[" * 5000,
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=30),
    st.sampled_from(HOSTILE_STRINGS),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


def names_argument(message: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", message) is not None


def arguments_with(base: dict[str, Any], tool: Callable[..., Any], name: str, value: Any) -> dict:
    arguments = dict(base)
    if tool is tools.add_knowledge and name in SOURCES:
        for source in SOURCES:
            arguments.pop(source, None)
    arguments[name] = value
    return arguments


def injected(tool: Callable[..., Any], folders: dict[str, Path]) -> dict[str, Any]:
    if tool is not tools.add_knowledge:
        return {}
    return {
        "roots": tools.resolve_roots([folders["docs"]]),
        "url_policy": UrlPolicy((CLOSED_PREFIX,)),
    }


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(value=JSON_VALUES)
def test_any_value_of_any_argument_is_an_answer_or_an_error_naming_it(
    core: KnowledgeAgentCore,
    folders: dict[str, Path],
    base_arguments: dict[str, dict[str, Any]],
    case: tuple[Callable[..., Any], str],
    value: Any,
) -> None:
    tool, name = case
    arguments = arguments_with(base_arguments[tool.__name__], tool, name, value)
    try:
        answer = tool(core, **arguments, **injected(tool, folders))
    except KnowledgeAgentError as exc:
        assert names_argument(str(exc), name), (tool.__name__, name, str(exc))
    else:
        assert SECRET not in json.dumps(answer, ensure_ascii=False)


def test_the_base_arguments_answer(
    core: KnowledgeAgentCore,
    folders: dict[str, Path],
    base_arguments: dict[str, dict[str, Any]],
) -> None:
    for tool in tools.TOOLS:
        if tool is tools.delete_knowledge:
            continue
        answer = tool(core, **base_arguments[tool.__name__], **injected(tool, folders))
        assert isinstance(answer, dict) and answer


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda core: tools.add_knowledge(core, path="docs\x00.md", roots=("/",)),
            "path 'docs\\x00.md' holds a NUL character",
        ),
        (
            lambda core: tools.search_knowledge(core, "x", min_score="x"),
            "min_score must be a number from 0 to 1, got 'x'",
        ),
        (
            lambda core: tools.knowledge_text_search(core, 123, "x"),
            "knowledge_base must be a non-empty string, got 123",
        ),
        (
            lambda core: tools.read_chunk(core, 5),
            "chunk_id must be a non-empty string, got 5",
        ),
        (
            lambda core: tools.knowledge_text_search(core, "docs", "x", source_keyword=5),
            "source_keyword must be a string, got 5",
        ),
        (
            lambda core: tools.knowledge_list(core, only_ready="yes"),
            "only_ready must be true or false, got 'yes'",
        ),
        (
            lambda core: tools.get_knowledge_item(core, "x" * 100_000),
            "item_id is 100,000 characters long; at most 200 are allowed",
        ),
        (
            lambda core: tools.search_code(core, "x", kb=["docs", "nope"]),
            "kb: no knowledge base named 'nope'; the knowledge bases are: docs",
        ),
    ],
)
def test_the_reported_bad_arguments_are_errors_naming_them(
    core: KnowledgeAgentCore, call: Callable[[KnowledgeAgentCore], Any], message: str
) -> None:
    with pytest.raises(KnowledgeAgentError) as raised:
        call(core)
    assert str(raised.value) == message or str(raised.value).startswith(message)


# -- the same through the MCP layer ------------------------------------------------------------


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as running:
        yield running


@pytest.fixture(scope="module")
def mcp_client(
    portal: BlockingPortal, core: KnowledgeAgentCore, folders: dict[str, Path]
) -> Iterator[Client]:
    server = create_server(core, roots=[folders["docs"]], allow_urls=[CLOSED_PREFIX])
    with portal.wrap_async_context_manager(Client(server)) as client:
        yield client


def call_tool(portal: BlockingPortal, client: Client, tool: str, arguments: dict) -> Any:
    return portal.call(client.call_tool, tool, arguments)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(value=JSON_VALUES)
def test_through_mcp_an_error_is_never_empty_and_names_the_argument(
    portal: BlockingPortal,
    mcp_client: Client,
    base_arguments: dict[str, dict[str, Any]],
    case: tuple[Callable[..., Any], str],
    value: Any,
) -> None:
    tool, name = case
    arguments = arguments_with(base_arguments[tool.__name__], tool, name, value)
    result = call_tool(portal, mcp_client, tool.__name__, arguments)
    text = result.content[0].text if result.content else ""
    if result.is_error:
        reason = text.removeprefix(f"Error executing tool {tool.__name__}").strip(": ")
        assert reason and names_argument(reason, name), (tool.__name__, name, text)
    assert SECRET not in text


def test_through_mcp_a_nul_in_a_path_is_a_clear_error(
    portal: BlockingPortal, mcp_client: Client
) -> None:
    result = call_tool(portal, mcp_client, "add_knowledge", {"kb": "x", "path": "docs\x00.md"})

    assert result.is_error
    assert result.content[0].text == (
        "Error executing tool add_knowledge: path 'docs\\x00.md' holds a NUL character: "
        "no file is named so"
    )


# -- no argument reads a file outside the roots --------------------------------------------------


def test_no_string_argument_of_any_tool_reads_a_file_outside_the_roots(
    core: KnowledgeAgentCore,
    folders: dict[str, Path],
    base_arguments: dict[str, dict[str, Any]],
) -> None:
    secret = folders["secret"]
    docs = folders["docs"]
    names = [
        str(secret),
        f"file://{secret}",
        str(secret.parent),
        str(docs / "escape.md"),  # a symlink inside the root to the file outside
        "escape.md",
        f"{docs}/../secret/keys.md",
        "../secret/keys.md",
        f"kb:c:{secret}#L1-L3@0123456789ab",
    ]
    answers: list[str] = []
    refused = 0
    for tool, name in CASES:
        for value in names:
            arguments = arguments_with(base_arguments[tool.__name__], tool, name, value)
            try:
                answer = tool(core, **arguments, **injected(tool, folders))
            except KnowledgeAgentError as exc:
                answers.append(str(exc))
                refused += tool is tools.add_knowledge and name in ("path", "url")
            else:
                answers.append(json.dumps(answer, ensure_ascii=False))

    assert not [answer for answer in answers if SECRET in answer]
    assert core.text_search(SECRET) == []  # and nothing of it was stored
    assert refused == 2 * len(names)  # every path and url among them was refused


def test_read_chunk_with_a_ref_to_a_file_outside_reads_nothing(
    core: KnowledgeAgentCore, folders: dict[str, Path]
) -> None:
    ref = f"kb:0123:{folders['secret']}#L1-L3@0123456789ab"

    answer = tools.read_chunk(core, ref)

    assert answer == {"citation": {"ref": ref, "status": "gone"}}


def test_a_query_error_for_a_bad_ref_names_chunk_id(core: KnowledgeAgentCore) -> None:
    with pytest.raises(QueryError, match=r"^chunk_id: not an evidence reference"):
        tools.read_chunk(core, "kb:no-ref")
