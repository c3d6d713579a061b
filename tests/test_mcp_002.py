"""The three tools of seed 002 — knowledge_list, knowledge_text_search and
knowledge_semantic_search — parameter by parameter, through an in-memory MCP client.

The shared knowledge base is a folder with an intro.md (collected once per module); the
rerank tests use small cores of their own, built with a fake reranker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from files import write
from web_site import SECTIONED_PAGE, SiteServer

pytest.importorskip("mcp.server.mcpserver")

from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.models import ItemSummary, MatchedChunk, ScoreExplanation, SearchResult
from knowledge_agent.server import create_server
from knowledge_agent.server.knowledge_tools import knowledge_semantic_search
from knowledge_agent.server.passages import (
    FoundPassage,
    deduplicated,
    near_identical,
    passage_relevance,
    ranked_passages,
)
from knowledge_agent.server.rerank import plan_rerank

pytestmark = pytest.mark.anyio

INTRO = (
    "Operations handbook of the web team (codename kestrel): how releases are built, shipped "
    "and rolled back, and how HTTP caching is set up."
)

DEPLOY = """# Deploying the web service

## Shipping a release

Copy the tarball to each host, unpack it under /srv/app/releases/<version> and point the
current symlink at it. Restart the service and watch the health check for two minutes.

## Rolling back a failed deploy

If the health check fails after a release, roll back before you debug anything.
Point the current symlink at the previous release directory and restart the service.
Database migrations are the exception: a rollback of the code does not undo a migration.
"""

CACHING = """# HTTP caching

## Revalidation with ETag

When a cached response is stale, the client asks whether it changed. The server sends an
ETag header, a short fingerprint of the content; on the next request the client sends it
back in If-None-Match, and an unchanged resource is answered with 304 Not Modified.

## Cache-Control

max-age says how long a response stays fresh; no-store forbids caching it at all.
"""

LONG_LINE = (
    "Incident log: "
    + "the pager rang and the on-call engineer acknowledged it; " * 8
    + "the root cause was an expired TLS certificate on the load balancer, "
    + "and the fix was to renew it and to add an expiry alert. " * 4
)


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kb") / "handbook"
    write(root / "intro.md", INTRO + "\n")
    write(root / "deploy.md", DEPLOY)
    write(root / "caching.md", CACHING)
    write(root / "incidents.txt", LONG_LINE + "\n")
    return root


@pytest.fixture(scope="module")
def core(docs: Path) -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore(docs.parent / "data", workers=1) as knowledge_base:
        knowledge_base.collect_knowledge(docs, kb="handbook")
        knowledge_base.add_text("Standup: the staging database was upgraded.", kb="notes")
        knowledge_base.create_kb("Research-Cardio", "Cardiology papers: arrhythmia, heart failure.")
        yield knowledge_base


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(core: KnowledgeAgentCore) -> Any:
    async with Client(create_server(core)) as connected:
        yield connected


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful tool call's answer; its text and structured content must agree."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    answer = json.loads(result.content[0].text)
    assert answer == result.structured_content
    return answer


async def fail(client: Client, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail as a tool error."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text


# -- the tool list ---------------------------------------------------------------------------


async def test_the_three_tools_are_listed_with_the_spec_parameters(client: Client) -> None:
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    def parameters(name: str) -> list[str]:
        return list(listed[name].input_schema["properties"])

    assert parameters("knowledge_list") == [
        "only_ready", "include_intro", "include_has_intro", "intro_max_chars", "max_items",
        "name_keyword",
    ]  # fmt: skip
    assert parameters("knowledge_text_search") == [
        "knowledge_base", "keyword", "max_lines", "max_chars", "max_chars_per_item",
        "case_sensitive", "source_keyword", "include_source", "include_line", "regex",
    ]  # fmt: skip
    assert parameters("knowledge_semantic_search") == [
        "knowledge_base", "query", "top_k", "enable_rerank", "rerank_top_k", "min_relevance",
        "source_keyword", "max_chars_per_item", "include_rerank_score", "deduplicate",
    ]  # fmt: skip
    assert "required" not in listed["knowledge_list"].input_schema
    assert listed["knowledge_text_search"].input_schema["required"] == [
        "knowledge_base",
        "keyword",
    ]
    assert listed["knowledge_semantic_search"].input_schema["required"] == [
        "knowledge_base",
        "query",
    ]
    defaults = {
        name: schema.get("default")
        for tool in ("knowledge_list", "knowledge_text_search", "knowledge_semantic_search")
        for name, schema in listed[tool].input_schema["properties"].items()
    }
    assert defaults["only_ready"] is True and defaults["include_has_intro"] is False
    assert defaults["max_items"] == 50 and defaults["intro_max_chars"] == 120
    assert defaults["max_lines"] == 20 and defaults["max_chars"] == 2000
    assert defaults["include_source"] is True and defaults["include_line"] is True
    # Omitted, top_k is the server's default_top_k (5 unless the settings say).
    assert defaults["top_k"] is None and defaults["min_relevance"] == 0
    assert defaults["include_rerank_score"] is True and defaults["deduplicate"] is True
    semantic = listed["knowledge_semantic_search"].input_schema["properties"]
    assert semantic["max_chars_per_item"]["default"] == 220
    assert (
        listed["knowledge_text_search"].input_schema["properties"]["max_chars_per_item"]["default"]
        == 180
    )


async def test_a_misspelt_argument_is_named_in_the_error(client: Client) -> None:
    message = await fail(client, "knowledge_list", max_item=3)

    assert "unknown argument 'max_item'" in message
    assert "max_items" in message and "only_ready" in message


# -- knowledge_list --------------------------------------------------------------------------


async def test_knowledge_list_defaults_list_ready_bases_with_their_intro(client: Client) -> None:
    answer = await call(client, "knowledge_list")

    assert answer["ok"] is True and answer["truncated"] is False
    assert [kb["name"] for kb in answer["items"]] == ["Research-Cardio", "handbook"]
    assert answer["count"] == 2
    handbook = answer["items"][1]
    assert handbook["intro"] == INTRO[:119] + "…"  # cut to 120 characters by default
    assert "has_intro" not in handbook
    # The extra counts; intro.md itself is not an item.
    assert handbook["items"] == 3 and handbook["chunks"] >= 3 and handbook["last_indexed_at"]
    assert handbook["roots"] and handbook["sources"] == 4
    assert "1 knowledge base(s) without an intro" in answer["note"]


async def test_knowledge_list_only_ready_false_and_has_intro(client: Client) -> None:
    everything = await call(client, "knowledge_list", only_ready=False, include_has_intro=True)

    by_name = {kb["name"]: kb for kb in everything["items"]}
    assert set(by_name) == {"Research-Cardio", "handbook", "notes"}
    assert by_name["notes"]["has_intro"] is False and by_name["notes"]["intro"] == ""
    assert by_name["handbook"]["has_intro"] is True
    assert "note" not in everything


async def test_knowledge_list_intro_length_and_leaving_it_out(client: Client) -> None:
    short = await call(client, "knowledge_list", intro_max_chars=20)
    none = await call(client, "knowledge_list", intro_max_chars=0)
    left_out = await call(client, "knowledge_list", include_intro=False)

    assert all(len(kb["intro"]) <= 20 and kb["intro"].endswith("…") for kb in short["items"])
    assert all(kb["intro"] == "" for kb in none["items"])
    assert all("intro" not in kb for kb in left_out["items"])
    assert [kb["name"] for kb in left_out["items"]] == ["Research-Cardio", "handbook"]


async def test_knowledge_list_max_items_truncates(client: Client) -> None:
    one = await call(client, "knowledge_list", max_items=1, only_ready=False)
    all_three = await call(client, "knowledge_list", max_items=3, only_ready=False)

    assert one["count"] == 1 and one["truncated"] is True
    assert all_three["count"] == 3 and all_three["truncated"] is False


async def test_knowledge_list_name_keyword_ignores_case(client: Client) -> None:
    cardio = await call(client, "knowledge_list", name_keyword="cardio")
    notes = await call(client, "knowledge_list", name_keyword="NOTES")
    notes_too = await call(client, "knowledge_list", name_keyword="NOTES", only_ready=False)

    assert [kb["name"] for kb in cardio["items"]] == ["Research-Cardio"]
    assert cardio["items"][0]["intro"].startswith("Cardiology papers")
    assert notes["items"] == [] and notes["count"] == 0
    assert [kb["name"] for kb in notes_too["items"]] == ["notes"]


async def test_knowledge_list_bounds(client: Client) -> None:
    assert "max_items" in await fail(client, "knowledge_list", max_items=0)
    assert "intro_max_chars" in await fail(client, "knowledge_list", intro_max_chars=-1)


# -- knowledge_text_search -------------------------------------------------------------------


async def test_text_search_gives_source_line_and_text(client: Client, docs: Path) -> None:
    answer = await call(
        client, "knowledge_text_search", knowledge_base="handbook", keyword="current symlink"
    )

    assert answer["ok"] is True and answer["truncated"] is False
    assert answer["knowledge_base"] == "handbook" and answer["keyword"] == "current symlink"
    assert answer["count"] == 2 == len(answer["items"])
    for item in answer["items"]:
        assert set(item) == {"source", "line", "text"}
        assert item["source"] == str(docs / "deploy.md")
        lines = (docs / "deploy.md").read_text(encoding="utf-8").split("\n")
        assert lines[item["line"] - 1] == item["text"]


async def test_text_search_max_lines_and_the_character_budget(client: Client) -> None:
    search = {"knowledge_base": "handbook", "keyword": "the"}
    many = await call(client, "knowledge_text_search", **search, max_lines=500)
    one = await call(client, "knowledge_text_search", **search, max_lines=1)
    first, second = (len(item["text"]) for item in many["items"][:2])
    budget = await call(client, "knowledge_text_search", **search, max_chars=first + second - 1)

    assert many["count"] > 5 and many["truncated"] is False
    assert one["count"] == 1 and one["truncated"] is True
    assert budget["count"] == 1 and budget["truncated"] is True
    assert budget["items"] == many["items"][:1]


async def test_text_search_cuts_long_lines_around_the_match(client: Client) -> None:
    search = {"knowledge_base": "handbook", "keyword": "expired TLS certificate"}
    default = await call(client, "knowledge_text_search", **search)
    narrow = await call(client, "knowledge_text_search", **search, max_chars_per_item=40)
    wide = await call(client, "knowledge_text_search", **search, max_chars_per_item=2000)
    tiny_budget = await call(client, "knowledge_text_search", **search, max_chars=30)

    assert len(LONG_LINE) > 400
    assert len(default["items"][0]["text"]) <= 180
    assert len(narrow["items"][0]["text"]) <= 40
    for answer in (default, narrow):
        assert "expired TLS certificate" in answer["items"][0]["text"]
    assert wide["items"][0]["text"] == LONG_LINE
    # One line longer than the whole budget is cut to it rather than left out.
    assert "TLS" in tiny_budget["items"][0]["text"]
    assert len(tiny_budget["items"][0]["text"]) <= 30 and tiny_budget["truncated"] is False


async def test_text_search_case_sensitivity(client: Client) -> None:
    search = {"knowledge_base": "handbook", "keyword": "etag"}
    loose = await call(client, "knowledge_text_search", **search)
    strict = await call(client, "knowledge_text_search", **search, case_sensitive=True)
    exact = await call(
        client, "knowledge_text_search", knowledge_base="handbook", keyword="ETag",
        case_sensitive=True,
    )  # fmt: skip

    assert loose["count"] == 2 and strict["count"] == 0 and exact["count"] == 2


async def test_text_search_source_keyword_and_leaving_fields_out(
    client: Client, docs: Path
) -> None:
    search = {"knowledge_base": "handbook", "keyword": "the"}
    caching = await call(client, "knowledge_text_search", **search, source_keyword="CACHING")
    bare = await call(
        client, "knowledge_text_search", **search, include_source=False, include_line=False
    )
    no_line = await call(client, "knowledge_text_search", **search, include_line=False)

    assert caching["count"] > 0
    assert {item["source"] for item in caching["items"]} == {str(docs / "caching.md")}
    assert all(set(item) == {"text"} for item in bare["items"])
    assert all(set(item) == {"source", "text"} for item in no_line["items"])


async def test_text_search_on_a_crawled_page_links_each_line_to_its_section(
    server: SiteServer,
) -> None:
    server.set_page("/guide.html", SECTIONED_PAGE)
    page = server.url("/guide.html")
    with KnowledgeAgentCore(workers=1) as web:
        web.collect_knowledge(page, kb="site", crawl={"max_depth": 0})
        async with Client(create_server(web)) as site:
            found = await call(
                site, "knowledge_text_search", knowledge_base="site", keyword=r"zebra|tapir",
                regex=True,
            )  # fmt: skip
            bare = await call(
                site, "knowledge_text_search", knowledge_base="site", keyword="zebra",
                include_source=False,
            )  # fmt: skip

    tapir, zebra = found["items"]
    assert (tapir["source"], tapir["link"]) == (page, page)
    assert (zebra["source"], zebra["link"]) == (page, f"{page}#install")
    assert zebra["text"] == "Run the zebra installer now." and zebra["line"] > tapir["line"]
    assert set(bare["items"][0]) == {"line", "text"}


async def test_text_search_regex_and_errors(client: Client) -> None:
    regex = await call(
        client, "knowledge_text_search", knowledge_base="handbook", keyword=r"ETag|304 Not",
        regex=True,
    )  # fmt: skip

    assert regex["count"] == 3  # the ETag heading, the ETag line and the 304 line
    assert "invalid regular expression" in await fail(
        client, "knowledge_text_search", knowledge_base="handbook", keyword="(", regex=True
    )
    assert "no knowledge base named 'nope'" in await fail(
        client, "knowledge_text_search", knowledge_base="nope", keyword="x"
    )
    assert "knowledge_base" in await fail(client, "knowledge_text_search", keyword="x")
    assert "unknown argument 'kb'" in await fail(
        client, "knowledge_text_search", knowledge_base="handbook", keyword="x", kb="handbook"
    )


async def test_intro_md_is_the_intro_and_not_a_document(client: Client) -> None:
    found = await call(
        client, "knowledge_text_search", knowledge_base="handbook", keyword="kestrel"
    )
    semantic = await call(
        client, "knowledge_semantic_search", knowledge_base="handbook", query="codename kestrel"
    )

    assert found["count"] == 0
    assert all(not item["source"].endswith("intro.md") for item in semantic["items"])


# -- knowledge_semantic_search ---------------------------------------------------------------


async def test_semantic_search_finds_the_answering_passage(
    client: Client, core: KnowledgeAgentCore, docs: Path
) -> None:
    answer = await call(
        client, "knowledge_semantic_search", knowledge_base="handbook",
        query="how do I roll back a failed deploy",
    )  # fmt: skip

    assert answer["ok"] is True and answer["reranked"] is False and "note" not in answer
    assert answer["knowledge_base"] == "handbook"
    assert answer["query"] == "how do I roll back a failed deploy"
    assert 1 <= answer["count"] == len(answer["items"]) <= 5
    top = answer["items"][0]
    assert set(top) == {"source", "text", "relevance", "chunk_id"}
    assert top["source"] == str(docs / "deploy.md")
    assert "roll back" in top["text"] and len(top["text"]) <= 220
    assert 0 < top["relevance"] <= 1
    # The chunk id reads the whole passage.
    chunk = core.read_chunk(top["chunk_id"]).chunk
    assert top["text"].strip("…") in chunk.content


async def test_semantic_search_top_k_and_min_relevance(client: Client) -> None:
    search = {"knowledge_base": "handbook", "query": "release certificate cache"}
    one = await call(client, "knowledge_semantic_search", **search, top_k=1)
    every = await call(client, "knowledge_semantic_search", **search, top_k=50)
    relevances = sorted({item["relevance"] for item in every["items"]})
    threshold = (relevances[-2] + relevances[-1]) / 2  # between the best two
    sure = await call(client, "knowledge_semantic_search", **search, min_relevance=threshold)

    assert one["count"] == 1 and one["items"] == every["items"][:1]
    # Every passage that matches: both sections of deploy.md and of caching.md.
    assert sorted(Path(item["source"]).name for item in every["items"]) == [
        "caching.md", "caching.md", "deploy.md", "deploy.md", "incidents.txt",
    ]  # fmt: skip
    assert sure["items"] == [item for item in every["items"] if item["relevance"] >= threshold]
    assert 0 < sure["count"] < every["count"]


async def test_semantic_search_source_keyword_filters_before_ranking(
    client: Client, docs: Path
) -> None:
    search = {"knowledge_base": "handbook", "query": "roll back a failed deploy", "top_k": 1}
    best = await call(client, "knowledge_semantic_search", **search)
    scoped = await call(client, "knowledge_semantic_search", **search, source_keyword="CACHING")
    nowhere = await call(client, "knowledge_semantic_search", **search, source_keyword="zzz")

    assert best["items"][0]["source"] == str(docs / "deploy.md")
    # Filtered before ranking: top_k=1 still finds the one document in scope.
    assert [item["source"] for item in scoped["items"]] == [str(docs / "caching.md")]
    assert nowhere["items"] == []


async def test_semantic_search_max_chars_per_item(client: Client) -> None:
    search = {"knowledge_base": "handbook", "query": "expired TLS certificate"}
    narrow = await call(client, "knowledge_semantic_search", **search, max_chars_per_item=60)
    wide = await call(client, "knowledge_semantic_search", **search, max_chars_per_item=4000)

    top = narrow["items"][0]
    assert narrow["truncated"] is True
    assert len(top["text"]) <= 60 and "expired TLS certificate" in top["text"]
    assert wide["truncated"] is False and wide["items"][0]["text"] == LONG_LINE.strip()


async def test_semantic_search_without_a_reranker_says_so(client: Client) -> None:
    search = {"knowledge_base": "handbook", "query": "ETag revalidation"}
    asked = await call(client, "knowledge_semantic_search", **search, enable_rerank=True)
    plain = await call(client, "knowledge_semantic_search", **search)

    assert asked["reranked"] is False and "no reranker is configured" in asked["note"]
    assert asked["items"] == plain["items"]
    assert all("rerank_score" not in item for item in asked["items"])


async def test_semantic_search_argument_errors(client: Client) -> None:
    search = {"knowledge_base": "handbook", "query": "deploy"}
    assert "no knowledge base named 'nope'" in await fail(
        client, "knowledge_semantic_search", knowledge_base="nope", query="deploy"
    )
    assert "query" in await fail(client, "knowledge_semantic_search", knowledge_base="handbook")
    assert "non-empty" in await fail(
        client, "knowledge_semantic_search", knowledge_base="handbook", query="   "
    )
    assert "top_k" in await fail(client, "knowledge_semantic_search", **search, top_k=0)
    assert "rerank_top_k" in await fail(
        client, "knowledge_semantic_search", **search, rerank_top_k=0
    )
    assert "min_relevance" in await fail(
        client, "knowledge_semantic_search", **search, min_relevance=1.5
    )
    assert "unknown argument 'limit'" in await fail(
        client, "knowledge_semantic_search", **search, limit=3
    )


# -- rerank ----------------------------------------------------------------------------------


class FakeReranker:
    """Scores a text by how many times it says ``word``; remembers its calls."""

    def __init__(self, *, broken: bool = False, word: str = "kiwi") -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.broken = broken
        self.word = word

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        if self.broken:
            raise ConnectionError("rerank service unreachable")
        return [text.count(self.word) / 10 for text in texts]


FRUIT = [
    ("Fruit basket one", "Fruit basket notes: apples and pears for the fruit stand."),
    ("Fruit basket two", "Fruit basket notes: pears, plums and one kiwi in the fruit stand."),
    ("Fruit basket three", "Fruit basket notes: apples, kiwi, kiwi and figs at the stand."),
    ("Fruit basket four", "Fruit basket notes: kiwi kiwi kiwi, the fruit stand's favourite."),
    ("Fruit basket five", "Fruit basket notes: grapes only; the fruit stand ran out."),
    ("Vegetables", "Carrots and leeks at the market, next to the fruit basket stand."),
]


def fruit_core(reranker: FakeReranker | None) -> KnowledgeAgentCore:
    core = KnowledgeAgentCore(reranker=reranker)
    for title, text in FRUIT:
        core.add_text(text, title=title, kb="fruit")
    return core


async def semantic(core: KnowledgeAgentCore, **arguments: Any) -> dict[str, Any]:
    async with Client(create_server(core)) as client:
        return await call(client, "knowledge_semantic_search", knowledge_base="fruit", **arguments)


async def test_a_rerank_reorders_and_keeps_rerank_top_k() -> None:
    reranker = FakeReranker()
    with fruit_core(reranker) as core:
        recalled = await semantic(core, query="fruit basket stand", enable_rerank=False)
        reranked = await semantic(core, query="fruit basket stand")
        hidden = await semantic(core, query="fruit basket stand", include_rerank_score=False)
        two = await semantic(core, query="fruit basket stand", top_k=4, rerank_top_k=2)

    assert recalled["reranked"] is False and recalled["count"] == 5
    assert len(reranker.calls) == 3  # not for enable_rerank=False
    query, texts = reranker.calls[0]
    assert query == "fruit basket stand" and len(texts) == 5  # the top_k recalled
    # Reranked by the fake's score (kiwi count); 3 kept by default.
    assert reranked["reranked"] is True and reranked["count"] == 3 and "note" not in reranked
    assert [item["source"] for item in reranked["items"]] == [
        "Fruit basket four",
        "Fruit basket three",
        "Fruit basket two",
    ]
    assert [item["rerank_score"] for item in reranked["items"]] == [0.3, 0.2, 0.1]
    assert all(0 < item["relevance"] <= 1 for item in reranked["items"])
    assert [item["source"] for item in hidden["items"]] == [
        item["source"] for item in reranked["items"]
    ]
    assert all("rerank_score" not in item for item in hidden["items"])
    assert two["count"] == 2 and len(reranker.calls[-1][1]) == 4


async def test_rerank_top_k_not_below_top_k_is_downgraded_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with fruit_core(FakeReranker()) as core, caplog.at_level(logging.WARNING):
        lowered = await semantic(core, query="fruit basket", top_k=3, rerank_top_k=3)
        default_lowered = await semantic(core, query="fruit basket", top_k=2)
        off = await semantic(core, query="fruit basket", top_k=1, enable_rerank=True)

    assert lowered["reranked"] is True and lowered["count"] == 2
    assert "rerank_top_k 3 must be below top_k 3: lowered to 2" in lowered["note"]
    assert default_lowered["count"] == 1
    assert "rerank_top_k 3 (the default) must be below top_k 2" in default_lowered["note"]
    assert off["reranked"] is False and off["count"] == 1
    assert "rerank was turned off" in off["note"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("must be below top_k" in message for message in warnings) == 3


async def test_a_failing_reranker_leaves_the_recall_order() -> None:
    with fruit_core(FakeReranker(broken=True)) as core:
        answer = await semantic(core, query="fruit basket stand")
    with fruit_core(None) as core:
        plain = await semantic(core, query="fruit basket stand")

    def shown(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(item["source"], item["text"]) for item in items]

    assert answer["reranked"] is False and "reranker failed" in answer["note"]
    assert shown(answer["items"]) == shown(plain["items"])


async def test_deduplicate_drops_a_repeated_source_and_text() -> None:
    with fruit_core(None) as core:
        for _ in range(2):
            core.add_text("Mango season starts in May.", title="Mango", kb="fruit")
        once = await semantic(core, query="mango season")
        twice = await semantic(core, query="mango season", deduplicate=False)

    assert [item["source"] for item in once["items"]].count("Mango") == 1
    assert [item["source"] for item in twice["items"]].count("Mango") == 2


async def test_source_keyword_matches_the_title_of_text_without_a_path() -> None:
    with fruit_core(None) as core:
        answer = await semantic(core, query="fruit stand", source_keyword="BASKET F")

    assert sorted(item["source"] for item in answer["items"]) == [
        "Fruit basket five",
        "Fruit basket four",
    ]


@pytest.mark.parametrize(
    ("top_k", "enable", "keep", "available", "expected"),
    [
        (5, None, None, True, (True, 3, False)),  # the defaults
        (5, None, None, False, (False, 5, False)),  # no reranker, none asked for: no note
        (5, True, None, False, (False, 5, True)),  # asked for, none configured: a note
        (5, None, 4, False, (False, 5, True)),
        (5, False, 9, True, (False, 5, False)),  # turned off: rerank_top_k is moot
        (5, True, 4, True, (True, 4, False)),
        (5, True, 5, True, (True, 4, True)),  # downgraded
        (4, None, None, True, (True, 3, False)),
        (3, None, None, True, (True, 2, True)),
        (1, True, None, True, (False, 1, True)),  # nothing to rerank into
    ],
)
def test_plan_rerank(
    top_k: int,
    enable: bool | None,
    keep: int | None,
    available: bool,
    expected: tuple[bool, int, bool],
) -> None:
    plan = plan_rerank(top_k=top_k, enable_rerank=enable, rerank_top_k=keep, available=available)
    assert (plan.enabled, plan.keep, bool(plan.notes)) == expected


# -- passages, not documents -----------------------------------------------------------------

KEYS = "how do I rotate the encryption keys"
KEY_SECTIONS = [
    (
        "Rotating the encryption keys",
        "Rotate the encryption keys every quarter. To rotate the encryption keys, create a new "
        "key version in the vault, re-encrypt the data keys with it, and retire the old "
        "encryption key version after a week. " * 3,
    ),
    (
        "After a security incident",
        "After a security incident, rotate every encryption key the attacker could have read, "
        "even when the quarter is not over. Rotation of the keys comes before the postmortem. " * 3,
    ),
    (
        "Backups",
        "Backups are encrypted with their own encryption key; when you rotate the keys, keep "
        "the old key until the last backup made with it expires, or it cannot be restored. " * 3,
    ),
]


def filler(topic: str, words: Sequence[str]) -> str:
    """A paragraph about ``topic`` that shares no word with the tests' queries."""
    return " ".join(f"The {topic} {word} is described in the {topic} binder." for word in words)


OTHER_SECTIONS = [
    ("Office hours", filler("office", ["schedule", "calendar", "reception", "visitor", "lunch"])),
    ("Expense reports", filler("expense", ["receipt", "mileage", "invoice", "hotel", "taxi"])),
    ("Coffee machine", filler("coffee", ["grinder", "filter", "milk", "descaling", "cups"])),
    ("Holidays", filler("holiday", ["request", "carryover", "summer", "winter", "parental"])),
]
# The sections about the question, each between two about something else.
HANDBOOK = "# Operations handbook\n\n" + "".join(
    f"## {heading}\n\n{text.strip()}\n\n"
    for pair in zip(OTHER_SECTIONS, [*KEY_SECTIONS, ("", "")], strict=True)
    for heading, text in pair
    if heading
)
VAULT = (
    "# Vault\n\nRotate the encryption keys of an application with vault write -f "
    "transit/keys/app/rotate; the old key versions still decrypt what they encrypted.\n"
)
RESTORE = "restore a database backup"
PARAGRAPH = (
    "To restore a database backup, stop the application servers first, download the newest "
    "snapshot archive from the object store, verify its checksum against the manifest, load it "
    "with the restore script into a fresh replica, replay the write-ahead log up to the moment "
    "before the failure, compare row counts with yesterday's report, then promote the replica "
    "and start the application servers again. "
) * 2
# One word changed: near-identical to PARAGRAPH.
ALMOST = PARAGRAPH.replace("yesterday's", "last week's")
# The same paragraph twice and once almost, apart: each is a chunk of its own.
RUNBOOK = "\n\n".join(
    [
        PARAGRAPH.strip(),
        filler("office", ["schedule", "calendar", "reception", "visitor", "lunch", "parking"] * 3),
        PARAGRAPH.strip(),
        filler("coffee", ["grinder", "filter", "milk", "descaling", "cups", "beans"] * 3),
        ALMOST.strip(),
    ]
)


def ops_core(
    *documents: tuple[str, str], reranker: FakeReranker | None = None
) -> KnowledgeAgentCore:
    """An in-memory core whose knowledge base "ops" holds these (source, text) documents."""
    core = KnowledgeAgentCore(reranker=reranker)
    for source, text in documents:
        core.add_text(text, title=Path(source).stem, source_uri=source, kb="ops")
    return core


@pytest.fixture(params=["mcp", "direct"])
def via(request: pytest.FixtureRequest) -> str:
    return request.param


async def ask(core: KnowledgeAgentCore, via: str, **arguments: Any) -> dict[str, Any]:
    """knowledge_semantic_search on "ops", through an in-memory MCP client or called directly."""
    arguments = {"knowledge_base": "ops", **arguments}
    if via == "direct":
        return knowledge_semantic_search(core, **arguments)
    async with Client(create_server(core)) as client:
        return await call(client, "knowledge_semantic_search", **arguments)


def matched_chunks(core: KnowledgeAgentCore, query: str) -> dict[str, list[tuple[str, float]]]:
    """Per source, the engine's matched chunks for ``query`` in "ops": id and score, in the
    engine's order."""
    results = core.search(
        query, kb="ops", limit=50, context_window=0, options={"max_chunks_per_item": 50}
    )
    return {
        result.item.source_uri or "": [(c.chunk_id, c.score) for c in result.matched_chunks]
        for result in results
    }


async def test_top_k_counts_the_passages_of_one_long_document(via: str) -> None:
    with ops_core(("/kb/handbook.md", HANDBOOK)) as core:
        three = await ask(core, via, query=KEYS, top_k=3)
        one = await ask(core, via, query=KEYS, top_k=1)
        five = await ask(core, via, query=KEYS, top_k=5)
        engine = matched_chunks(core, KEYS)
        headings = {
            item["chunk_id"]: core.read_chunk(item["chunk_id"]).chunk.heading
            for item in three["items"]
        }

    assert three["count"] == 3
    assert {item["source"] for item in three["items"]} == {"/kb/handbook.md"}
    ids = [item["chunk_id"] for item in three["items"]]
    # The three sections about the question, not those between them; the best first.
    assert {headings[chunk_id].split(" > ")[-1] for chunk_id in ids} == {
        heading for heading, _ in KEY_SECTIONS
    }
    assert headings[ids[0]].endswith("Rotating the encryption keys")
    assert ids == [chunk_id for chunk_id, _ in engine["/kb/handbook.md"]]
    assert one["items"] == three["items"][:1]
    assert five["items"] == three["items"]  # no other section matches


async def test_top_k_counts_passages_across_documents(via: str) -> None:
    with ops_core(("/kb/handbook.md", HANDBOOK), ("/kb/vault.md", VAULT)) as core:
        answers = {top_k: await ask(core, via, query=KEYS, top_k=top_k) for top_k in range(1, 6)}
        engine = matched_chunks(core, KEYS)

    every = answers[5]["items"]
    sources = [item["source"] for item in every]
    assert sorted(sources) == ["/kb/handbook.md"] * 3 + ["/kb/vault.md"]
    # The handbook's passages in the engine's order; the vault page's among them by score.
    handbook = engine["/kb/handbook.md"]
    assert [item["chunk_id"] for item in every if item["source"] == "/kb/handbook.md"] == [
        chunk_id for chunk_id, _ in handbook
    ]
    ((_, vault),) = engine["/kb/vault.md"]
    place = sum(score > vault for _, score in handbook)
    assert 0 < place < 3  # the documents interleave
    assert sources.index("/kb/vault.md") == place
    for top_k in range(1, 5):
        assert answers[top_k]["count"] == top_k and answers[top_k]["items"] == every[:top_k]


async def test_a_rerank_reorders_the_passages_and_keeps_rerank_top_k(via: str) -> None:
    reranker = FakeReranker(word="backup")
    with ops_core(("/kb/handbook.md", HANDBOOK), reranker=reranker) as core:
        search = {"query": KEYS, "top_k": 3, "max_chars_per_item": 4000}
        recalled = await ask(core, via, **search, enable_rerank=False)
        reranked = await ask(core, via, **search, rerank_top_k=2)
        backups = next(
            item["chunk_id"]
            for item in recalled["items"]
            if core.read_chunk(item["chunk_id"]).chunk.heading.endswith("Backups")
        )

    ((_, texts),) = reranker.calls  # the three passages recalled, in recall order
    assert texts == [item["text"] for item in recalled["items"]]
    assert reranked["reranked"] is True and reranked["count"] == 2
    assert reranked["items"][0]["chunk_id"] == backups  # the one that says "backup"
    assert reranked["items"][0]["rerank_score"] > reranked["items"][1]["rerank_score"]
    assert {item["source"] for item in reranked["items"]} == {"/kb/handbook.md"}


async def test_deduplicate_drops_repeated_and_near_identical_passages_of_a_source(
    via: str,
) -> None:
    documents = [("/kb/runbook.txt", RUNBOOK), ("/kb/copy.txt", ALMOST)]
    search = {"query": RESTORE, "top_k": 10, "max_chars_per_item": 4000}
    with ops_core(*documents) as core:
        once = await ask(core, via, **search)
        every = await ask(core, via, **search, deduplicate=False)

    shown = [(item["source"], item["text"]) for item in every["items"]]
    assert sorted(shown) == sorted(
        [("/kb/runbook.txt", PARAGRAPH.strip())] * 2
        + [("/kb/runbook.txt", ALMOST.strip()), ("/kb/copy.txt", ALMOST.strip())]
    )
    # One passage of each source: the repeat and the near-identical paragraph of the
    # runbook go; the copy's paragraph is another source's and stays.
    kept = [(item["source"], item["text"]) for item in once["items"]]
    first = next(entry for entry in shown if entry[0] == "/kb/runbook.txt")
    assert kept == sorted([first, ("/kb/copy.txt", ALMOST.strip())], key=shown.index)


async def test_min_relevance_leaves_out_the_passages_below_it(via: str) -> None:
    documents = [("/kb/handbook.md", HANDBOOK), ("/kb/vault.md", VAULT)]
    search = {"query": "rotate the encryption key of a database backup", "top_k": 50}
    with ops_core(*documents, ("/kb/runbook.txt", RUNBOOK)) as core:
        every = await ask(core, via, **search)
        relevances = sorted({item["relevance"] for item in every["items"]})
        threshold = (relevances[0] + relevances[1]) / 2  # above the least relevant
        sure = await ask(core, via, **search, min_relevance=threshold)

    assert sure["items"] == [item for item in every["items"] if item["relevance"] >= threshold]
    assert 0 < sure["count"] < every["count"]


async def test_each_passage_reports_and_is_filtered_by_its_own_relevance(
    via: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = {"Rotating the encryption keys": 0.6, "After a security incident": 0.4, "Backups": 0.2}
    with ops_core(("/kb/handbook.md", HANDBOOK)) as core:
        search = core.search

        def confident_per_chunk(
            *args: Any, min_confidence: float | None = None, **kwargs: Any
        ) -> list[SearchResult]:
            """The search, with each matched chunk's own confidence in its explanation and
            each document judged by its first chunk's."""
            results = search(*args, **kwargs)
            for result in results:
                for chunk in result.matched_chunks:
                    assert chunk.explanation is not None
                    chunk.explanation.details["confidence"] = own[chunk.heading.split(" > ")[-1]]
                result.confidence = passage_relevance(result.matched_chunks[0], result)
            return [r for r in results if r.confidence >= (min_confidence or 0)]

        monkeypatch.setattr(core, "search", confident_per_chunk)
        every = await ask(core, via, query=KEYS, top_k=3)
        sure = await ask(core, via, query=KEYS, top_k=3, min_relevance=0.3)

    assert sorted(item["relevance"] for item in every["items"]) == [0.2, 0.4, 0.6]
    assert sure["items"] == [item for item in every["items"] if item["relevance"] >= 0.3]
    assert sure["count"] == 2


# -- the passages, directly ------------------------------------------------------------------


def matched(chunk_id: str, score: float, confidence: object = None) -> MatchedChunk:
    details = {} if confidence is None else {"confidence": confidence}
    return MatchedChunk(
        chunk_id, f"text of {chunk_id}", score=score, explanation=ScoreExplanation(details=details)
    )


def result(
    item_id: str, confidence: float, *chunks: MatchedChunk, score: float = 0.0
) -> SearchResult:
    item = ItemSummary(id=item_id, title=item_id.title(), source_uri=f"/kb/{item_id}.md")
    best = max((chunk.score for chunk in chunks), default=score)
    return SearchResult(item, best, confidence=confidence, matched_chunks=list(chunks))


def test_a_passage_has_its_chunks_confidence_else_its_documents() -> None:
    found = result("a", 0.3, matched("own", 2.0, 0.7), matched("none", 1.0))
    for broken in (True, float("nan"), "0.9"):
        found.matched_chunks.append(matched(f"broken {broken}", 0.5, broken))

    assert [passage_relevance(chunk, found) for chunk in found.matched_chunks] == [
        0.7, 0.3, 0.3, 0.3, 0.3,
    ]  # fmt: skip


def test_passages_are_merged_by_score_each_documents_in_the_engines_order() -> None:
    # The engine put the first document's weaker chunk first: it keeps that place, with the
    # document's best score.
    first = result("first", 0.5, matched("a1", 0.5, 0.8), matched("a2", 0.9))
    second = result("second", 0.4, matched("b1", 0.7), matched("b2", 0.5))
    whole = result("whole", 0.2, score=0.6)  # the item-level search: no matched chunks

    passages = ranked_passages([first, second, whole], {"whole": " all of it\n"}.__getitem__)

    assert [(p.chunk_id, p.rank_score) for p in passages] == [
        ("a1", 0.9), ("b1", 0.7), (None, 0.6), ("a2", 0.5), ("b2", 0.5),
    ]  # fmt: skip
    assert passages[0] == FoundPassage("/kb/first.md", "text of a1", 0.8, 0.9, "a1")
    assert passages[2] == FoundPassage("/kb/whole.md", "all of it", 0.2, 0.6)
    assert [p.relevance for p in passages[1:]] == [0.4, 0.2, 0.5, 0.4]


def test_near_identical_is_a_jaccard_of_at_least_nine_tenths() -> None:
    words = frozenset(f"w{n}" for n in range(19))
    assert near_identical(words | {"x"}, words | {"y"})  # 19 of 21 shared: 0.905
    assert near_identical(words - {"w0"} | {"x"}, words - {"w0"} | {"y"})  # 18 of 20: 0.9
    assert not near_identical(words - {"w0", "w1"} | {"x"}, words - {"w0", "w1"} | {"y"})
    assert not near_identical(frozenset(), frozenset())


passage_lists = st.lists(
    st.builds(
        FoundPassage,
        source=st.sampled_from(["/kb/a.md", "/kb/b.md"]),
        text=st.lists(st.sampled_from("abcdefghijkl"), max_size=12).map(" ".join),
        relevance=st.just(0.5),
        rank_score=st.just(1.0),
    ),
    max_size=12,
)


@given(passage_lists)
@settings(max_examples=300, deadline=None)
def test_deduplicated_drops_exactly_the_repeats(passages: list[FoundPassage]) -> None:
    kept = list(deduplicated(passages, str.split))

    def same(first: FoundPassage, second: FoundPassage) -> bool:
        return first.source == second.source and (
            first.text == second.text
            or near_identical(frozenset(first.text.split()), frozenset(second.text.split()))
        )

    # In order, no two alike, and each passage left out repeats one kept before it.
    positions = [next(i for i, p in enumerate(passages) if p is k) for k in kept]
    assert positions == sorted(positions)
    assert not any(same(a, b) for n, a in enumerate(kept) for b in kept[:n])
    for n, passage in enumerate(passages):
        if n not in positions:
            assert any(same(passage, passages[i]) for i in positions if i < n)
