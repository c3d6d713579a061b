"""A knowledge base on a PostgreSQL server (``backend="postgresql://…"``): the same answers as a
data folder, writes searchable when they return in every process, several writer processes at
once without a lock, searches on a hot standby, and the command line and ``migrate`` on it."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from files import write
from postgres import PostgresServer, database_of

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.errors import ConfigError, StorageError

GUARD_S = 60.0  # a hang guard, not a timing

NOTES = {
    "deploy.md": "# Deploy\n\nRoll back a release with the revert script.\n\n"
    "## Cache\n\nThe cache keeps pages for max-age seconds.\n",
    "ferry.md": "# Ferry\n\nThe harbour ferry leaves every hour from pier two.\n",
    "chinese.md": "# 部署\n\n回滚发布时运行还原脚本。缓存保存页面。\n",
}
QUERIES = ["roll back a release", "max-age seconds", "harbour ferry", "回滚发布", "pier"]


def answers(core: KnowledgeAgentCore) -> dict[str, list[tuple[str | None, str, float, float]]]:
    found = {}
    for query in QUERIES:
        found[query] = [
            (
                result.item.source_uri,
                result.matched_chunks[0].heading,
                round(result.relevance_score, 6),
                round(result.confidence, 6),
            )
            for result in core.search(query)
        ]
    return found


def test_the_same_notes_give_the_same_answers_as_a_data_folder(
    tmp_path: Path, postgres_url: str
) -> None:
    for name, text in NOTES.items():
        write(tmp_path / "notes" / name, text)
    with KnowledgeAgentCore(tmp_path / "data", workers=1) as local:
        local.collect_knowledge(tmp_path / "notes")
        expected = answers(local)
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as server:
        server.collect_knowledge(tmp_path / "notes")
        assert answers(server) == expected
        assert server.status().consistent and server.status().items == len(NOTES)
        assert server.backend_url == postgres_url  # no password in the test server's URL


def _add_notes(url: str, writer: int, count: int) -> None:
    with KnowledgeAgentCore(backend=url) as core:
        for number in range(count):
            core.add_text(f"Note {number} of writer w{writer} about tide{number}.", kb=f"w{writer}")


def test_writer_processes_need_no_lock_and_lose_nothing(postgres_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_add_notes, args=(postgres_url, n, 25)) for n in range(3)]
    with KnowledgeAgentCore(backend=postgres_url) as reader:
        for process in writers:
            process.start()
        seen = 0
        while any(process.is_alive() for process in writers):
            # Every search answers while others write, and never loses what it saw.
            now = len(reader.search("tide3", limit=10))
            assert now >= seen
            seen = now
        for process in writers:
            process.join(GUARD_S)
            assert process.exitcode == 0
        assert reader.status().items == 75 and reader.status().consistent
        for writer in range(3):
            hits = reader.search("tide7", limit=30, kb=f"w{writer}")
            assert {hit.item.kb for hit in hits} == {f"w{writer}"}
            assert "tide7." in hits[0].matched_chunks[0].content and len(hits) == 25


def test_a_write_is_searchable_by_another_process_when_it_returns(postgres_url: str) -> None:
    with (
        KnowledgeAgentCore(backend=postgres_url) as first,
        KnowledgeAgentCore(backend=postgres_url) as second,
    ):
        assert second.search("lighthouse keeper") == []
        first.add_text("The lighthouse keeper logs the weather.", title="Log")
        assert [hit.item.title for hit in second.search("lighthouse keeper")] == ["Log"]
        first.delete_knowledge_item(first.list_items()[0].id)
        assert second.search("lighthouse keeper") == []


def test_searches_go_to_a_hot_standby_and_writes_to_the_primary() -> None:
    primary_server = PostgresServer()  # its own: a base backup copies every database
    try:
        postgres_url = primary_server.new_database()
        with KnowledgeAgentCore(backend=postgres_url) as primary:
            primary.add_text("Before the standby: the tide table.", title="Tide")
        standby = primary_server.standby()
        try:
            standby_url = standby.url(database_of(postgres_url))
            with KnowledgeAgentCore(backend=postgres_url, read_backend=standby_url) as core:
                assert [hit.item.title for hit in core.search("tide table")] == ["Tide"]
                core.add_text("After the standby: the ferry timetable.", title="Ferry")
                deadline = time.monotonic() + GUARD_S
                while not core.search("ferry timetable"):  # replayed by the standby
                    assert time.monotonic() < deadline, "the standby never replayed the write"
                    time.sleep(0.05)
                assert [hit.item.title for hit in core.search("ferry timetable")] == ["Ferry"]
                assert core.rebuild_index() == 2  # on the primary: the standby cannot write
                assert [hit.item.title for hit in core.search("tide table")] == ["Tide"]
            with (
                pytest.raises(StorageError, match="hot standby"),
                KnowledgeAgentCore(backend=standby_url) as on_standby,
            ):
                on_standby.add_text("A write sent to the standby.")
        finally:
            standby.stop()
    finally:
        primary_server.stop()


def test_what_the_server_backend_refuses(tmp_path: Path, postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="read_backend"):
        KnowledgeAgentCore(tmp_path, read_backend=postgres_url)


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_command_line_migrates_a_folder_then_works_on_the_server(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
    monkeypatch.delenv("KNOWLEDGE_AGENT_BACKEND", raising=False)
    for name, text in NOTES.items():
        write(tmp_path / "notes" / name, text)
    data = str(tmp_path / "data")
    cli_json("--data-dir", data, "add", str(tmp_path / "notes"))
    local = cli_json("--data-dir", data, "search", "roll back a release")
    report = cli_json("--data-dir", data, "migrate", "--to", postgres_url)
    assert report["items"] == len(NOTES) and report["roots"] == 1 and report["sources"] == 3
    assert cli_json("--backend", postgres_url, "search", "roll back a release") == local
    monkeypatch.setenv("KNOWLEDGE_AGENT_BACKEND", postgres_url)
    write(tmp_path / "notes" / "new.md", "# New\n\nThe lighthouse keeper logs the weather.\n")
    cli_json("sync")  # the roots went across: sync on the server picks up the new file
    found = cli_json("search", "lighthouse keeper")
    assert [Path(hit["path"]).name for hit in found["results"]][:1] == ["new.md"]
    stats = cli_json("stats")["status"]
    assert stats["items"] == len(NOTES) + 1 and stats["backend"] == postgres_url
    assert cli_json("check")["consistent"] is True


def test_check_finds_postings_that_disagree_and_repair_rebuilds_them(postgres_url: str) -> None:
    import psycopg

    with KnowledgeAgentCore(backend=postgres_url) as core:
        core.add_text("The lighthouse keeper logs the weather.", title="Log")
        core.add_text("The harbour ferry leaves every hour.", title="Ferry")
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # past the index writer
            conn.execute("DELETE FROM knowledge_items WHERE title = 'Ferry'")
        found = core.check()
        assert not found.consistent and not found.repaired
        assert any("keyword index holds 2 items and 2 chunks" in p for p in found.problems)
        repaired = core.check(repair=True)
        assert repaired.consistent and repaired.repaired
        assert (repaired.keyword_items, repaired.keyword_chunks) == (1, 1)
        assert core.search("harbour ferry") == []
        assert [hit.item.title for hit in core.search("lighthouse keeper")] == ["Log"]


def _analyses_and_norms(url: str) -> tuple[int, bool]:
    """How many times the postings were analysed by hand (not by autovacuum), and whether
    the stored TF-IDF norms are those of the current statistics."""
    with psycopg.connect(url, autocommit=True) as conn:
        analysed = conn.execute(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'kw_postings'"
        ).fetchone()
        fresh = conn.execute("SELECT bool_and(changes = norms_at) FROM kw_stats").fetchone()
    assert analysed is not None and fresh is not None
    return int(analysed[0]), bool(fresh[0])


SHIPS = [
    f"The {ship} ship sails from harbour {n} carrying {cargo}" + " slowly" * n + "."
    for n, (ship, cargo) in enumerate(
        [("red", "grain"), ("blue", "coal"), ("green", "timber"), ("white", "salt")] * 5
    )
]


def _ranked(core: KnowledgeAgentCore) -> list[tuple[str, float]]:
    return [
        (hit.item.title, round(hit.relevance_score, 6))
        for hit in core.search("blue ship coal", limit=20, mode="semantic")
    ]


def test_a_bulk_write_leaves_the_tables_analysed_and_the_norms_fresh(
    tmp_path: Path, postgres_url: str
) -> None:
    late = "A blue ship of coal and coal again."
    with KnowledgeAgentCore(tmp_path / "data", workers=1) as local:
        with local.batch():
            for number, text in enumerate(SHIPS):
                local.add_text(text, title=f"Ship {number}")
        expected = _ranked(local)
        local.add_text(late, title="Late")
        expected_late = _ranked(local)
    assert expected_late != expected
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as server:
        backend: Any = server._backend
        backend.upkeep.minimum = len(SHIPS)
        with server.batch():
            for number, text in enumerate(SHIPS):
                server.add_text(text, title=f"Ship {number}")
        # The batch's end analysed the tables and refreshed the norms: no search did.
        assert _analyses_and_norms(postgres_url) == (1, True)
        assert _ranked(server) == expected
        # One more document is no bulk write: the stored norms are stale, and a search
        # neither uses nor refreshes them (it computes them from the vectors it keeps).
        server.add_text(late, title="Late")
        assert _analyses_and_norms(postgres_url) == (1, False)
        assert _ranked(server) == expected_late
        assert _analyses_and_norms(postgres_url) == (1, False)


def _segments(url: str) -> tuple[int, int]:
    """The postings rows, and the segments they are in."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT seg) FROM kw_postings").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _every_mode(core: KnowledgeAgentCore) -> dict[str, list[tuple[str, float]]]:
    return {
        f"{mode} {query}": [
            (hit.item.title, round(hit.relevance_score, 6))
            for hit in core.search(query, limit=30, mode=mode)
        ]
        for mode in ("hybrid", "keyword", "semantic")
        for query in ("blue ship coal", "harbour salt slowly", "green timber")
    }


def _one_by_one(core: KnowledgeAgentCore) -> None:
    with core.batch():
        for number, text in enumerate(SHIPS):
            core.add_text(text, title=f"Ship {number}", item_id=f"ship{number}")


def _edit(core: KnowledgeAgentCore) -> None:
    core.add_text("A green ship of salt, and coal.", title="Ship 2", item_id="ship2")
    core.delete_knowledge_item("ship5")
    core.add_text("The blue ship sails late.", title="Late", item_id="late")


def test_small_writes_are_merged_and_search_edit_and_remove_as_before(
    tmp_path: Path, postgres_url: str
) -> None:
    with KnowledgeAgentCore(tmp_path / "data", workers=1) as local:
        _one_by_one(local)
        expected = _every_mode(local)
    # A local index counts removed documents until it merges: compare with one built afresh.
    with KnowledgeAgentCore(tmp_path / "edited", workers=1) as local:
        with local.batch():
            for number, text in enumerate(SHIPS):
                if number not in (2, 5):
                    local.add_text(text, title=f"Ship {number}", item_id=f"ship{number}")
            _edit(local)
        expected_edited = _every_mode(local)
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as server:
        backend: Any = server._backend
        backend.upkeep.minimum = len(SHIPS)
        backend.upkeep.merge_at = 4
        _one_by_one(server)
        # One write per note, then merged: one segment per level, a row per term and level.
        rows, segments = _segments(postgres_url)
        assert segments == 2
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            terms = conn.execute("SELECT count(DISTINCT (level, term)) FROM kw_postings")
            assert rows == terms.fetchone()[0]  # type: ignore[index]
        assert _every_mode(server) == expected
        # Replacing and removing documents of the merged segment, then adding one after it.
        _edit(server)
        assert _segments(postgres_url)[1] == 4  # two writes after the two merged
        backend.engine.semantic_searcher.refresh_stale_norms = False  # norms of the postings
        assert _every_mode(server) == expected_edited
        backend.engine.semantic_searcher.refresh_stale_norms = True
        assert _every_mode(server) == expected_edited
        assert server.check().consistent


def test_a_small_base_written_a_document_at_a_time_is_tidied_at_the_batchs_end(
    postgres_url: str,
) -> None:
    """A hundred documents added one by one in a batch (a new base: every one a change) get
    the upkeep with the default thresholds: their one-document segments merged, the tables
    analysed, the norms fresh. The statistics' statement searches the postings' index even
    in a table never analysed."""
    from knowledge_agent.backends.postgres.statistics import _READ

    with KnowledgeAgentCore(backend=postgres_url, workers=1) as server:
        with server.batch():
            for number in range(100):
                server.add_text(SHIPS[number % len(SHIPS)] + f" Log {number}.", title="Log")
        assert server._backend.upkeep.runs == 1  # type: ignore[attr-defined]
    assert _analyses_and_norms(postgres_url) == (1, True)
    assert _segments(postgres_url)[1] == 2  # a segment per level
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        # As before any analysis: the planner knows nothing of the rows.
        conn.execute("CREATE TEMPORARY TABLE kw_postings (LIKE public.kw_postings INCLUDING ALL)")
        conn.execute("INSERT INTO kw_postings SELECT * FROM public.kw_postings")
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + _READ, (["ship", "harbour"],)))
    assert "Index Cond" in plan and "Seq Scan on kw_postings" not in plan


def test_a_collect_that_indexes_along_has_one_upkeep_at_its_end(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowledge_agent.core import knowledge_agent_core

    monkeypatch.setattr(knowledge_agent_core, "_INDEX_ALONG_BYTES", 1)  # after every file
    for number, text in enumerate(SHIPS):
        write(tmp_path / "notes" / f"ship{number}.md", f"# Ship {number}\n\n{text}\n")
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as server:
        backend: Any = server._backend
        backend.upkeep.minimum = 1
        flushes = []
        flush = backend.flush
        monkeypatch.setattr(backend, "flush", lambda *a, **k: (flushes.append(1), flush(*a, **k)))
        server.collect_knowledge(tmp_path / "notes")
        assert len(flushes) > len(SHIPS) // 2  # it indexed along
        assert backend.upkeep.runs == 1 and _analyses_and_norms(postgres_url) == (1, True)
        # 40 documents (chunks and items): the upkeep comes once 2 × 3 more are a tenth.
        for number in range(2):
            server.add_text(f"One more ship {number}.", title="More")
            assert backend.upkeep.runs == 1
        server.add_text("Two more ships.", title="More")
        assert backend.upkeep.runs == 2 and _analyses_and_norms(postgres_url) == (2, True)


def _postings(url: str) -> list[list[tuple[Any, ...]]]:
    """Every posting and every term's document frequencies, wherever they are stored."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            conn.execute(select).fetchall()
            for select in (
                "SELECT kb, level, term, doc, tf, tf_head, w_vec, norm_len, norm_len_head"
                " FROM kw_posting_rows ORDER BY level, term, kb, doc",
                "SELECT kb, level, term, df, df_head, df_vec FROM kw_terms ORDER BY 2, 3, 1",
            )
        ]


def test_merging_keeps_every_posting_and_frequency(postgres_url: str) -> None:
    from knowledge_agent.backends.postgres.merges import merge_small_segments

    paragraph = "The {} ship leaves the harbour with {} in its hold, and the crew sings. "
    with KnowledgeAgentCore(backend=postgres_url, workers=1) as server:
        backend: Any = server._backend
        backend.upkeep.minimum = 10**9  # no upkeep: the merge is run below
        with server.batch():
            for number, text in enumerate(SHIPS):
                server.add_text(
                    text, title=f"Ship {number}", kb="fleet" if number % 3 else "default"
                )
            # Documents of several chunks: rows of several postings each, at both levels.
            for number in range(3):
                long = "\n\n".join(
                    paragraph.format(colour, cargo) * 12
                    for colour, cargo in (("red", "grain"), ("blue", "coal"), ("green", "salt"))
                )
                server.add_text(long, title=f"Log {number}")
        assert len(server.search("crew sings", limit=5)[0].matched_chunks) >= 1
        before, rows = _postings(postgres_url), _segments(postgres_url)[0]
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            several = conn.execute("SELECT max(cardinality(doc)) FROM kw_postings").fetchone()
            assert several is not None and several[0] > 1
            assert merge_small_segments(conn, least=2) == rows
        assert _postings(postgres_url) == before
        assert _segments(postgres_url)[1] == 4  # one per knowledge base and level
        assert server.check().consistent
