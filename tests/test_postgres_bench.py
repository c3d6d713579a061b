"""The benchmarks of the postgresql backend: quality's comparison with the local backend (top-1
agreement, largest figure difference), speed's table and goals, and stress's check that a
database's tables are whole."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.backend_compare import SUFFIX, agreement, agreements, postgres_systems
from benchmarks.datasets import Dataset, Document, Query
from benchmarks.package_system import KnowledgeAgentSystem, SharedKnowledgeBase
from benchmarks.speed_measure import latency
from benchmarks.speed_postgres import table
from benchmarks.stress_postgres import is_url, rows_whole
from benchmarks.systems import Hit
from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.postgres.postings import BATCH_SPAN

runs_strategy = st.dictionaries(
    st.text("abc", min_size=1, max_size=3),
    st.lists(
        st.builds(Hit, st.sampled_from("xyz"), st.floats(0, 1), st.sampled_from("pq")), max_size=3
    ),
    max_size=8,
)


@given(runs_strategy)
def test_a_run_agrees_with_itself_entirely(runs: dict[str, list[Hit]]) -> None:
    found = agreement("ka", runs, runs, {"R@1": 0.5}, {"R@1": 0.5})
    assert (found.same_item, found.same_passage) == (len(runs), len(runs))
    assert found.largest_difference == 0.0 and found.met


@given(runs_strategy, st.data())
def test_agreement_counts_the_queries_whose_first_hit_changed(
    runs: dict[str, list[Hit]], data: st.DataObject
) -> None:
    changed = data.draw(st.sets(st.sampled_from(sorted(runs)))) if runs else set()
    moved = data.draw(st.sets(st.sampled_from(sorted(runs)))) if runs else set()
    moved = {query_id for query_id in moved if runs[query_id]}  # a first hit to move
    other = {}
    for query_id, hits in runs.items():
        first = hits[0] if hits else Hit("x", 1.0, "p")
        if query_id in changed:  # another item first
            other[query_id] = [Hit(first.doc_id + "!", 1.0, first.passage), *hits]
        elif query_id in moved:  # the same item, another passage
            other[query_id] = [Hit(first.doc_id, 1.0, f"{first.passage}!"), *hits[1:]]
        else:
            other[query_id] = hits
    found = agreement("ka", runs, other, {"a": 0.2, "b": 0.9}, {"a": 0.21, "b": 0.8})
    assert found.same_item == len(runs) - len(changed)
    assert found.same_passage == len(runs) - len(changed | moved)
    assert (found.largest_label, round(found.largest_difference, 6)) == ("b", 0.1)
    assert not found.met


DOCS = [
    Document("d1", "Ferry", "The harbour ferry leaves every hour from pier two."),
    Document("d2", "Deploy", "Roll back a release with the revert script on the server."),
    Document("d3", "Cache", "The cache keeps pages for max-age seconds before a refresh."),
    Document("d4", "Tide", "The tide table lists high water at the harbour for each day."),
]
QUERIES = [
    Query("q1", "harbour ferry"),
    Query("q2", "roll back a release"),
    Query("q3", "max-age cache"),
    Query("q4", "high water tide"),
]


def test_the_same_corpus_on_a_database_agrees_with_the_local_backend(postgres_url: str) -> None:
    # The quality harness runs the reference systems too: the `bench` extra.
    pytest.importorskip("bm25s", reason="the quality harness needs the bench extra")
    from benchmarks.quality import run_dataset

    dataset = Dataset("cranfield", DOCS, QUERIES, {f"q{n}": {f"d{n}": 1} for n in range(1, 5)})
    names = ["knowledge_agent", "knowledge_agent-item"]
    local = SharedKnowledgeBase(KnowledgeAgentCore, {})
    systems = [
        KnowledgeAgentSystem("knowledge_agent", local),
        KnowledgeAgentSystem("knowledge_agent-item", local, level="item"),
        *postgres_systems(names, KnowledgeAgentCore, {}, postgres_url),
    ]
    results = run_dataset(dataset, systems)
    assert [r.system for r in results] == [*names, *(name + SUFFIX for name in names)]
    assert all(r.error is None for r in results)
    assert results[0].figures["R@100"] == 1.0  # every query finds its document
    found = agreements(results)
    assert [a.system for a in found] == names
    assert all(a.same_item == a.same_passage == 4 and a.met for a in found)
    with psycopg.connect(postgres_url) as conn:  # the systems really wrote the database
        assert conn.execute("SELECT count(*) FROM knowledge_items").fetchone() == (4,)


def _result(local_ms: float, pg_ms: float, local_mb_s: float, pg_mb_s: float) -> dict:
    def backend(ms: float, mb_s: float) -> dict:
        ingest = {"seconds": 10.0, "mb_per_s": mb_s, "megabytes": 5.0,
                  "cpu_s": {"client": 1.0, "workers": 2.0, "server": 3.0}}  # fmt: skip
        lat = (latency([ms] * 20), 0)
        return {"ingest": ingest, "chunks": 100, "items": 10, "latency": dict.fromkeys(
            ("hybrid", "keyword", "semantic"), lat)}  # fmt: skip

    reference = {"index_s": 1.0, "latency_ms": {"p50": 1.0, "p95": 2.0}}
    return {
        "size": 100,
        "queries": 20,
        "warmup": 2,
        "local": backend(local_ms, local_mb_s),
        "postgresql": backend(pg_ms, pg_mb_s),
        "references": {"fts5": reference, "bm25s": reference},
    }


def test_the_speed_table_judges_the_ratios_to_the_local_backend() -> None:
    _, goals = table(_result(local_ms=10, pg_ms=25, local_mb_s=1.0, pg_mb_s=1.5))
    assert goals["hybrid p95, ms"] == {"ratio": 2.5, "met": False}
    assert goals["keyword p95, ms"] == {"ratio": 2.5, "met": False}
    assert goals["ingest, MB/s"] == {"ratio": 1.5, "met": True}
    assert "semantic p95, ms" not in goals  # no goal on the semantic mode
    text, goals = table(_result(local_ms=10, pg_ms=15, local_mb_s=1.0, pg_mb_s=0.25))
    assert goals["hybrid p95, ms"]["met"] and not goals["ingest, MB/s"]["met"]
    assert "| ingest, MB/s | 1.000 | 0.250 | 0.25 |" in text


def test_a_database_with_a_lost_posting_or_document_is_not_whole(postgres_url: str) -> None:
    assert is_url(postgres_url) and not is_url("/tmp/kb")
    with KnowledgeAgentCore(backend=postgres_url) as core:
        core.add_text("The lighthouse keeper logs the weather. " * 40, title="Log")
        core.add_text("The ferry leaves at noon.", title="Ferry")
        core.add_text("", title="Empty")  # no chunks, and rightly so
    assert rows_whole(postgres_url) == []
    with psycopg.connect(postgres_url) as conn:
        # The postings of the one chunk of one write (a write's postings of a term are a row).
        conn.execute(
            "DELETE FROM kw_postings WHERE level = 0 AND seg = (SELECT d.doc / %s FROM"
            " kw_documents d JOIN knowledge_items i ON i.id = d.item_id"
            " WHERE i.title = 'Ferry' AND d.level = 0)",
            (BATCH_SPAN,),
        )
    assert rows_whole(postgres_url) == ["1 keyword documents without postings"]
    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "DELETE FROM kw_documents WHERE doc = (SELECT min(doc) FROM kw_documents) AND level = 0"
        )
    assert "1 chunks without their keyword document" in rows_whole(postgres_url)
