"""bm25_scan scores exactly what Whoosh's own matchers score, on any corpus."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from whoosh import fields as wf
from whoosh import query as wq
from whoosh.columns import NumericColumn
from whoosh.index import Index
from whoosh.scoring import TF_IDF
from whoosh.searching import Searcher
from whoosh.writing import NO_MERGE

from knowledge_agent.backends.local.keyword import internals as whoosh_internals
from knowledge_agent.backends.local.keyword.bm25_scan import Clause, ScanCache, top_docs
from knowledge_agent.backends.local.keyword.internals import column_values, field_lengths
from knowledge_agent.backends.local.keyword.schema import LuceneBM25F
from knowledge_agent.backends.local.keyword.storage import PrivateRamStorage

# Every check runs on the fast paths (Whoosh's private block attributes) and on the public
# matcher interface that replaces them on an untested Whoosh version.
PATHS = pytest.mark.parametrize("fast", [True, False], ids=["fast-paths", "public-paths"])


@contextmanager
def internals(fast: bool) -> Iterator[None]:
    saved = whoosh_internals.FAST_PATHS
    whoosh_internals.FAST_PATHS = fast
    try:
        yield
    finally:
        whoosh_internals.FAST_PATHS = saved


VOCAB = [f"w{i}" for i in range(12)]


def build(seed: int, docs: int, segments: int, deletions: int) -> Index:
    """Random documents over a small vocabulary, in several segments, some deleted.

    Frequent words get posting lists of several blocks; rare ones are inlined.
    """
    rng = random.Random(seed)
    schema = wf.Schema(
        key=wf.ID(stored=True, unique=True),
        heading=wf.TEXT(phrase=False),
        content=wf.TEXT(phrase=False),
    )
    ix = PrivateRamStorage().create_index(schema)
    per_segment = max(1, docs // segments)
    for start in range(0, docs, per_segment):
        with ix.writer() as w:
            w.mergetype = NO_MERGE
            for n in range(start, min(docs, start + per_segment)):
                words = rng.choices(VOCAB, weights=range(len(VOCAB), 0, -1), k=rng.randint(1, 60))
                w.add_document(
                    key=str(n),
                    heading=" ".join(rng.sample(VOCAB, rng.randint(0, 2))),
                    content=" ".join(words),
                )
    if deletions:
        with ix.writer() as w:
            w.mergetype = NO_MERGE
            for n in rng.sample(range(docs), min(deletions, docs)):
                w.delete_by_term("key", str(n))
    return ix


def whoosh_scores(searcher: Searcher, clauses: list[Clause]) -> dict[int, float]:
    q = wq.Or([wq.Term(c.field, c.text, boost=c.boost) for c in clauses])
    return {hit.docnum: hit.score for hit in searcher.search(q, limit=None)}


CLAUSES = st.lists(
    st.builds(
        Clause,
        field=st.sampled_from(["content", "heading"]),
        text=st.sampled_from([*VOCAB, "absent"]),
        boost=st.sampled_from([1.0, 2.0, 0.5, 3.0]),
    ),
    min_size=1,
    max_size=10,
    unique_by=lambda c: (c.field, c.text),
)


@PATHS
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    docs=st.integers(1, 400),
    segments=st.integers(1, 4),
    deletions=st.integers(0, 40),
    clauses=CLAUSES,
    limit=st.integers(1, 50),
)
def test_scores_and_order_agree_with_whoosh(
    fast: bool,
    seed: int,
    docs: int,
    segments: int,
    deletions: int,
    clauses: list[Clause],
    limit: int,
) -> None:
    ix = build(seed, docs, segments, deletions)
    with internals(fast), ix.searcher(weighting=LuceneBM25F()) as searcher:
        expected = whoosh_scores(searcher, clauses)
        got = top_docs(searcher, ScanCache(), clauses, len(expected) + 1)
        assert {d for _, d in got} == set(expected)
        for score, docnum in got:
            assert math.isclose(score, expected[docnum], rel_tol=1e-12)
        # Best first, ties by docnum.
        assert got == sorted(got, key=lambda sd: (-sd[0], sd[1]))
        top = top_docs(searcher, ScanCache(), clauses, limit)
        assert top == got[:limit]


@PATHS
def test_allow_mask_limits_the_candidates(fast: bool) -> None:
    ix = build(7, 300, 3, 10)
    clauses = [Clause("content", "w1", 1.0), Clause("content", "w5", 1.0)]
    with internals(fast), ix.searcher(weighting=LuceneBM25F()) as searcher:
        every = top_docs(searcher, ScanCache(), clauses, 1000)
        allow = np.zeros(searcher.doc_count_all(), bool)
        allow[::3] = True
        allowed = top_docs(searcher, ScanCache(), clauses, 1000, allow)
        assert allowed == [(s, d) for s, d in every if d % 3 == 0]
        assert top_docs(searcher, ScanCache(), clauses, 1000, np.zeros_like(allow)) == []


@PATHS
def test_lengths_decoded_from_the_column_match_whoosh(fast: bool) -> None:
    ix = build(3, 250, 2, 0)
    with internals(fast), ix.searcher() as searcher:
        for leaf, _ in searcher.leaf_searchers():
            reader = leaf.reader()
            n = reader.doc_count_all()
            for name in ("content", "heading"):
                got = field_lengths(reader, name).tolist()
                for docnum in range(n):
                    # None: the document has no term in the field, so it is never scored.
                    expected = reader.doc_field_length(docnum, name, 1)
                    assert expected is None or got[docnum] == expected


class ValuesOnly:
    """A column reader without NumericColumn's internals: read value by value."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def __getitem__(self, docnum: int) -> float:
        return self.values[docnum]


@PATHS
def test_column_values_reads_a_whole_column_or_value_by_value(fast: bool) -> None:
    schema = wf.Schema(key=wf.ID(stored=True), when=wf.COLUMN(NumericColumn("d")))
    ix = PrivateRamStorage().create_index(schema)
    values = [0.0, 1.5, -2.25, 0.0, 1e12, 0.0, 0.0]  # trailing defaults are not written
    with ix.writer() as w:
        for n, v in enumerate(values):
            w.add_document(key=str(n), when=v)
    with internals(fast), ix.reader() as reader:
        column = reader.column_reader("when", translate=False)
        assert column_values(column, len(values), ">f8").tolist() == values
    assert column_values(ValuesOnly(values), len(values), ">f8").tolist() == values


def test_a_field_no_document_has_scores_nothing() -> None:
    ix = build(1, 20, 1, 0)
    with ix.searcher(weighting=LuceneBM25F()) as searcher:
        assert top_docs(searcher, ScanCache(), [Clause("heading", "absent", 1.0)], 10) == []
        assert top_docs(searcher, ScanCache(), [Clause("content", "w0", 0.0)], 10) == []


def test_requires_bm25f() -> None:
    ix = build(1, 5, 1, 0)
    with ix.searcher(weighting=TF_IDF()) as searcher, pytest.raises(TypeError, match="BM25F"):
        top_docs(searcher, ScanCache(), [Clause("content", "w0", 1.0)], 10)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    deletions=st.integers(0, 30),
    queries=st.lists(CLAUSES, min_size=1, max_size=6),
    budget=st.sampled_from([0, 5, 60, 10_000]),
)
def test_a_cache_kept_across_queries_scores_as_a_fresh_one(
    seed: int, deletions: int, queries: list[list[Clause]], budget: int
) -> None:
    ix = build(seed, 300, 3, deletions)
    cache = ScanCache(budget=budget)
    with ix.searcher(weighting=LuceneBM25F()) as searcher:
        for clauses in queries:
            assert top_docs(searcher, cache, clauses, 1000) == top_docs(
                searcher, ScanCache(budget=0), clauses, 1000
            )
            assert cache.held <= budget


def test_the_term_cache_keeps_the_latest_terms_within_its_budget() -> None:
    ix = build(5, 300, 2, 0)
    with ix.searcher(weighting=LuceneBM25F()) as searcher:
        frequent = len(top_docs(searcher, ScanCache(), [Clause("content", "w0", 1.0)], 1000))
        rare = len(top_docs(searcher, ScanCache(), [Clause("content", "w11", 1.0)], 1000))
        assert frequent > rare > 0
        cache = ScanCache(budget=frequent)
        top_docs(searcher, cache, [Clause("content", "w0", 1.0)], 10)
        assert cache.held == frequent
        top_docs(searcher, cache, [Clause("content", "w11", 1.0)], 10)
        assert cache.held == rare  # the older, larger term made room
        small = ScanCache(budget=frequent - 1)
        top_docs(searcher, small, [Clause("content", "w0", 1.0)], 10)
        assert small.held == 0  # a term over the whole budget is not kept
        cache.clear()
        assert cache.held == 0


def test_stored_fields_and_idf_are_the_searchers_own() -> None:
    ix = build(9, 120, 3, 10)
    cache = ScanCache()
    with ix.searcher(weighting=LuceneBM25F()) as searcher:
        for _ in range(2):  # read, then remembered
            for docnum in range(0, searcher.doc_count_all(), 7):
                assert cache.stored(searcher, docnum) == searcher.stored_fields(docnum)
            for word in [*VOCAB, "absent"]:
                btext = word.encode()
                assert cache.idf(searcher, "content", btext) == searcher.idf("content", btext)
                assert cache.doc_frequency(searcher, "heading", btext) == searcher.doc_frequency(
                    "heading", btext
                )
