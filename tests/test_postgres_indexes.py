"""The PostgreSQL keyword and TF-IDF indexes give the local indexes' answers.

Every test indexes the same items in the local in-memory indexes (SearchIndexManager,
SemanticSearcher) and in the SQL ones, and compares hits, order and scores.
"""

from __future__ import annotations

import importlib
import random
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.keyword.index import SearchIndexManager
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.backends.postgres import client_rank, ranked, term_postings
from knowledge_agent.backends.postgres.keyword import PostgresKeywordIndex
from knowledge_agent.backends.postgres.postings import COMPONENT, MIGRATIONS, PostingsWriter
from knowledge_agent.backends.postgres.schema import migrate, schema_version
from knowledge_agent.backends.postgres.statistics import Statistics
from knowledge_agent.backends.postgres.vectors import PostgresTfidfIndex
from knowledge_agent.chunking.content_chunker import ChunkConfig, ContentChunker
from knowledge_agent.errors import QueryError, SearchIndexError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.protocols import KeywordIndex, VectorIndex
from knowledge_agent.search.filters import SearchFilters
from knowledge_agent.search.hits import ChunkHit, ItemHit

Pair = tuple[KnowledgeItem, list[KnowledgeChunk]]

ANALYZER = TextAnalyzer()
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "parse",
]
ENGLISH = [
    "How to reset a forgotten password on the login page.",
    "The installer copies configuration files into the home folder.",
    "Passwords are hashed with a salt before they are stored.",
    "Run the migration command to upgrade the database schema.",
    "def parseConfigFile(path): reads the YAML configuration and returns a dict",
]
CHINESE = [
    "如何重置密码：打开设置页面，点击忘记密码。",
    "数据库迁移命令会升级表结构。",
    "配置文件保存在用户目录中。",
    "密码在保存之前会加盐并哈希。",
]
KBS = ("default", "docs", "notes")
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
CHUNKER = ContentChunker(ChunkConfig(min_chunk_size=20, max_chunk_size=120, overlap_ratio=0.2))


# --------------------------------------------------------------------------- the schema


def _stand_in_version(conn: psycopg.Connection, component: str) -> int:
    exists = conn.execute("SELECT to_regclass('schema_versions') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute(
        "SELECT version FROM schema_versions WHERE component = %s", (component,)
    ).fetchone()
    return 0 if row is None else int(row[0])


def _stand_in_migrate(
    conn: psycopg.Connection, component: str, migrations: Sequence[Sequence[str]]
) -> None:
    """The storage's ``schema.migrate`` contract: apply the migrations (each a list of
    statements) past the component's recorded version, record the new one."""
    with conn.transaction():
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_versions (component text PRIMARY KEY, version int)"
        )
        for migration in migrations[_stand_in_version(conn, component) :]:
            for statement in migration:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_versions VALUES (%s, %s)"
            " ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
            (component, len(migrations)),
        )


@pytest.fixture(autouse=True)
def schema_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage's schema module, or a stand-in with its ``migrate`` until it exists."""
    name = "knowledge_agent.backends.postgres.schema"
    try:
        importlib.import_module(name)
    except ImportError:
        module = types.ModuleType(name)
        module.migrate = _stand_in_migrate  # type: ignore[attr-defined]
        module.schema_version = _stand_in_version  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)


# --------------------------------------------------------------------------- corpora


def make_pair(
    rnd: random.Random, text: str, title: str, *, kb: str | None = None, path: str | None = None
) -> Pair:
    item = KnowledgeItem(
        title=title,
        content=text,
        kb=kb or rnd.choice(KBS),
        source_type=rnd.choice(("file", "text")),
        doc_type=rnd.choice(("", "guide", "reference")),
        language=rnd.choice(("en", "zh")),
        source_uri=path or f"/repo/{rnd.choice(('src', 'docs'))}/{rnd.randrange(5)}.md",
        updated_at=START + timedelta(days=rnd.randrange(60)),
    )
    return item, CHUNKER.chunk(text, title=title)


def random_corpus(seed: int, n_items: int) -> list[Pair]:
    rnd = random.Random(seed)
    pairs = []
    for _ in range(n_items):
        kind = rnd.random()
        if kind < 0.6:
            text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 80)))
        elif kind < 0.8:
            text = " ".join(rnd.sample(ENGLISH, rnd.randint(1, len(ENGLISH))))
        else:
            text = "".join(rnd.sample(CHINESE, rnd.randint(1, len(CHINESE))))
        title = rnd.choice(["", f"{rnd.choice(WORDS)} guide", "配置 密码"])
        pairs.append(make_pair(rnd, text, title))
    return pairs


QUERIES = [
    "alpha",
    "alpha beta beta",
    "gamma omega parse",
    "reset password",
    "configuration database schema",
    "parseConfigFile",
    "重置密码",
    "数据库 配置",
    "guide sigma",
    "nothing matches this",
]


def filters_cases() -> list[SearchFilters | None]:
    return [
        None,
        SearchFilters.build(kb="docs"),
        SearchFilters.build(kb=["default", "notes"], language="en"),
        SearchFilters.build(source_type="file", doc_type=["guide", ""]),
        SearchFilters.build(path_prefix="/repo/docs/"),
        SearchFilters.build(path_glob="*/src/[0-2].md"),
        SearchFilters.build(updated_after=START + timedelta(days=20)),
        SearchFilters.build(
            updated_after=START + timedelta(days=10), updated_before=START + timedelta(days=40)
        ),
        SearchFilters.build(kb="nowhere"),
    ]


# --------------------------------------------------------------------------- comparing


def assert_same_hits(
    local: Sequence[ChunkHit | ItemHit], sql: Sequence[ChunkHit | ItemHit], tol: float
) -> None:
    """Same hits, same order, scores within ``tol``; hits whose scores are within ``tol``
    of each other may trade places (float sums in another order), but then only them."""
    assert len(sql) == len(local)
    for mine, theirs in zip(sql, local, strict=True):
        assert mine.score == pytest.approx(theirs.score, abs=tol)
    key = (lambda hit: hit.chunk_id) if local and isinstance(local[0], ChunkHit) else None
    key = key or (lambda hit: hit.item_id)

    def groups(hits: Sequence[Any]) -> list[set[str]]:
        out: list[set[str]] = []
        last = None
        for hit in hits:
            if last is not None and abs(hit.score - last) <= tol:
                out[-1].add(key(hit))
            else:
                out.append({key(hit)})
            last = hit.score
        return out

    if groups(local) != groups(sql):
        # The cut at the limit may fall inside a tie: compare all but the last group.
        assert groups(local)[:-1] == groups(sql)[:-1]
    if isinstance(local[0] if local else None, ChunkHit):
        by_id = {hit.chunk_id: hit for hit in local}
        for hit in sql:
            if hit.chunk_id in by_id:
                assert (hit.item_id, hit.chunk_index) == (
                    by_id[hit.chunk_id].item_id,
                    by_id[hit.chunk_id].chunk_index,
                )


@pytest.fixture(params=["client", "sql"], ids=["ranked-here", "ranked-in-sql"])
def indexes(
    postgres_url: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[PostgresKeywordIndex, PostgresTfidfIndex]]:
    """Both indexes, ranking in this process from the postings' arrays or (as for queries of
    too many postings) in SQL: every test over them holds for both."""
    if request.param == "sql":
        monkeypatch.setattr(client_rank, "MAX_CLIENT_POSTINGS", -1)
    keyword = PostgresKeywordIndex(postgres_url, ANALYZER)
    tfidf = PostgresTfidfIndex(postgres_url, ANALYZER)
    yield keyword, tfidf
    keyword.close()
    tfidf.close()


def local_indexes(pairs: list[Pair]) -> tuple[SearchIndexManager, SemanticSearcher]:
    keyword = SearchIndexManager(None, ANALYZER)
    keyword.update(pairs)
    tfidf = SemanticSearcher(None, ANALYZER)
    tfidf.update(pairs)
    return keyword, tfidf


def compare_all(
    local: tuple[SearchIndexManager, SemanticSearcher],
    sql: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
    queries: Sequence[str],
    filters: Sequence[SearchFilters | None],
    limits: Sequence[int] = (1, 5, 50),
) -> int:
    """Compare every search of both engines; the number of hits compared."""
    compared = 0
    for text in queries:
        terms = ANALYZER.terms(text)
        for flt in filters:
            for limit in limits:
                for per_item in (None, 1, 2):
                    a = local[0].search_chunks(terms, limit, flt, per_item=per_item)
                    b = sql[0].search_chunks(terms, limit, flt, per_item=per_item)
                    assert_same_hits(a, b, 1e-9)
                    c = local[1].search_chunks(terms, limit, 0.0, flt, per_item=per_item)
                    d = sql[1].search_chunks(terms, limit, 0.0, flt, per_item=per_item)
                    assert_same_hits(c, d, 1e-6)
                    compared += len(a) + len(c)
                assert_same_hits(
                    local[0].search_items(terms, limit, flt),
                    sql[0].search_items(terms, limit, flt),
                    1e-9,
                )
                assert_same_hits(
                    local[1].search_items(terms, limit, 0.0, flt),
                    sql[1].search_items(terms, limit, 0.0, flt),
                    1e-6,
                )
    return compared


# --------------------------------------------------------------------------- tests


def test_the_indexes_implement_the_protocols(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
) -> None:
    keyword, tfidf = indexes
    assert isinstance(keyword, KeywordIndex)
    assert isinstance(tfidf, VectorIndex)
    assert keyword.applied_seq == 0
    keyword.set_applied_seq(7)
    assert keyword.applied_seq == 0


@pytest.mark.parametrize("stored_norms", [True, False], ids=["stored-norms", "stale-norms"])
def test_same_hits_as_the_local_indexes_with_filters_and_per_item(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex], stored_norms: bool
) -> None:
    """With stale stored norms, a ranking here computes them from the vectors it keeps, a
    ranking in SQL from the candidates' postings; neither refreshes them."""
    pairs = random_corpus(1, 40)
    local = local_indexes(pairs)
    indexes[0].update(pairs)
    if stored_norms:
        indexes[1].refresh_norms()
    indexes[1].refresh_stale_norms = False
    assert compare_all(local, indexes, QUERIES, filters_cases()) > 500
    assert indexes[1]._norms_fresh() is stored_norms
    mirrored = indexes[1]._mirrors[0].generation is not None
    assert mirrored is (not stored_norms and client_rank.MAX_CLIENT_POSTINGS >= 0)


def test_a_search_does_not_wait_for_a_writer_to_refresh_norms(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex], postgres_url: str
) -> None:
    pairs = random_corpus(10, 20)
    keyword, tfidf = indexes
    keyword.update(pairs[:10])
    assert tfidf.refresh_norms()
    assert tfidf._norms_fresh()
    keyword.update(pairs[10:])
    local = local_indexes(pairs)
    with psycopg.connect(postgres_url) as writer:
        writer.execute("SELECT 1 FROM kw_stats FOR UPDATE")  # a writer mid-transaction
        for text in QUERIES:
            terms = ANALYZER.terms(text)
            assert_same_hits(
                local[1].search_chunks(terms, 20), tfidf.search_chunks(terms, 20), 1e-6
            )
        assert not tfidf._norms_fresh()
        assert tfidf.refresh_norms(wait=False) is False
    assert tfidf.refresh_norms(wait=False) is True
    assert tfidf._norms_fresh()


def test_statistics_equal_the_local_ones(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
) -> None:
    pairs = random_corpus(2, 30)
    local, _ = local_indexes(pairs)
    keyword = indexes[0]
    keyword.update(pairs)
    terms = [*ANALYZER.terms(" ".join(QUERIES)), "", "neverseen"]
    for items in (False, True):
        assert keyword.idf(terms, items=items) == local.idf(terms, items=items)
        assert keyword.unseen(terms, items=items) == local.unseen(terms, items=items)
    idf = keyword.idf(terms)
    assert keyword.best_possible_score(terms, idf) == local.best_possible_score(terms, idf)
    assert (keyword.chunk_count(), keyword.item_count()) == (
        local.chunk_count(),
        local.item_count(),
    )
    assert keyword.indexed_item_ids() == local.indexed_item_ids()
    assert keyword.indexed_item_ids(chunks=True) == local.indexed_item_ids(chunks=True)
    assert keyword.has_chunk_index() and keyword.has_item_index() and indexes[1].has_chunks()


def test_weighted_terms_and_field_boosts(postgres_url: str) -> None:
    pairs = random_corpus(3, 25)
    config_boosts = {"heading": 0.5, "title": 2.0, "content": 1.0}
    local = SearchIndexManager(None, ANALYZER, field_boosts=config_boosts)
    local.update(pairs)
    from knowledge_agent.search.config import KeywordIndexConfig

    plain_local = SearchIndexManager(None, ANALYZER)
    plain_local.update(pairs)
    shared = Statistics()  # the boosted index finds postings read without the head fields
    with (
        PostgresKeywordIndex(postgres_url, ANALYZER, statistics=shared) as plain,
        PostgresKeywordIndex(
            postgres_url,
            ANALYZER,
            KeywordIndexConfig(field_boosts=config_boosts),
            statistics=shared,
        ) as keyword,
    ):
        keyword.update(pairs)
        for weighted in ({"alpha": 1.0, "guide": 0.5}, {"beta": 2.5, "sigma": 0.0}):
            assert_same_hits(
                plain_local.search_chunks(weighted, 20), plain.search_chunks(weighted, 20), 1e-9
            )
            assert_same_hits(
                local.search_chunks(weighted, 20), keyword.search_chunks(weighted, 20), 1e-9
            )
        for text in QUERIES:
            terms = ANALYZER.terms(text)
            assert_same_hits(
                plain_local.search_items(terms, 20), plain.search_items(terms, 20), 1e-9
            )
            assert_same_hits(local.search_items(terms, 20), keyword.search_items(terms, 20), 1e-9)
        with pytest.raises(QueryError):
            keyword.search_chunks({"alpha": -1.0}, 5)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=30).map(" ".join),
        min_size=1,
        max_size=12,
    ),
    query=st.lists(st.sampled_from(WORDS[:8]), min_size=1, max_size=5),
    seed=st.integers(0, 1000),
)
def test_random_small_corpora_rank_alike(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
    texts: list[str],
    query: list[str],
    seed: int,
) -> None:
    rnd = random.Random(seed)
    pairs = [make_pair(rnd, text, rnd.choice(["", "alpha notes"])) for text in texts]
    indexes[0].rebuild(pairs)
    local = local_indexes(pairs)
    compare_all(local, indexes, [" ".join(query)], [None, SearchFilters.build(kb="docs")], (3, 40))


def test_updates_and_removals_rank_like_a_fresh_local_index(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
) -> None:
    pairs = random_corpus(4, 30)
    keyword, tfidf = indexes
    keyword.update(pairs[:20])
    tfidf.update(pairs[15:])  # the postings are shared: either index writes them
    gone = [item.id for item, _ in pairs[:5]]
    rnd = random.Random(9)
    changed = [make_pair(rnd, "alpha alpha omega 重置密码", "alpha") for _ in range(2)]
    for (item, _), (new, chunks) in zip(pairs[10:12], changed, strict=True):
        new.id = item.id
        for chunk in chunks:
            chunk.item_id = item.id
    keyword.update(changed, deletes=gone)
    kept = [pair for pair in pairs if pair[0].id not in set(gone)]
    current = {item.id: (item, chunks) for item, chunks in kept}
    current.update({item.id: (item, chunks) for item, chunks in changed})
    survivors = list(current.values())
    assert keyword.indexed_item_ids() == set(current)
    assert keyword.chunk_count() == sum(len(chunks) for _, chunks in survivors)
    local = local_indexes(survivors)
    # Scores equal a fresh index of the survivors (order may differ among equal scores:
    # the replaced items were indexed later here).
    for text in QUERIES:
        terms = ANALYZER.terms(text)
        a = local[0].search_chunks(terms, 100)
        b = keyword.search_chunks(terms, 100)
        assert sorted((h.chunk_id, round(h.score, 9)) for h in a) == sorted(
            (h.chunk_id, round(h.score, 9)) for h in b
        )
    keyword.update(deletes=list(current))
    assert keyword.chunk_count() == keyword.item_count() == 0
    assert keyword.search_chunks(ANALYZER.terms("alpha"), 5) == []
    assert tfidf.search_chunks(ANALYZER.terms("alpha"), 5) == []
    assert not keyword.has_chunk_index() and not tfidf.has_chunks()


def test_stale_norms_come_from_kept_vectors_that_follow_every_write(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With stale stored norms, a TF-IDF ranking here computes them from the vectors this
    process keeps, brought up to date at each write whichever connection made it: additions
    (also those numbered below documents already kept: a writer that took its numbers first
    and committed last), replacements and removals; each ranking equals a fresh local index.
    A base too large to keep is ranked in SQL."""
    from knowledge_agent.backends.postgres import vector_mirror

    keyword, tfidf = indexes
    tfidf.refresh_stale_norms = False
    pairs = random_corpus(11, 30)
    for item, _ in pairs[10:15]:
        item.kb = "early"  # its own statistics rows: the other writer does not wait for it

    def check(current: list[Pair]) -> None:
        local = local_indexes(current)
        for text in QUERIES:
            terms = ANALYZER.terms(text)
            assert_same_hits(
                local[1].search_chunks(terms, 30, 0.0), tfidf.search_chunks(terms, 30), 1e-6
            )
            assert_same_hits(
                local[1].search_items(terms, 30, 0.0), tfidf.search_items(terms, 30), 1e-6
            )
        assert not tfidf._norms_fresh()

    pairs[0] = make_pair(random.Random(1), "", "")  # an item without a vector
    keyword.update(pairs[:10])
    check(pairs[:10])
    here = client_rank.MAX_CLIENT_POSTINGS >= 0
    with monkeypatch.context() as patch:
        # After the first read, each write's vectors are read alone.
        patch.setattr(vector_mirror, "_READ_ALL", "SELECT 1 / 0")
        with psycopg.connect(postgres_url) as early:
            PostingsWriter(ANALYZER).replace(early, pairs[10:15])  # numbered, not committed
            other = PostgresKeywordIndex(postgres_url, ANALYZER)
            try:
                other.update(pairs[15:20])
            finally:
                other.close()
            check(pairs[:10] + pairs[15:20])
            # The five new items read, not the one without a vector (known, no entries).
            assert not here or tfidf._mirrors[1].added == 5
            early.commit()
        check(pairs[:20])
        keyword.update(pairs[20:], deletes=[item.id for item, _ in pairs[:3]])
        check(pairs[3:])
    kept = tfidf._mirrors[0]
    assert (kept.generation is not None) is (client_rank.MAX_CLIENT_POSTINGS >= 0)

    monkeypatch.setattr(vector_mirror, "MAX_MIRRORED_POSTINGS", 1)
    tfidf._mirrors.clear()
    keyword.update(deletes=[item.id for item, _ in pairs[3:6]])
    check(pairs[6:])
    assert tfidf._mirrors[0].generation is None


def test_rebuild_and_refit_replace_everything(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
) -> None:
    keyword, tfidf = indexes
    old, new = random_corpus(5, 10), random_corpus(6, 12)
    keyword.update(old)
    keyword.rebuild_commit_every = 3
    assert keyword.rebuild(iter(new)) == sum(len(chunks) for _, chunks in new)
    assert keyword.indexed_item_ids() == {item.id for item, _ in new}
    refit = tfidf.refit()
    refit.add(old[:4])
    refit.add(old[4:])
    assert keyword.indexed_item_ids() == {item.id for item, _ in new}  # not committed yet
    assert refit.finish() == sum(len(chunks) for _, chunks in old)
    compare_all(local_indexes(old), indexes, QUERIES[:4], [None], (10,))
    cancelled = tfidf.refit()
    cancelled.add(new)
    cancelled.cancel()
    cancelled.cancel()
    assert keyword.indexed_item_ids() == {item.id for item, _ in old}


def test_a_failing_write_leaves_nothing(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex], postgres_url: str
) -> None:
    keyword, _ = indexes
    pairs = random_corpus(7, 8)
    keyword.update(pairs[:4])
    before = keyword.search_chunks(ANALYZER.terms("alpha beta"), 50)
    writer = PostingsWriter(ANALYZER)
    with psycopg.connect(postgres_url) as conn, pytest.raises(RuntimeError), conn.transaction():
        writer.replace(conn, pairs[4:])
        writer.remove(conn, [item.id for item, _ in pairs[:2]])
        raise RuntimeError("the storage failed after indexing")
    assert keyword.indexed_item_ids() == {item.id for item, _ in pairs[:4]}
    assert keyword.search_chunks(ANALYZER.terms("alpha beta"), 50) == before
    with psycopg.connect(postgres_url) as conn:
        totals = conn.execute(
            "SELECT (SELECT count(*) FROM kw_documents), (SELECT sum(docs) FROM kw_stats),"
            " (SELECT count(*) FROM kw_posting_rows WHERE tf > 0),"
            " (SELECT sum(df) FROM kw_terms)"
        ).fetchone()
    assert totals is not None
    assert totals[0] == totals[1]  # statistics count exactly the documents present
    assert totals[2] == totals[3]


def test_a_version_1_keyword_schema_is_migrated_with_the_same_answers(
    postgres_url: str, postgres_server: Any
) -> None:
    """Postings stored a row per (document, term), as schema version 1 kept them, become a
    row of arrays per write and term: the same postings, statistics and search answers, and
    writes and removals go on from there."""
    pairs = random_corpus(12, 24)
    keyword, tfidf = (
        PostgresKeywordIndex(postgres_url, ANALYZER),
        PostgresTfidfIndex(postgres_url, ANALYZER),
    )
    for start in range(0, 24, 5):  # several writes: several rows of one term
        keyword.update(pairs[start : start + 5])
    old_url = postgres_server.new_database()
    try:
        with psycopg.connect(postgres_url) as new, psycopg.connect(old_url) as old:
            migrate(old, COMPONENT, MIGRATIONS[:1])
            copied = {
                "kw_documents": "SELECT kb, doc, level, key, item_id, chunk_index, source_type,"
                " doc_type, language, path, updated_at, len, len_head, terms FROM kw_documents",
                "kw_postings": "SELECT kb, level, term, doc, tf, tf_head, w_vec, norm_len,"
                " norm_len_head FROM kw_posting_rows",
                "kw_terms": "SELECT kb, level, term, df, df_head, df_vec FROM kw_terms",
                "kw_stats": "SELECT kb, level, docs, len, len_head, changes, 0 FROM kw_stats",
            }
            for table, select in copied.items():
                rows = new.execute(select).fetchall()
                marks = ", ".join(["%s"] * len(rows[0]))
                with old.cursor() as cur:
                    cur.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            last = new.execute("SELECT last_value FROM kw_documents_doc_seq").fetchone()
            old.execute("SELECT setval('kw_documents_doc_seq', %s)", last)
            old.commit()
            assert schema_version(old, COMPONENT) == 1
        migrated = PostgresKeywordIndex(old_url, ANALYZER), PostgresTfidfIndex(old_url, ANALYZER)
        with psycopg.connect(postgres_url) as new, psycopg.connect(old_url) as old:
            assert schema_version(old, COMPONENT) == len(MIGRATIONS) == 3
            for select in (
                "SELECT * FROM kw_posting_rows ORDER BY level, term, kb, doc",
                "SELECT * FROM kw_terms ORDER BY level, term, kb",
                "SELECT count(*), sum(cardinality(doc)) FROM kw_postings",
            ):
                assert old.execute(select).fetchall() == new.execute(select).fetchall()
        local = local_indexes(pairs)
        assert compare_all(local, migrated, QUERIES, [None], limits=(5,)) > 50
        gone = [item.id for item, _ in pairs[3:8]]  # parts of two writes' rows
        for index in (keyword, migrated[0]):
            index.update(pairs[20:22], deletes=gone)
        survivors = [pair for pair in pairs if pair[0].id not in set(gone)]
        assert compare_all(local_indexes(survivors), migrated, QUERIES, [None], (50,)) > 50
        for index in (*migrated, tfidf):
            index.close()
    finally:
        keyword.close()
        postgres_server.drop_database(old_url)


def test_a_closed_index_says_so(postgres_url: str) -> None:
    keyword = PostgresKeywordIndex(postgres_url, ANALYZER)
    keyword.close()
    keyword.close()
    with pytest.raises(SearchIndexError, match="closed"):
        keyword.search_chunks(["alpha"], 5)


def test_concurrent_writers_keep_the_statistics_exact(postgres_url: str) -> None:
    """Writers on their own connections, in one knowledge base and across several, neither
    deadlock nor lose a count: the statistics equal what the tables hold, and the scores a
    fresh local index of the same items gives."""
    pairs = random_corpus(8, 48)
    errors: list[BaseException] = []

    def write(share: list[Pair]) -> None:
        try:
            with PostgresKeywordIndex(postgres_url, ANALYZER) as index:
                for start in range(0, len(share), 3):
                    index.update(share[start : start + 3])
                index.update(deletes=[share[0][0].id])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    PostgresKeywordIndex(postgres_url, ANALYZER).close()  # the tables, before the race
    threads = [threading.Thread(target=write, args=(pairs[i::3],)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    survivors = [pair for i, pair in enumerate(pairs) if i not in (0, 1, 2)]
    with psycopg.connect(postgres_url) as conn:
        per_kb = conn.execute(
            "SELECT s.kb, s.level, s.docs, s.len, (SELECT count(*) FROM kw_documents d"
            " WHERE d.kb = s.kb AND d.level = s.level), (SELECT coalesce(sum(len), 0)"
            " FROM kw_documents d WHERE d.kb = s.kb AND d.level = s.level) FROM kw_stats s"
        ).fetchall()
        df = conn.execute(
            "SELECT (SELECT sum(df) FROM kw_terms),"
            " (SELECT count(*) FROM kw_posting_rows WHERE tf > 0)"
        ).fetchone()
    assert per_kb and all(row[2] == row[4] and row[3] == row[5] for row in per_kb)
    assert df is not None and df[0] == df[1]
    local, _ = local_indexes(survivors)
    with PostgresKeywordIndex(postgres_url, ANALYZER) as index:
        for text in QUERIES:
            terms = ANALYZER.terms(text)
            a = local.search_chunks(terms, 200)
            b = index.search_chunks(terms, 200)
            assert sorted((h.chunk_id, round(h.score, 9)) for h in a) == sorted(
                (h.chunk_id, round(h.score, 9)) for h in b
            )


def test_a_connection_or_a_factory_instead_of_a_url(postgres_url: str) -> None:
    pairs = random_corpus(12, 6)
    terms = ANALYZER.terms("alpha beta")
    with PostgresKeywordIndex(lambda: psycopg.connect(postgres_url), ANALYZER) as made:
        made.update(pairs)  # a connection outside autocommit: its own transactions still
        expected = made.search_chunks(terms, 10)
        assert expected
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        given = PostgresKeywordIndex(conn, ANALYZER)
        assert given.search_chunks(terms, 10) == expected
        given.close()
        assert not conn.closed  # the caller's connection is the caller's to close
    with psycopg.connect(postgres_url) as conn:
        conn.execute("SELECT 1")  # inside a transaction the caller opened
        with PostgresTfidfIndex(conn, ANALYZER) as tfidf:
            assert [h.chunk_id for h in tfidf.search_chunks(terms, 10)]


# --------------------------------------------------------------------------- the cached statistics


@pytest.mark.parametrize("depth", [1, 1000])
def test_capped_rankings_at_any_depth_give_the_local_hits(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
    monkeypatch: pytest.MonkeyPatch,
    depth: int,
) -> None:
    """The capped rankings read the best ``depth × limit`` documents first and go deeper
    (SQL: run again without a depth; here: the next block) when those did not decide: the
    answers never depend on the depth."""
    rnd = random.Random(3)
    # One long item whose every chunk matches, so that a shallow depth holds only its chunks.
    long_text = "\n\n".join(
        f"alpha beta {WORDS[i % len(WORDS)]} filler text here" for i in range(60)
    )
    pairs = [make_pair(rnd, long_text, "alpha guide"), *random_corpus(4, 30)]
    local = local_indexes(pairs)
    indexes[0].update(pairs)
    monkeypatch.setattr(ranked, "DEPTH_PER_RESULT", depth)
    monkeypatch.setattr(client_rank, "DEPTH_PER_RESULT", depth)
    deeper: list[bool] = []
    real_rows, real_order = ranked.ranked_rows, client_rank.top_order

    def rows(cur: Any, sql: str, params: dict[str, Any]) -> list[Any]:
        found = real_rows(cur, sql, params)
        deeper.append(params.get("depth") is None and params.get("cap") is not None)
        return found

    def order(scores: Any, docs: Any, k: int) -> Any:
        # A capped ranking's first block is ``depth × limit`` deep, at most 50 × depth.
        deeper.append(k > depth * 50)
        return real_order(scores, docs, k)

    monkeypatch.setattr(ranked, "ranked_rows", rows)  # what both indexes rank through
    monkeypatch.setattr(client_rank, "top_order", order)
    assert compare_all(local, indexes, ["alpha", "alpha beta", "beta gamma"], [None]) > 50
    assert any(deeper) is (depth == 1)


def test_a_write_through_another_connection_reaches_the_cached_statistics(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex], postgres_url: str
) -> None:
    """The statistics are cached across searches, yet a write committed by another
    process (here another connection and writer) is seen by the next search, inside a
    search's scope too: the generation moved."""
    keyword, tfidf = indexes
    pairs = random_corpus(5, 20)
    keyword.update(pairs[:10])
    terms = ANALYZER.terms("alpha beta")
    with keyword.statistics.search():
        before = keyword.idf(terms)
        keyword.search_chunks(terms, 5)
    other = PostgresKeywordIndex(postgres_url, ANALYZER)  # its own connection and cache
    try:
        other.update(pairs[10:])
    finally:
        other.close()
    local = local_indexes(pairs)
    with keyword.statistics.search():
        after = keyword.idf(terms)
        assert after == local[0].idf(terms)
        assert after != before
        assert keyword.chunk_count() == local[0].chunk_count()
        assert_same_hits(local[0].search_chunks(terms, 20), keyword.search_chunks(terms, 20), 1e-9)
    assert_same_hits(local[1].search_chunks(terms, 20), tfidf.search_chunks(terms, 20), 1e-6)


@pytest.mark.parametrize("postings_read", [False, True], ids=["cold", "all-kept"])
def test_a_write_between_the_statistics_and_the_ranking_is_ranked_with_its_statistics(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
    postgres_url: str,
    postings_read: bool,
) -> None:
    """Inside a search's scope the statistics are trusted after the first read. A write
    committed after it is caught by the ranking's own statements (reading the postings,
    naming the best documents), which then rank again on the new statistics; a ranking
    that needs none (its postings and documents were all read for that generation) answers
    as of the scope's first read. Either way statistics and postings agree."""
    keyword, tfidf = indexes
    pairs = random_corpus(6, 20)
    keyword.update(pairs[:10])
    tfidf.refresh_norms()
    terms = ANALYZER.terms("alpha gamma")
    other = PostgresKeywordIndex(postgres_url, ANALYZER)
    try:
        with keyword.statistics.search():
            keyword.idf(terms)  # read and trusted for the rest of the scope
            if postings_read:
                keyword.search_chunks(terms, 30)
            other.update(pairs[10:])
            found = keyword.search_chunks(terms, 30)
    finally:
        other.close()
    all_kept = postings_read and client_rank.MAX_CLIENT_POSTINGS >= 0
    before, after = local_indexes(pairs[:10]), local_indexes(pairs)
    assert_same_hits((before if all_kept else after)[0].search_chunks(terms, 30), found, 1e-9)
    assert_same_hits(after[0].search_chunks(terms, 30), keyword.search_chunks(terms, 30), 1e-9)
    assert_same_hits(after[1].search_chunks(terms, 30), tfidf.search_chunks(terms, 30), 1e-6)


def test_a_generations_postings_are_read_once_within_their_budget(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Postings read for a ranking are kept for their generation (a second search reads
    none), never more of them than the budget, and the answers stay those of the local
    indexes whatever was dropped."""
    keyword, tfidf = indexes
    monkeypatch.setattr(client_rank, "MAX_NAMED", 6)  # documents' names kept
    pairs = random_corpus(8, 40)
    keyword.update(pairs)
    local = local_indexes(pairs)
    queries = [ANALYZER.terms(text) for text in QUERIES]
    for terms in queries:
        keyword.search_chunks(terms, 10)
    with keyword._db.cursor("test") as cur:
        state = keyword.statistics.read(cur)
        cur.execute("SELECT sum(cardinality(doc)) FROM kw_postings WHERE level = 0")
        total = cur.fetchone()[0]
    if client_rank.MAX_CLIENT_POSTINGS < 0:
        assert not state.postings  # ranked in SQL: nothing was read here
        return
    kept = {term for level, term in state.postings if level == 0}
    assert kept == {t for terms in queries for t in terms if sum(state.frequencies(t, 0))}
    assert 0 < state.kept_postings <= total
    # Kept postings are what a search of the same generation reads: none from the table.
    with monkeypatch.context() as patch:
        patch.setattr(term_postings, "_READ", dict.fromkeys((False, True), "SELECT 1 / 0"))
        hits = keyword.search_chunks(queries[0], 10)
    assert_same_hits(local[0].search_chunks(queries[0], 10), hits, 1e-9)

    budget = max(p.size for p in state.postings.values())
    monkeypatch.setattr(term_postings, "MAX_KEPT_POSTINGS", budget)
    keyword.update(pairs[:1])  # a new generation, with an empty cache
    tfidf.refresh_norms()  # and the next, which the searches below keep
    for terms in queries:
        assert_same_hits(local[0].search_chunks(terms, 10), keyword.search_chunks(terms, 10), 1e-9)
        assert_same_hits(
            local[1].search_chunks(terms, 10, 0.0), tfidf.search_chunks(terms, 10), 1e-6
        )
        with keyword._db.cursor("test") as cur:
            assert 0 < keyword.statistics.read(cur).kept_postings <= budget
        assert 0 < len(keyword.statistics.names) <= 6


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    numbers=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50),
    small=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50),
    reals=st.lists(st.floats(width=32, allow_nan=False), max_size=50),
)
def test_arrays_sent_in_binary_read_back_as_the_same_numbers(
    postgres_url: str, numbers: list[int], small: list[int], reals: list[float]
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT array_send(%s::int8[]), array_send(%s::int4[]), array_send(%s::float4[])",
            (numbers, small, reals),
            binary=True,
        ).fetchone()
    assert term_postings.flat_array([row[0]], ">i8").tolist() == numbers
    assert term_postings.flat_array([row[1], row[1]], ">i4").tolist() == small * 2
    assert term_postings.flat_array([row[2]], ">f4").tolist() == reals


def test_a_search_scope_reads_the_statistics_once(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
) -> None:
    keyword, _ = indexes
    keyword.update(random_corpus(7, 10))
    terms = ANALYZER.terms("alpha beta")
    stats = keyword.statistics
    with stats.search():
        reads = stats.reads
        keyword.has_chunk_index()
        keyword.idf(terms)
        keyword.unseen(terms)
        keyword.search_chunks(terms, 5)
        keyword.has_item_index()
        keyword.idf(terms, items=True)
        keyword.search_items(terms, 5)
        assert stats.reads - reads == 2  # the generation, then the new terms' frequencies
    reads = stats.reads
    keyword.idf(terms)
    keyword.idf(terms)
    assert stats.reads - reads == 2  # outside a scope every call checks the generation


def test_a_rebuild_moves_the_generation_on_even_to_the_same_counts(
    indexes: tuple[PostgresKeywordIndex, PostgresTfidfIndex],
) -> None:
    """A clear keeps the statistics rows (zeroed) and counts itself a change, so that a
    rebuild holding as many documents as before is never taken for the old tables."""
    keyword, _ = indexes
    pairs = random_corpus(8, 12)
    keyword.rebuild(pairs)
    with keyword._db.cursor("test") as cur:
        first = keyword.statistics.read(cur).generation
    keyword.rebuild(pairs)
    with keyword._db.cursor("test") as cur:
        second = keyword.statistics.read(cur).generation
    assert second != first
    assert all(a <= b for a, b in zip(first, second, strict=True))
    local = local_indexes(pairs)
    terms = ANALYZER.terms("alpha")
    assert keyword.idf(terms) == local[0].idf(terms)
