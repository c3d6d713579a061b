"""Explanations per chunk, evidence references, boosts, MMR and reranking."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import ConfigError, NotFoundError, QueryError
from knowledge_agent.models.evidence import EvidenceRef, chunk_hash, evidence_ref
from knowledge_agent.search.ranking.boosts import age_days, cosine, mmr_order, time_boost

ROTATION = "Rotate the signing keys every quarter, and after any incident that exposed them."


def days_ago(days: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()


@pytest.fixture
def core() -> Iterator[KnowledgeAgentCore]:
    with KnowledgeAgentCore() as knowledge_base:
        knowledge_base.add_text(
            "# Keys\n\n" + ROTATION + "\n\n## Storage\n\nKeys live in the vault, never on disks.",
            title="Key policy",
            source_uri="docs/keys.md",
        )
        knowledge_base.add_text(
            "# Certificates\n\nRenew certificates a month before they expire.",
            title="Certificates",
            source_uri="docs/certs.md",
        )
        yield knowledge_base


def test_every_matched_chunk_explains_itself_and_cites_its_text(core) -> None:
    result = core.search("rotate signing keys vault", limit=1)[0]
    assert result.matched_chunks and result.explanation is result.matched_chunks[0].explanation
    for chunk in result.matched_chunks:
        explained = chunk.explanation
        assert explained is not None
        assert chunk.score == pytest.approx(explained.final_score)
        assert explained.path == "docs/keys.md" and explained.lines.startswith("L")
        assert set(explained.matched_terms) == set(explained.term_frequencies)
        ref = EvidenceRef.parse(chunk.evidence_ref)
        assert ref.chunk_id == chunk.chunk_id and ref.path == "docs/keys.md"
        assert ref.matches(chunk.content) and not ref.matches(chunk.content + " changed")
        assert f"#L{ref.start_line}-L{ref.end_line}" in chunk.evidence_ref
    assert all(context.evidence_ref for context in result.context_chunks)
    assert all(context.explanation is None for context in result.context_chunks)


def test_the_default_document_boosts_follow_the_doc_type() -> None:
    with KnowledgeAgentCore() as core:
        for doc_type in ("adr", "index", ""):
            core.add_text(ROTATION, title=f"{doc_type or 'plain'}", doc_type=doc_type)
        results = core.search("rotate signing keys")
        assert [r.item.title for r in results] == ["adr", "plain", "index"]
        boosts = {r.item.title: r.explanation.document_boost for r in results}
        assert boosts == {"adr": 1.5, "plain": 1.0, "index": 0.3}
        off = core.search("rotate signing keys", options={"doc_type_weights": {}})
        assert {r.explanation.document_boost for r in off} == {1.0}


def test_recency_boost_and_temporal_decay_per_query(core) -> None:
    with KnowledgeAgentCore() as fresh:
        fresh.add_text(ROTATION, title="old", metadata={"modified_at": days_ago(300)})
        fresh.add_text(ROTATION, title="new", metadata={"modified_at": days_ago(3)})
        plain = fresh.search("rotate signing keys")
        assert {r.explanation.recency_boost for r in plain} == {1.0}  # off by default
        recent = fresh.search("rotate signing keys", options={"recency_weight": 0.5})
        assert [r.item.title for r in recent] == ["new", "old"]
        assert recent[0].explanation.recency_boost == pytest.approx(
            1 + 0.5 * math.exp(-3 / 30), rel=1e-3
        )
        decayed = fresh.search("rotate signing keys", options={"decay_half_life": 100})
        old = next(r for r in decayed if r.item.title == "old")
        assert old.explanation.recency_boost == pytest.approx(0.5**3, rel=1e-3)
        assert old.relevance_score == pytest.approx(old.explanation.final_score)


def test_mmr_pushes_a_near_duplicate_below_a_distinct_result() -> None:
    with KnowledgeAgentCore() as core:
        core.add_text(ROTATION + " Keys rotate quarterly.", title="a")
        core.add_text(ROTATION + " Keys rotate quarterly!", title="a copy")
        core.add_text("Rotate keys when staff leave; the signing service re-reads them.", title="b")
        plain = [r.item.title for r in core.search("rotate signing keys quarterly")]
        assert plain[:2] == ["a", "a copy"]
        diverse = core.search("rotate signing keys quarterly", options={"mmr_lambda": 0.5})
        assert [r.item.title for r in diverse][:2] == ["a", "b"]


class Reversing:
    """A reranker that prefers what the search ranked last."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.seen = list(texts)
        return [float(index) for index in range(len(texts))]


class Broken:
    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        raise RuntimeError("service down")


def rerank_core(reranker: object) -> KnowledgeAgentCore:
    core = KnowledgeAgentCore(reranker=reranker)  # type: ignore[arg-type]
    for number, text in enumerate(
        [ROTATION, "Rotate keys yearly.", "Signing keys are rotated by the platform team."]
    ):
        core.add_text(text, title=f"doc {number}")
    return core


def test_a_reranker_reorders_and_every_step_is_explained() -> None:
    reranker = Reversing()
    with rerank_core(reranker) as core:
        before = [r.item.title for r in core.search("rotate signing keys")]
        after = core.search("rotate signing keys", rerank=True)
        assert [r.item.title for r in after] == before[::-1]
        assert len(reranker.seen) == len(before)
        for rank, result in enumerate(after, start=1):
            explained = result.explanation
            assert explained.rank_after_rerank == rank
            assert explained.rank_before_rerank == len(before) + 1 - rank
            assert result.relevance_score == pytest.approx(explained.final_score)
        assert after[0].explanation.rerank_delta > 0 and after[-1].explanation.rerank_delta == 0


def test_a_failing_reranker_leaves_the_order_and_no_reranker_is_an_error() -> None:
    with rerank_core(Broken()) as core:
        plain = [r.item.title for r in core.search("rotate signing keys")]
        asked = core.search("rotate signing keys", rerank=True)
        assert [r.item.title for r in asked] == plain
        # The result says the rerank did not happen, and why.
        for result in asked:
            assert result.explanation is not None
            assert result.explanation.details["rerank_error"] == "reranking failed: service down"
            assert result.explanation.rank_after_rerank is None
    with KnowledgeAgentCore() as core, pytest.raises(ConfigError, match="reranker"):
        core.search("x", rerank=True)


def test_per_query_weights_and_use_vector(core) -> None:
    keyword_only = core.search("rotate signing keys", use_vector=False)[0].explanation
    assert keyword_only.semantic_score == 0.0 and keyword_only.details["mode"] == "keyword"
    tilted = core.search("rotate signing keys zeppelin", weights={"fts": 1, "vector": 3})
    assert tilted[0].explanation.semantic_score > 0
    with pytest.raises(QueryError, match="unknown engine"):
        core.search("x", weights={"dense_sparse": 1})
    with pytest.raises(ConfigError, match="options"):
        core.search("x", options={"no_such_setting": 1})


def test_age_time_boost_and_similarity_helpers() -> None:
    now = datetime(2026, 1, 31, tzinfo=timezone.utc)
    assert age_days("2026-01-01T00:00:00", now) == pytest.approx(30)
    assert age_days("not a date", now) == 0 and age_days(None, now) == 0
    assert age_days("2027-01-01T00:00:00+00:00", now) == 0  # the future is now
    assert time_boost(30, 0.0, 30, 0.0) == 1.0
    assert time_boost(0, 0.5, 30, 0.0) == pytest.approx(1.5)
    assert time_boost(60, 0.0, 30, 60) == pytest.approx(0.5)


counts = st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 5), max_size=6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 10), counts), min_size=1, max_size=8), st.floats(0.01, 1))
def test_mmr_returns_each_index_once_and_keeps_the_best_first(entries, lam) -> None:
    from collections import Counter

    scores = [score for score, _ in entries]
    vectors = [Counter(terms) for _, terms in entries]
    order = mmr_order(scores, vectors, lam, len(entries))
    assert sorted(order) == list(range(len(entries)))
    if lam > 0:
        assert scores[order[0]] == max(scores)
    assert all(0 <= cosine(a, b) <= 1 + 1e-9 for a in vectors for b in vectors)


@settings(max_examples=100, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1).filter(
        lambda s: ":" not in s
    ),
    st.text(),
    st.none() | st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)),
    st.text(),
)
def test_evidence_refs_round_trip(chunk_id, path, lines, content) -> None:
    metadata = {} if lines is None else {"start_line": lines[0], "end_line": lines[1]}
    ref = EvidenceRef.parse(evidence_ref(chunk_id.strip() or "c", path, metadata, content))
    assert ref.chunk_id == (chunk_id.strip() or "c")
    assert ref.content_hash == chunk_hash(content) and ref.matches(content)
    assert (ref.start_line, ref.end_line) == (lines or (None, None))


def test_explain_a_chunk_for_a_query_and_without_one(core) -> None:
    hit = core.search("rotate signing keys", limit=1)[0].matched_chunks[0]
    explained = core.explain(hit.chunk_id, "rotate signing keys")
    assert explained.final_score == pytest.approx(hit.score)
    assert explained.keyword_rank == 1
    other = core.search("renew certificates", limit=1)[0].matched_chunks[0]
    unranked = core.explain(other.chunk_id, "rotate signing keys")
    assert unranked.details["ranked"] is False and unranked.keyword_score == 0
    plain = core.explain(hit.chunk_id)
    assert plain.path == "docs/keys.md" and plain.lines == hit.explanation.lines
    assert plain.details["content_hash"] == chunk_hash(hit.content)
    with pytest.raises(NotFoundError):
        core.explain("no-such-chunk")


def test_a_citation_is_unchanged_moved_changed_or_gone() -> None:
    with KnowledgeAgentCore() as core:
        storage = "Keys live in the vault, never on disks or laptops. " * 3
        text = "# Keys\n\n" + ROTATION + " " + ROTATION + "\n\n## Storage\n\n" + storage
        item = core.add_text(text, title="Keys", source_uri="docs/keys.md")
        ref = core.search("rotate signing keys", limit=1)[0].matched_chunks[0].evidence_ref
        assert core.check_citation(ref).status == "unchanged"
        # Indexed again with a section before it: new chunk ids, same text further down.
        moved = "# Intro\n\n" + "Key management in general terms. " * 6 + "\n\n" + text
        core.add_text(moved, title="Keys", source_uri="docs/keys.md", item_id=item.id)
        check = core.check_citation(ref)
        assert check.status == "moved" and check.current_ref != ref
        assert ROTATION in check.chunk.content
        core.add_text(
            text.replace("every quarter", "every month"),
            title="Keys",
            source_uri="docs/keys.md",
            item_id=item.id,
        )
        changed = core.check_citation(ref)
        assert changed.status == "changed" and "every month" in changed.chunk.content
        core.delete_knowledge_item(item.id)
        assert core.check_citation(ref).status == "gone"
        with pytest.raises(QueryError, match="evidence reference"):
            core.check_citation("docs/keys.md#L3")


def test_the_command_line_explains_a_chunk_and_checks_a_citation(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from knowledge_agent.cli import cli

    data = ["--data-dir", str(tmp_path / "kb")]
    (tmp_path / "keys.md").write_text("# Keys\n\n" + ROTATION + "\n", encoding="utf-8")
    runner = CliRunner()
    assert runner.invoke(cli, [*data, "add", str(tmp_path / "keys.md")]).exit_code == 0
    found = runner.invoke(cli, [*data, "search", "rotate keys", "--json", "--explain"]).output
    found = json.loads(found)
    chunk = found["results"][0]["matched_chunks"][0]
    assert chunk["explanation"]["final_score"] == pytest.approx(chunk["score"])
    shown = runner.invoke(cli, [*data, "explain", chunk["chunk_id"], "--query", "rotate keys"])
    assert shown.exit_code == 0 and "final" in shown.output and "rotat" in shown.output
    as_json = runner.invoke(cli, [*data, "explain", chunk["chunk_id"], "--json"])
    assert json.loads(as_json.output)["path"] == str(tmp_path / "keys.md")
    cited = runner.invoke(cli, [*data, "get", chunk["evidence_ref"]])
    assert cited.exit_code == 0 and "unchanged" in cited.output and "quarter" in cited.output
    (tmp_path / "keys.md").write_text("# Other\n\nNothing about keys.\n", encoding="utf-8")
    assert runner.invoke(cli, [*data, "sync"]).exit_code == 0
    gone = runner.invoke(cli, [*data, "get", chunk["evidence_ref"], "--json"])
    assert json.loads(gone.output)["status"] in ("changed", "gone")


def test_a_project_file_reranker_reorders_command_line_searches(tmp_path, monkeypatch) -> None:
    import json

    from click.testing import CliRunner
    from embedding_server import EmbeddingServer

    from knowledge_agent.cli import cli

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nRotate the signing keys every quarter.\n", "utf-8")
    (docs / "b.md").write_text("# B\n\nKeys: rotate them; signing keys rotate yearly.\n", "utf-8")
    with EmbeddingServer() as server:
        (tmp_path / ".knowledge-agent.toml").write_text(
            'data_dir = "kb"\n[rerank]\nprovider = "openai"\n'
            f'base_url = "{server.base_url}"\nmodel = "overlap"\n',
            "utf-8",
        )
        runner = CliRunner()
        monkeypatch.chdir(tmp_path)  # the project file is found from the working folder
        monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
        assert runner.invoke(cli, ["trust"]).exit_code == 0  # it names an endpoint
        assert runner.invoke(cli, ["add", str(docs)]).exit_code == 0
        query = ["search", "rotate signing keys every quarter", "--json", "--explain"]
        reranked = runner.invoke(cli, [*query, "--rerank"])
        assert reranked.exit_code == 0, reranked.output
        best = json.loads(reranked.output)["results"][0]["matched_chunks"][0]["explanation"]
        assert best["rank_after_rerank"] == 1 and "rerank_score" in best["details"]
        assert server.bodies("/v1/rerank")  # the service was asked
