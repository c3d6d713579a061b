"""The MCP tools: every tool through an in-memory MCP client, over a small real knowledge base.

The knowledge base is a folder of Markdown pages (one in Chinese) and a Python file, collected
once per module; tests that write use their own knowledge base names or their own core.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from files import write

pytest.importorskip("mcp.server.mcpserver")

from mcp import Client
from mcp.types import CallToolResult
from test_processors_pdf import make_pdf
from web_site import SiteServer

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import ConfigError, IngestError, QueryError
from knowledge_agent.server import create_server
from knowledge_agent.server import mcp_tools as tools

pytestmark = pytest.mark.anyio

DEPLOY = """# Deploying the web service

## Building a release

Every release is built by the pipeline from a tagged commit. The build produces a tarball
that holds the application, its vendored dependencies and a manifest with the commit hash.
Nobody builds releases on a laptop: the pipeline is the only source of artifacts.

## Shipping a release

Copy the tarball to each host, unpack it under /srv/app/releases/<version> and point the
current symlink at it. Restart the service and watch the health check for two minutes
before moving to the next host in the pool.

## Rolling back a failed deploy

If the health check fails after a release, roll back before you debug anything.
Point the current symlink at the previous release directory and restart the service.
Database migrations are the exception: a rollback of the code does not undo a migration.

## Monitoring after a release

Keep an eye on the error rate and the p99 latency dashboards for an hour after a release.
A slow rise in memory use usually means a leak; page the owner of the change.
"""

CACHING = """# HTTP caching

## Revalidation with ETag

When a cached response is stale, the client asks whether it changed. The server sends an
ETag header, a short fingerprint of the content; on the next request the client sends it
back in If-None-Match, and an unchanged resource is answered with 304 Not Modified.

## Cache-Control

max-age says how long a response stays fresh; no-store forbids caching it at all. Shared
caches such as proxies also honour s-maxage, which overrides max-age for them only.
"""

ZH_ACCOUNT = """# 账户常见问题

## 如何重置密码

在登录页面点击“忘记密码”，输入注册时使用的邮箱地址。系统会在五分钟内发送一封包含重置链接的邮件，
链接在三十分钟内有效。打开链接后设置新密码，新密码至少包含十二个字符。

## 账户被锁定怎么办

连续输错密码五次后，账户会被锁定十五分钟，这是为了防止暴力破解。十五分钟后账户会自动解锁。
"""

BILLING = '''"""Billing helpers."""


def compute_invoice_total(lines, tax_rate):
    """Sum the invoice lines and add tax."""
    subtotal = sum(line.amount for line in lines)
    return subtotal * (1 + tax_rate)
'''

INVOICE_PAGE = """# Invoice policy {n}

## Invoice totals and tax

The invoice total is the sum of the invoice lines plus tax. Tax on an invoice is computed
from the tax rate of the customer's country; an invoice total is always rounded to cents.
Finance reviews every invoice total and every tax amount before the invoice is sent.
"""

KB_INTRO = (
    "Operations handbook of the web team: how we build, ship and roll back releases, "
    "how HTTP caching is set up, and answers to common account questions."
)


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kb") / "docs"
    write(root / "deploy.md", DEPLOY)
    write(root / "caching.md", CACHING)
    write(root / "zh-account.md", ZH_ACCOUNT)
    write(root / "src" / "billing.py", BILLING)
    for n in range(6):  # documents that outrank the code for invoice questions
        write(root / "finance" / f"invoice-policy-{n}.md", INVOICE_PAGE.format(n=n))
    return root


@pytest.fixture(scope="module", params=["local", "postgresql"])
def core(docs: Path, request: pytest.FixtureRequest) -> Iterator[KnowledgeAgentCore]:
    """The knowledge base the tools serve, in a data folder and on a PostgreSQL server."""
    if request.param == "local":
        opened = KnowledgeAgentCore(docs.parent / "data")
    else:
        opened = KnowledgeAgentCore(
            backend=request.getfixturevalue("postgres_server").new_database()
        )
    with opened as knowledge_base:
        knowledge_base.collect_knowledge(docs, kb="docs")
        knowledge_base.describe_kb("docs", KB_INTRO)
        knowledge_base.add_text(
            "Standup notes: the staging database was upgraded on Tuesday.",
            title="Standup",
            kb="notes",
        )
        yield knowledge_base


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(core: KnowledgeAgentCore, docs: Path) -> Any:
    async with Client(create_server(core, roots=[docs])) as connected:
        yield connected


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful tool call's answer; its text and structured content must agree."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    answer = json.loads(result.content[0].text)
    assert answer == result.structured_content
    return answer


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail as a tool error (not a protocol error)."""
    result: CallToolResult = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text


def file_lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").split("\n")


INJECTED = ("core", "roots", "url_policy")  # filled in by the server, not by the agent
EVIDENCE = re.compile(
    r"kb:(?P<chunk>[^:]+):(?P<path>.+)#L(?P<start>\d+)-L(?P<end>\d+)@(?P<hash>[0-9a-f]{12})"
)

# -- the tool list ---------------------------------------------------------------------------


async def test_every_tool_is_listed_with_described_parameters(client: Client) -> None:
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert list(listed) == [function.__name__ for function in tools.TOOLS]
    for tool in listed.values():
        assert tool.description and len(tool.description) > 40, tool.name
        # Written for a model: no source indentation carried into the text.
        assert not any(line.startswith(" ") for line in tool.description.splitlines())
        properties = tool.input_schema.get("properties", {})
        assert "core" not in properties and "roots" not in properties and "ctx" not in properties
        for name, schema in properties.items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    assert listed["search_knowledge"].input_schema["required"] == ["query"]
    assert listed["search_knowledge"].annotations.read_only_hint is True
    assert listed["delete_knowledge"].annotations.destructive_hint is True
    assert "required" not in listed["add_knowledge"].input_schema  # kb defaults like the CLI
    # Clients learn from the schema too that no other argument is accepted.
    assert all(tool.input_schema["additionalProperties"] is False for tool in listed.values())
    # Every answer has a published shape; the SDK client checks each call's answer against
    # it, so every tool call in these tests checks its tool's schema too.
    for tool in listed.values():
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
    search = listed["search_knowledge"].output_schema
    assert set(search["required"]) == {"results", "count", "truncated"}
    chunk = search["$defs"]["ChunkView"]["properties"]
    assert {"evidence_ref", "location", "content", "explanation"} <= set(chunk)


async def test_structured_only_answers_carry_no_text_copy(
    core: KnowledgeAgentCore, docs: Path
) -> None:
    server = create_server(core, roots=[docs], text_content=False)
    async with Client(server) as client:
        result = await client.call_tool("search_knowledge", {"query": "roll back a deploy"})
        status = await client.call_tool("index_status", {})
    assert result.content == [] and status.content == []
    assert result.structured_content is not None
    assert result.structured_content["results"][0]["title"] == "Deploying the web service"
    assert status.structured_content is not None and status.structured_content["consistent"]


REQUIRED = {
    "search_knowledge": {"query": "deploy"},
    "search_code": {"query": "invoice"},
    "search_docs": {"query": "deploy"},
    "knowledge_text_search": {"knowledge_base": "docs", "keyword": "deploy"},
    "knowledge_semantic_search": {"knowledge_base": "docs", "query": "deploy"},
    "read_chunk": {"chunk_id": "missing"},
    "get_knowledge_item": {"item_id": "missing"},
    "add_knowledge": {"kb": "scratch", "text": "never stored"},
    "delete_knowledge": {"item_id": "missing"},
}


@pytest.mark.parametrize("tool", [function.__name__ for function in tools.TOOLS])
async def test_an_unknown_argument_is_an_error_naming_it_and_the_valid_ones(
    client: Client, core: KnowledgeAgentCore, tool: str
) -> None:
    items = core.status().items
    message = await fail(client, tool, **REQUIRED.get(tool, {}), colour="blue", Limit=3)

    assert "unknown argument 'colour', 'Limit'" in message
    function = next(f for f in tools.TOOLS if f.__name__ == tool)
    valid = [name for name in inspect.signature(function).parameters if name not in INJECTED]
    assert f"the valid arguments are: {', '.join(valid) or 'none'}" in message
    assert core.status().items == items  # refused before the tool ran


# -- search_knowledge ------------------------------------------------------------------------


async def test_search_returns_the_answering_chunk_first_with_evidence_and_context(
    client: Client, docs: Path
) -> None:
    answer = await call(client, "search_knowledge", query="how do I roll back a failed deploy")

    assert answer["truncated"] is False and "note" not in answer
    top = answer["results"][0]
    assert top["title"] == "Deploying the web service"
    assert top["path"] == str(docs / "deploy.md")
    assert top["kb"] == "docs" and top["source_type"] == "markdown"
    best = top["matched_chunks"][0]
    assert best["heading"].endswith("Rolling back a failed deploy")
    # The evidence ref names the chunk, the file and the lines the chunk spans in that file.
    ref = EVIDENCE.fullmatch(best["evidence_ref"])
    assert ref is not None, best["evidence_ref"]
    assert ref["chunk"] == best["chunk_id"] and ref["path"] == top["path"]
    assert (int(ref["start"]), int(ref["end"])) == (best["start_line"], best["end_line"])
    assert best["location"] == f"{top['path']}:{best['start_line']}-{best['end_line']}"
    # The lines are the passage's (the chunk's without one).
    lines = file_lines(top["path"])[best["start_line"] - 1 : best["end_line"]]
    located = best["passage"]["text"] if best["passage"] else best["content"]
    assert "\n".join(lines).strip() == located.strip()
    # Context: the neighbouring chunks of the same document, not the matched ones.
    context = {chunk["chunk_index"] for chunk in top["context_chunks"]}
    matched = {chunk["chunk_index"] for chunk in top["matched_chunks"]}
    assert best["chunk_index"] - 1 in context | matched
    assert not context & matched
    assert all("content" in c and "evidence_ref" not in c for c in top["context_chunks"])
    # The document is a summary: its size, never its whole text.
    assert top["content_chars"] == len((docs / "deploy.md").read_text(encoding="utf-8"))
    assert "content" not in top


async def test_search_finds_a_chinese_passage(client: Client) -> None:
    answer = await call(client, "search_knowledge", query="如何重置密码", context_window=0)

    top = answer["results"][0]
    assert top["title"] == "账户常见问题" and top["language"] == "zh"
    assert "重置链接" in top["matched_chunks"][0]["content"]
    assert top["context_chunks"] == []


async def test_search_scopes_to_knowledge_bases_by_name_or_list(client: Client) -> None:
    notes = await call(client, "search_knowledge", query="staging database upgraded", kb="notes")
    both = await call(
        client, "search_knowledge", query="staging database upgraded", kb=["docs", "notes"]
    )
    docs_only = await call(client, "search_knowledge", query="staging database", kb="docs")

    assert [r["title"] for r in notes["results"]] == ["Standup"]
    assert both["results"][0]["title"] == "Standup"
    assert "Standup" not in [r["title"] for r in docs_only["results"]]
    assert [r["kb"] for r in notes["results"]] == ["notes"]


async def test_an_unknown_knowledge_base_is_a_tool_error_and_the_server_keeps_answering(
    client: Client,
) -> None:
    message = await fail(client, "search_knowledge", query="deploy", kb=["docs", "nope"])

    assert "no knowledge base named 'nope'" in message
    assert (await call(client, "index_status"))["consistent"] is True


async def test_an_answer_over_max_tokens_is_trimmed_and_says_so(client: Client) -> None:
    query = "release deploy health check rollback"
    full = await client.call_tool("search_knowledge", {"query": query, "context_window": 2})
    tight = await client.call_tool(
        "search_knowledge", {"query": query, "context_window": 2, "max_tokens": 500}
    )

    assert tools.estimate_tokens(full.content[0].text) > 500  # so the budget has to bite
    answer = json.loads(tight.content[0].text)
    assert answer["truncated"] is True
    assert "max_tokens=500" in answer["note"] and "read_chunk" in answer["note"]
    assert tools.estimate_tokens(tight.content[0].text) <= 500
    # Context goes first: what is left is the best result's best chunk.
    assert answer["results"][0]["title"] == "Deploying the web service"
    assert all(result["context_chunks"] == [] for result in answer["results"])


async def test_invalid_search_arguments_are_tool_errors(client: Client) -> None:
    assert "query" in await fail(client, "search_knowledge", query="")
    assert "non-empty" in await fail(client, "search_knowledge", query="   ")
    assert "limit" in await fail(client, "search_knowledge", query="deploy", limit=0)
    assert "max_tokens" in await fail(client, "search_knowledge", query="deploy", max_tokens=10)
    assert await call(client, "search_knowledge", query="deploy", limit=1)


async def test_explanations_are_added_on_request(client: Client) -> None:
    answer = await call(client, "search_knowledge", query="ETag", include_explanation=True)

    explanation = answer["results"][0]["matched_chunks"][0]["explanation"]
    assert explanation["keyword_rank"] == 1 and "etag" in explanation["matched_terms"]
    plain = await call(client, "search_knowledge", query="ETag")
    assert "explanation" not in plain["results"][0]["matched_chunks"][0]


async def test_a_query_with_no_match_says_what_to_try(client: Client) -> None:
    answer = await call(client, "search_knowledge", query="zyzzyva quux")

    assert answer["results"] == [] and "knowledge_text_search" in answer["hint"]


async def test_a_pdf_passage_cites_its_page(tmp_path: Path) -> None:
    filler = [f"Quarterly traffic grew in region {n} without incident." for n in range(30)]
    answer_page = ["Root cause", "The checkout outage came from an expired TLS certificate."]
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "postmortem.pdf").write_bytes(make_pdf([filler, answer_page]))
    with KnowledgeAgentCore() as core:
        core.collect_knowledge(tmp_path / "reports", kb="reports")
        async with Client(create_server(core)) as client:
            answer = await call(client, "search_knowledge", query="expired TLS certificate")

    best = answer["results"][0]["matched_chunks"][0]
    assert answer["results"][0]["source_type"] == "pdf"
    assert best["page"] == 2 and "expired TLS certificate" in best["content"]
    assert re.fullmatch(r"kb:[^:]+:.+postmortem\.pdf#L\d+-L\d+@[0-9a-f]{12}", best["evidence_ref"])


async def test_an_unexpected_failure_is_a_tool_error_and_the_server_survives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk on fire")

    with KnowledgeAgentCore() as core:
        core.add_text("Some text about deployments.", title="Deploys")
        async with Client(create_server(core)) as client:
            monkeypatch.setattr(core, "search", broken)
            message = await fail(client, "search_knowledge", query="deployments")
            monkeypatch.undo()
            answer = await call(client, "search_knowledge", query="deployments")

    assert message == "Error executing tool search_knowledge"  # internals stay on the server
    assert answer["results"][0]["title"] == "Deploys"


# -- search_code / search_docs ---------------------------------------------------------------


async def test_search_code_filters_before_ranking(client: Client, docs: Path) -> None:
    query = "invoice total tax"
    everything = await call(client, "search_knowledge", query=query, limit=3)
    code = await call(client, "search_code", query=query, limit=3)

    # Six invoice policy pages fill the global top 3; the code scope still finds the code.
    assert all(r["source_type"] == "markdown" for r in everything["results"])
    top = code["results"][0]
    assert top["path"] == str(docs / "src" / "billing.py") and top["language"] == "python"
    best = top["matched_chunks"][0]
    assert best["symbol"] == "compute_invoice_total" and best["symbol_type"] == "function"
    assert re.search(r"billing\.py#L4-L7@[0-9a-f]{12}$", best["evidence_ref"])
    assert {r["source_type"] for r in code["results"]} == {"code"}


async def test_search_code_by_language_and_file_pattern(client: Client) -> None:
    query = "invoice total tax"
    python = await call(client, "search_code", query=query, languages=["Python"])
    in_src = await call(client, "search_code", query=query, file_patterns=["src/*.py", "*.rs"])
    go = await call(client, "search_code", query=query, languages="go")
    tests_only = await call(client, "search_code", query=query, file_patterns="tests/*")

    assert [r["title"] for r in python["results"]] == ["billing.py"]
    assert [r["title"] for r in in_src["results"]] == ["billing.py"]
    assert go["results"] == [] and tests_only["results"] == []


async def test_search_docs_leaves_code_out_and_takes_path_prefixes(
    client: Client, docs: Path
) -> None:
    query = "invoice total tax"
    answer = await call(client, "search_docs", query=query, limit=10)
    prefixed = await call(
        client,
        "search_docs",
        query="invoice total tax release",
        path_prefix=[str(docs / "finance" / "invoice-policy-1"), str(docs / "deploy")],
    )

    assert answer["results"] and all(r["source_type"] != "code" for r in answer["results"])
    assert {Path(r["path"]).name for r in prefixed["results"]} == {
        "invoice-policy-1.md",
        "deploy.md",
    }


# -- browsing --------------------------------------------------------------------------------


async def test_read_chunk_returns_the_chunk_its_document_and_neighbours(client: Client) -> None:
    hit = (await call(client, "search_knowledge", query="roll back a failed deploy"))["results"][0]
    best = hit["matched_chunks"][0]

    answer = await call(client, "read_chunk", chunk_id=best["chunk_id"], neighbors=1)

    assert answer["chunk"]["content"] == best["content"]
    assert answer["chunk"]["evidence_ref"] == best["evidence_ref"]
    assert answer["item"]["item_id"] == hit["item_id"]
    assert "citation" not in answer
    cited = await call(client, "read_chunk", chunk_id=best["evidence_ref"], neighbors=0)
    assert cited["citation"]["status"] == "unchanged"
    assert cited["chunk"]["content"] == best["content"]
    stale = best["evidence_ref"].rsplit("@", 1)[0] + "@000000000000"
    assert (await call(client, "read_chunk", chunk_id=stale))["citation"]["status"] == "changed"
    assert [c["chunk_index"] for c in answer["before"]] == [best["chunk_index"] - 1]
    assert [c["chunk_index"] for c in answer["after"]] == [best["chunk_index"] + 1]
    assert "no chunk with id 'missing'" in await fail(client, "read_chunk", chunk_id="missing")
    assert await call(client, "read_chunk", chunk_id=best["chunk_id"], neighbors=0)


async def test_read_chunk_takes_the_evidence_ref_a_search_returned_as_it_is_named(
    client: Client,
) -> None:
    hit = (await call(client, "search_knowledge", query="roll back a failed deploy"))["results"][0]
    best = hit["matched_chunks"][0]

    cited = await call(client, "read_chunk", evidence_ref=best["evidence_ref"], neighbors=0)

    assert cited["citation"]["status"] == "unchanged"
    assert cited["chunk"]["content"] == best["content"]
    by_id = await call(client, "read_chunk", evidence_ref=best["chunk_id"], neighbors=0)
    assert by_id["chunk"]["chunk_id"] == best["chunk_id"]
    both = {"chunk_id": best["chunk_id"], "evidence_ref": best["evidence_ref"]}
    for arguments in ({}, both):
        message = await fail(client, "read_chunk", **arguments)
        assert "give chunk_id or evidence_ref (one of them)" in message


async def test_get_knowledge_item_trims_content_and_pages_on(client: Client, docs: Path) -> None:
    hit = (await call(client, "search_knowledge", query="ETag revalidation"))["results"][0]

    first = await call(client, "get_knowledge_item", item_id=hit["item_id"], max_chars=100)
    rest = await call(
        client, "get_knowledge_item", item_id=hit["item_id"], offset=first["next_offset"]
    )

    text = (docs / "caching.md").read_text(encoding="utf-8")
    assert first["title"] == "HTTP caching" and first["content_chars"] == len(text)
    assert first["truncated"] is True and first["content"] == text[:100]
    assert rest["truncated"] is False and "next_offset" not in rest
    assert first["content"] + rest["content"] == text
    assert "no item with id" in await fail(client, "get_knowledge_item", item_id="missing")


async def test_index_status_reports_a_consistent_index(client: Client) -> None:
    status = await call(client, "index_status")

    assert status["consistent"] is True and status["problems"] == []
    assert status["knowledge_bases"] >= 2 and status["items"] >= 11
    assert status["keyword_index"]["chunks"] == status["chunks"]


# -- list_items ------------------------------------------------------------------------------

DOCS_FILES = 10  # deploy, caching, zh-account, billing and six invoice policies


async def page_through(client: Client, **arguments: Any) -> list[dict[str, Any]]:
    """Every item of a listing, following next_offset page by page."""
    items: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = await call(client, "list_items", offset=offset, **arguments)
        assert page["offset"] == offset and page["count"] == len(page["items"])
        items += page["items"]
        if not page["more"]:
            assert "next_offset" not in page
            return items
        offset = page["next_offset"]
        assert offset == page["offset"] + page["count"]


async def test_list_items_gives_summaries_without_content(client: Client, docs: Path) -> None:
    answer = await call(client, "list_items", kb="docs")

    assert (answer["count"], answer["total"], answer["more"]) == (DOCS_FILES, DOCS_FILES, False)
    by_uri = {item["path"]: item for item in answer["items"]}
    deploy = by_uri[str((docs / "deploy.md").resolve())]
    assert set(deploy) == {
        "item_id",
        "title",
        "path",
        "kb",
        "source_type",
        "doc_type",
        "language",
        "content_chars",
        "updated_at",
        "chunks",
    }
    assert deploy["content_chars"] == len((docs / "deploy.md").read_text(encoding="utf-8"))
    assert deploy["title"] == "Deploying the web service" and deploy["kb"] == "docs"
    assert deploy["source_type"] == "markdown" and deploy["chunks"] >= 2
    assert by_uri[str((docs / "src" / "billing.py").resolve())]["source_type"] == "code"
    # The item_id is the one get_knowledge_item reads.
    read = await call(client, "get_knowledge_item", item_id=deploy["item_id"], max_chars=20)
    assert read["title"] == deploy["title"]


async def test_list_items_pages_with_next_offset(client: Client) -> None:
    whole = (await call(client, "list_items", kb="docs", limit=500))["items"]
    first = await call(client, "list_items", kb="docs", limit=4)

    assert (first["count"], first["total"], first["more"], first["next_offset"]) == (
        4,
        DOCS_FILES,
        True,
        4,
    )
    paged = await page_through(client, kb="docs", limit=4)
    assert [item["item_id"] for item in paged] == [item["item_id"] for item in whole]
    past_the_end = await call(client, "list_items", kb="docs", offset=DOCS_FILES)
    assert (past_the_end["count"], past_the_end["more"]) == (0, False)


async def test_list_items_filters_by_path_glob(client: Client, docs: Path) -> None:
    finance = await call(client, "list_items", kb="docs", path_glob="finance/*")
    code = await call(client, "list_items", path_glob=str(docs / "src" / "*.py"))
    markdown = await page_through(client, kb="docs", path_glob="*.md", limit=3)
    either = await call(client, "list_items", kb="docs", path_glob=["*/deploy.md", "*.py"])

    # A relative pattern matches at any depth; no cheap total with a glob: `more` says it.
    assert finance["count"] == 6 and "total" not in finance and finance["more"] is False
    assert all("/finance/invoice-policy-" in item["path"] for item in finance["items"])
    assert [item["title"] for item in code["items"]] == ["billing.py"]
    assert len(markdown) == DOCS_FILES - 1 and len({item["item_id"] for item in markdown}) == 9
    assert sorted(item["path"].rsplit("/", 1)[1] for item in either["items"]) == [
        "billing.py",
        "deploy.md",
    ]
    first = await call(client, "list_items", kb="docs", path_glob="*.md", limit=3)
    assert (first["more"], first["next_offset"]) == (True, 3)


async def test_list_items_by_source_type_and_several_knowledge_bases(client: Client) -> None:
    code = await call(client, "list_items", source_type="code")
    both = await call(client, "list_items", kb=["docs", "notes"], limit=500)
    documents = await call(client, "list_items", kb="docs", source_type=["markdown", "text"])

    assert [item["title"] for item in code["items"]] == ["billing.py"]
    assert code["more"] is False and "total" not in code  # storage counts by kb only
    assert len(both["items"]) == DOCS_FILES + 1 and both["more"] is False
    standup = next(item for item in both["items"] if item["kb"] == "notes")
    assert standup["title"] == "Standup" and standup["path"] is None
    assert documents["count"] == DOCS_FILES - 1
    # A path glob never matches an item without a path.
    assert (await call(client, "list_items", kb="notes", path_glob="*"))["count"] == 0


async def test_list_items_refuses_unknown_knowledge_bases_and_bad_pages(client: Client) -> None:
    message = await fail(client, "list_items", kb=["docs", "nope"])

    assert "no knowledge base named 'nope'; the knowledge bases are: " in message
    assert "docs" in message and "notes" in message
    assert "limit" in await fail(client, "list_items", limit=0)
    assert "limit" in await fail(client, "list_items", limit=501)
    assert "offset" in await fail(client, "list_items", offset=-1)


# -- writing ---------------------------------------------------------------------------------


async def test_add_search_and_delete_text(client: Client) -> None:
    report = await call(
        client,
        "add_knowledge",
        kb="scratch",
        text="The office espresso machine is descaled every Friday.",
        title="Espresso",
    )
    (item_id,) = report["item_ids"]
    found = await call(client, "search_knowledge", query="espresso descaled", kb="scratch")
    deleted = await call(client, "delete_knowledge", item_id=item_id)
    gone = await call(client, "search_knowledge", query="espresso descaled", kb="scratch")

    assert report["processed"] == 1 and report["chunks_added"] == 1
    assert found["results"][0]["item_id"] == item_id
    assert deleted["deleted"] is True and deleted["title"] == "Espresso"
    assert gone["results"] == []
    assert "no item with id" in await fail(client, "delete_knowledge", item_id=item_id)


async def test_add_knowledge_needs_exactly_one_of_path_and_text(client: Client) -> None:
    assert "exactly one" in await fail(client, "add_knowledge", kb="scratch")
    assert "exactly one" in await fail(client, "add_knowledge", kb="scratch", text="x", path="y")
    assert "kb must be" in await fail(client, "add_knowledge", kb="no spaces", text="hello")


async def test_add_knowledge_defaults_the_knowledge_base_like_the_command_line() -> None:
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core)) as connected:
            report = await call(connected, "add_knowledge", text="A note without a base.")
        assert report["kb"] == "default" and core.list_kbs()[0].name == "default"


async def test_text_that_looks_like_a_path_is_stored_as_text(
    client: Client, core: KnowledgeAgentCore, docs: Path
) -> None:
    # collect_knowledge would read this as a file; add_knowledge(text=…) must not.
    report = await call(client, "add_knowledge", kb="scratch", text=str(docs / "deploy.md"))

    assert core.get_item(report["item_ids"][0]).content == str(docs / "deploy.md")
    await call(client, "delete_knowledge", item_id=report["item_ids"][0])


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    allowed = write(tmp_path / "allowed" / "guide.md", "# Guide\n\nThe zebra crossing is wide.")
    secret = write(tmp_path / "secret" / "keys.md", "# Keys\n\nThe vault code is 1234 zebra.")
    os.symlink(secret.parent, allowed.parent / "escape-dir")
    os.symlink(secret, allowed.parent / "escape.md")
    return {"allowed": allowed.parent, "secret": secret.parent, "tmp": tmp_path}


async def test_paths_outside_the_roots_are_refused(roots: dict[str, Path]) -> None:
    allowed, secret = roots["allowed"], roots["secret"]
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core, roots=[allowed])) as client:
            for path in (
                secret / "keys.md",
                allowed / ".." / "secret" / "keys.md",
                allowed / "escape.md",
                allowed / "escape-dir",
                "../secret/keys.md",
            ):
                message = await fail(client, "add_knowledge", kb="kb", path=str(path))
                assert "outside the folders this server may read" in message, path
            assert core.status().items == 0


async def test_a_folder_inside_a_root_is_collected_without_following_symlinks_out(
    roots: dict[str, Path],
) -> None:
    allowed = roots["allowed"]
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core, roots=[allowed])) as client:
            report = await call(client, "add_knowledge", kb="kb", path=str(allowed))
            hits = await call(client, "knowledge_text_search", knowledge_base="kb", keyword="zebra")

    assert report["processed"] == 1 and report["failed"] == []
    assert [Path(m["source"]).name for m in hits["items"]] == ["guide.md"]


async def test_a_relative_path_is_taken_inside_the_roots(roots: dict[str, Path]) -> None:
    allowed = roots["allowed"]
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core, roots=[roots["secret"], allowed])) as client:
            report = await call(client, "add_knowledge", kb="kb", path="guide.md")
            (item,) = [core.get_item(item_id) for item_id in report["item_ids"]]

    assert item.source_uri == os.path.realpath(allowed / "guide.md")


async def test_without_roots_only_text_can_be_added(roots: dict[str, Path]) -> None:
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core)) as client:
            message = await fail(client, "add_knowledge", kb="kb", path=str(roots["allowed"]))
            assert "started without --root" in message
            assert (await call(client, "add_knowledge", kb="kb", text="hello"))["processed"] == 1


async def test_a_missing_path_inside_a_root_is_a_tool_error(roots: dict[str, Path]) -> None:
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core, roots=[roots["allowed"]])) as client:
            message = await fail(client, "add_knowledge", kb="kb", path="nothing-here.md")
    assert "no such file or directory" in message


async def test_web_pages_are_added_only_under_an_allowed_prefix() -> None:
    with SiteServer() as site, KnowledgeAgentCore() as core:
        site.set_page("/guide/", '<title>Guide</title><p>The okapi guide.</p><a href="x/">x</a>')
        site.set_page("/guide/x/", "<title>X</title><p>More about okapi herds.</p>")
        site.set_page("/admin/", "<p>admin</p>")
        async with Client(create_server(core)) as client:
            message = await fail(client, "add_knowledge", kb="web", url=site.url("/guide/"))
            assert "started without --allow-url" in message
            message = await fail(client, "add_knowledge", kb="web", path=site.url("/guide/"))
            assert "pass it as url" in message
        # A prefix that allows every http URL does not allow a loopback host …
        async with Client(create_server(core, allow_urls=["http://"])) as client:
            message = await fail(client, "add_knowledge", kb="web", url=site.url("/guide/"))
            assert "private or reserved address" in message
        # … one that names the host does, and only under it.
        allowed = [site.url("/guide/")]
        async with Client(create_server(core, allow_urls=allowed)) as client:
            message = await fail(client, "add_knowledge", kb="web", url=site.url("/admin/"))
            assert "not under an allowed URL prefix" in message
            report = await call(client, "add_knowledge", kb="web", url=site.url("/guide/"))
            assert report["processed"] == 2
            found = await call(client, "search_docs", query="okapi herds", kb="web")
            assert found["results"][0]["path"] == site.url("/guide/x/")
        assert site.hits("/admin/") == 0


async def test_url_takes_only_web_addresses_under_an_allowed_prefix(
    roots: dict[str, Path],
) -> None:
    allowed, secret = roots["allowed"], roots["secret"]
    with SiteServer() as site, KnowledgeAgentCore() as core:
        core.add_text("A note without secrets.", title="Note", kb="kb")
        server = create_server(core, roots=[allowed], allow_urls=["http://", site.url("/")])
        async with Client(server) as client:
            messages = [
                await fail(client, "add_knowledge", kb="kb", url=url)
                for url in (
                    str(secret / "keys.md"),
                    str(secret),
                    "/etc/passwd",
                    "~/.bashrc",
                    f"file://{secret}/keys.md",
                    "../secret/keys.md",
                    "guide.md",  # relative, and inside the root: still no URL
                    str(allowed / "guide.md"),
                    " " + site.url("/guide/"),
                    "ftp://127.0.0.1/",
                )
            ]
            hits = [
                await call(client, "knowledge_text_search", knowledge_base="kb", keyword=word)
                for word in ("vault", "zebra", "root:")
            ]
        items = core.status().items

    assert all(
        message.startswith("Error executing tool add_knowledge: url must be an http:// or "
                           "https:// address, got ")
        for message in messages
    ), messages  # fmt: skip
    assert [hit["count"] for hit in hits] == [0, 0, 0]
    assert items == 1  # the note; nothing was read
    assert site.requests == []


# -- the server's lifecycle ------------------------------------------------------------------


async def test_a_core_factory_is_opened_and_closed_by_the_lifespan(tmp_path: Path) -> None:
    opened: list[KnowledgeAgentCore] = []

    def open_core() -> KnowledgeAgentCore:
        opened.append(KnowledgeAgentCore(tmp_path / "data"))
        return opened[-1]

    server = create_server(open_core)
    assert opened == []  # nothing is opened before the server starts
    async with Client(server) as client:
        await call(client, "add_knowledge", kb="kb", text="Lifespan owned core.")
        assert len(opened) == 1
    # Closed on shutdown: the data folder can be opened again and holds the item.
    with KnowledgeAgentCore(tmp_path / "data") as reopened:
        assert reopened.status().items == 1
    with pytest.raises(Exception):  # noqa: B017 - any error: the storage is closed
        opened[0].storage.count_items()


async def test_a_core_instance_is_used_as_is_and_left_open() -> None:
    with KnowledgeAgentCore() as core:
        async with Client(create_server(core)) as client:
            await call(client, "add_knowledge", kb="kb", text="Still open afterwards.")
        assert core.status().items == 1


def test_create_server_checks_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        create_server("not a core")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not a folder"):
        create_server(KnowledgeAgentCore, roots=[tmp_path / "missing"])


# -- the plain functions ---------------------------------------------------------------------


def test_estimate_tokens_counts_cjk_characters_one_each() -> None:
    assert tools.estimate_tokens("") == 0
    assert tools.estimate_tokens("abcd") == 1
    assert tools.estimate_tokens("abcde") == 2
    assert tools.estimate_tokens("重置密码") == 4
    assert tools.estimate_tokens("重置 password") == 2 + 3


def test_evidence_refs_carry_lines_and_a_hash_of_the_text() -> None:
    assert tools.evidence_ref("c1", "/a.md", {"start_line": 3, "end_line": 9}, "text") == (
        "kb:c1:/a.md#L3-L9@982d9e3eb996"
    )
    assert tools.evidence_ref("c4", "Notes", {}, "text") == "kb:c4:Notes@982d9e3eb996"


def result(index: int, chunks: int, context: int, size: int) -> dict[str, Any]:
    def chunk(n: int) -> dict[str, Any]:
        return {"chunk_id": f"{index}-{n}", "content": "word " * size}

    return {
        "item_id": str(index),
        "matched_chunks": [chunk(n) for n in range(chunks)],
        "context_chunks": [chunk(100 + n) for n in range(context)],
    }


@pytest.mark.parametrize("max_tokens", [500, 900, 2000, 5000])
def test_fit_to_budget_drops_context_then_extra_chunks_then_results(max_tokens: int) -> None:
    results = [result(i, chunks=3, context=2, size=200) for i in range(5)]

    answer = tools.fit_to_budget(results, max_tokens)

    assert tools.estimate_tokens(tools.dumps(answer)) <= max_tokens
    assert answer["truncated"] is True and answer["count"] == len(answer["results"]) >= 1
    kept = answer["results"]
    if any(r["context_chunks"] for r in kept):
        assert all(len(r["matched_chunks"]) == 3 for r in kept)  # context went first
    if len(kept) < 5:
        assert all(r["context_chunks"] == [] for r in kept)
        assert all(len(r["matched_chunks"]) == 1 for r in kept)


def test_fit_to_budget_shortens_the_last_chunk_and_leaves_small_answers_alone() -> None:
    huge = tools.fit_to_budget([result(0, chunks=1, context=0, size=5000)], 500)
    small = tools.fit_to_budget([result(0, chunks=1, context=1, size=10)], 4000)

    chunk = huge["results"][0]["matched_chunks"][0]
    assert chunk["content_truncated"] is True and chunk["content"].endswith("…")
    assert tools.estimate_tokens(tools.dumps(huge)) <= 500
    assert "shortened 1 chunk" in huge["note"]
    assert small["truncated"] is False and "note" not in small


def test_path_within_roots(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root / "a" / "b.md", "b")
    roots = tools.resolve_roots([root, root])

    assert roots == (os.path.realpath(root),)
    assert tools.path_within_roots(str(root / "a" / "b.md"), roots) == os.path.realpath(
        root / "a" / "b.md"
    )
    assert tools.path_within_roots("a", roots) == os.path.realpath(root / "a")
    with pytest.raises(ConfigError, match="outside"):
        tools.path_within_roots(str(tmp_path), roots)
    with pytest.raises(ConfigError, match="outside"):
        tools.path_within_roots(str(root) + "-sibling", roots)
    with pytest.raises(IngestError, match=r"no such file or directory \(path '.*nope.md'\)"):
        tools.path_within_roots(str(root / "nope.md"), roots)
    # A link inside a root to a file inside it is read as that file; "~" is the server
    # user's home, outside the root like any other folder.
    os.symlink(root / "a" / "b.md", root / "link.md")
    assert tools.path_within_roots("link.md", roots) == os.path.realpath(root / "a" / "b.md")
    with pytest.raises(ConfigError, match=r"^path '~' is outside the folders"):
        tools.path_within_roots("~", roots)
    for bad, error in (
        ("a\x00.md", r"^path 'a\\x00.md' holds a NUL character"),
        ("", r"^path must be a non-empty string, got ''"),
        ("a" * 5000, r"^path is 5,000 characters long"),
        (None, r"^path must be a non-empty string, got None"),
    ):
        with pytest.raises((ConfigError, QueryError), match=error):
            tools.path_within_roots(bad, roots)  # type: ignore[arg-type]


def test_path_within_roots_names_the_roots_the_fix_and_the_missing_file(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    roots = tools.resolve_roots([first, second])
    with pytest.raises(ConfigError) as refused:
        tools.path_within_roots("notes.md", ())
    assert str(refused.value) == (
        "path: adding files is disabled: this server was started without --root folders "
        "(pass text instead, or restart it with `knowledge-agent serve --root DIR`)"
    )
    with pytest.raises(ConfigError) as outside:
        tools.path_within_roots(str(tmp_path), roots)
    assert str(outside.value) == (
        f"path {str(tmp_path)!r} is outside the folders this server may read: "
        f"{os.path.realpath(first)}, {os.path.realpath(second)}"
    )
    with pytest.raises(IngestError) as missing:
        tools.path_within_roots("nope.md", roots)
    assert missing.value.path == os.path.realpath(first / "nope.md")
    assert missing.value.reason == "no such file or directory (path 'nope.md')"


def test_plain_functions_validate_their_arguments(core: KnowledgeAgentCore) -> None:
    with pytest.raises(QueryError):
        tools.search_knowledge(core, "deploy", limit=0)
    with pytest.raises(QueryError):
        tools.search_code(core, "x", file_patterns=[f"*.{n}" for n in range(21)], path_prefix="/")
    answer = tools.search_knowledge(core, "ETag", limit=1)
    assert answer["count"] == 1 and answer["results"][0]["title"] == "HTTP caching"
