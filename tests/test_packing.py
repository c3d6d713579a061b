"""Packing results into a token budget: adjacent chunks of a document merged into one exact
passage, the best first, never over the budget — from the API on both backends, and from
``search --budget``."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.cli import cli
from knowledge_agent.core.packing import PackedContext, pack_results
from knowledge_agent.errors import QueryError
from knowledge_agent.models import KnowledgeItem, MatchedChunk, SearchResult
from knowledge_agent.tokens import estimate_tokens

WORDS = ["keys", "rotate", "deploy", "重置", "密码", "cache", "the", "quarter", "x" * 12]


@st.composite
def documents(draw: st.DrawFn, number: int) -> SearchResult:
    """A result over a chunked random document: some chunks matched, their neighbours
    within a window as context."""
    paragraphs = draw(
        st.lists(
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=25).map(" ".join),
            min_size=1,
            max_size=12,
        )
    )
    content = "\n\n".join(paragraphs)
    overlap = draw(st.sampled_from([0.0, 0.2]))
    chunks = ContentChunker(ChunkConfig(20, 90, overlap)).chunk(content)
    item = KnowledgeItem(title=f"doc {number}", content=content, source_uri=f"/kb/{number}.md")
    picked = draw(st.sets(st.integers(0, len(chunks) - 1), min_size=1, max_size=len(chunks)))
    window = draw(st.integers(0, 2))
    matched = [
        MatchedChunk.from_chunk(chunks[i], draw(st.floats(0, 10, allow_nan=False)))
        for i in sorted(picked)
    ]
    matched.sort(key=lambda chunk: -chunk.score)
    around = {
        j for i in picked for j in range(i - window, i + window + 1) if 0 <= j < len(chunks)
    } - picked
    context = [MatchedChunk.from_chunk(chunks[j]) for j in sorted(around)]
    score = matched[0].score
    return SearchResult(item, score, matched_chunks=matched, context_chunks=context)


results_lists = st.integers(1, 3).flatmap(
    lambda count: st.tuples(*(documents(number) for number in range(count))).map(list)
)


def _indexes(packed: PackedContext, results: list[SearchResult]) -> dict[str, list[set[int]]]:
    """Each document's passages as sets of chunk indexes."""
    index_of = {
        chunk.chunk_id: chunk.chunk_index
        for result in results
        for chunk in result.matched_chunks + result.context_chunks
    }
    found: dict[str, list[set[int]]] = {}
    for passage in packed.passages:
        found.setdefault(passage.item_id, []).append({index_of[c] for c in passage.chunk_ids})
    return found


@settings(max_examples=150)
@given(results=results_lists, budget=st.integers(1, 3000))
def test_packed_passages_are_exact_within_budget_and_never_adjacent(
    results: list[SearchResult], budget: int
) -> None:
    packed = pack_results(results, budget)
    texts = {result.item.id: result.item.content for result in results}
    assert packed.tokens == sum(p.tokens for p in packed.passages) <= budget
    assert estimate_tokens(packed.text()) <= budget
    assert [p.score for p in packed.passages if not p.truncated] == sorted(
        (p.score for p in packed.passages if not p.truncated), reverse=True
    )
    for passage in packed.passages:
        content = texts[passage.item_id]
        assert content[passage.start_position : passage.end_position] == passage.text
        assert passage.matched_chunk_ids and set(passage.matched_chunk_ids) <= set(
            passage.chunk_ids
        )
    for runs in _indexes(packed, results).values():
        for run in runs:
            assert run == set(range(min(run), max(run) + 1))  # consecutive chunks only
        for first in runs:
            for second in runs:
                if first is not second:  # two passages of a document: a chunk apart at least
                    assert min(abs(a - b) for a in first for b in second) >= 2
    if packed.passages:
        assert not any(p.truncated for p in packed.passages[1:])
    else:
        assert packed.left_out > 0


@settings(max_examples=100)
@given(results=results_lists)
def test_with_room_every_chunk_is_packed_once_and_neighbours_merged(
    results: list[SearchResult],
) -> None:
    packed = pack_results(results, 10**7)
    assert packed.left_out == 0 and not any(p.truncated for p in packed.passages)
    for result in results:
        chunks = result.matched_chunks + result.context_chunks
        indexes = sorted(chunk.chunk_index for chunk in chunks)
        runs = _indexes(packed, results)[result.item.id]
        assert sorted(i for run in runs for i in run) == indexes
        # Runs are as long as they can be: as many passages as gaps in the indexes, plus one.
        assert len(runs) == 1 + sum(b - a > 1 for a, b in itertools.pairwise(indexes))


def test_a_budget_is_a_positive_integer() -> None:
    for budget in (0, -5, 1.5, "100", True, None):
        with pytest.raises(QueryError, match="budget must be an integer >= 1"):
            pack_results([], budget)  # type: ignore[arg-type]
    assert pack_results([], 10).passages == []


# -- on every backend -------------------------------------------------------------------------

GUIDE = (
    "# Deploy guide\n\n"
    + "\n\n".join(
        f"## Step {n}\n\nStep {n} of the release: check the dashboards, then continue."
        for n in range(12)
    )
    + "\n\n## Rolling back\n\nRoll back a failed deploy by pointing the current symlink back.\n\n"
    + ("## After\n\nWatch the error rate for fifteen minutes after a rollback.\n")
)


@pytest.fixture
def open_core(open_core: Callable[..., KnowledgeAgentCore]) -> Callable[[], KnowledgeAgentCore]:
    """Knowledge bases of small chunks, on every backend in turn."""
    return functools.partial(open_core, chunk_config={"min_chunk_size": 30, "max_chunk_size": 120})


def test_a_match_and_its_neighbours_are_one_passage_of_the_document(open_core: Any) -> None:
    core = open_core()
    item = core.add_text(GUIDE, title="Deploy guide", source_uri="/docs/deploy.md")
    results = core.search("roll back a failed deploy symlink", limit=3, context_window=1)
    packed = core.pack(results, budget=10_000)
    best = packed.passages[0]
    assert "Roll back a failed deploy" in best.text and "## Rolling back" in best.text
    assert (
        len(best.chunk_ids) >= 2
        and best.matched_chunk_ids[0] == results[0].matched_chunks[0].chunk_id
    )
    assert GUIDE[best.start_position : best.end_position] == best.text
    assert best.location == f"/docs/deploy.md:{best.start_line}-{best.end_line}"
    assert best.item_id == item.id
    assert packed.text().startswith(f"[1] {best.location} · ")


def test_a_document_deleted_before_packing_gives_its_chunks_apart(open_core: Any) -> None:
    core = open_core()
    item = core.add_text(GUIDE, title="Deploy guide")
    query = "roll back a failed deploy symlink"
    merged = core.pack(core.search(query, limit=3, context_window=1), budget=10_000)
    assert any(len(passage.chunk_ids) > 1 for passage in merged.passages)
    results = core.search(query, limit=3, context_window=1)
    core.delete_knowledge_item(item.id)
    apart = core.pack(results, budget=10_000)  # the text between chunks is gone: no merging
    assert apart.passages and all(len(p.chunk_ids) == 1 for p in apart.passages)
    shown = {c.chunk_id: c.content for r in results for c in r.matched_chunks}
    assert all(p.text == shown[p.chunk_ids[0]] for p in apart.passages)


def test_a_small_budget_cuts_the_best_passage(open_core: Any) -> None:
    core = open_core()
    core.add_text(GUIDE, title="Deploy guide", source_uri="/docs/deploy.md")
    results = core.search("roll back a failed deploy symlink", context_window=1)
    packed = core.pack(results, budget=30)
    (passage,) = packed.passages
    assert passage.truncated and packed.tokens <= 30 and packed.left_out > 0
    assert GUIDE[passage.start_position : passage.end_position] == passage.text
    assert core.pack(results, budget=3).passages == []  # not even its location line fits


def test_search_budget_prints_the_packed_context(tmp_path: Path) -> None:
    (tmp_path / "deploy.md").write_text(GUIDE, encoding="utf-8")
    data = ["--data-dir", str(tmp_path / "kb")]
    runner = CliRunner()
    assert runner.invoke(cli, [*data, "add", str(tmp_path / "deploy.md")]).exit_code == 0
    query = ["search", "roll back a failed deploy symlink"]
    shown = runner.invoke(cli, [*data, *query, "--budget", "400", "--json"])
    assert shown.exit_code == 0, shown.output
    answer = json.loads(shown.output)
    assert answer["budget"] == 400 and 0 < answer["tokens"] <= 400
    assert "Roll back a failed deploy" in answer["passages"][0]["text"]
    text = runner.invoke(cli, [*data, *query, "--budget", "400"])
    assert text.exit_code == 0 and text.stdout.startswith("[1] ")
    assert estimate_tokens(text.stdout.rstrip("\n")) <= 400
    assert "of 400 tokens" in text.stderr
    refused = runner.invoke(cli, [*data, *query, "--budget", "400", "--format", "csv"])
    assert refused.exit_code == 2 and "--budget works with the text and --json" in refused.output
