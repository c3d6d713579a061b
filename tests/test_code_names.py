"""Code chunks: kind, the names they use and import, their chunk_names rows on both backends,
the symbol / references search filters ("who uses X"), and the migrations that add them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from knowledge_agent import KnowledgeAgentCore, KnowledgeChunk, KnowledgeItem
from knowledge_agent.chunking import ChunkConfig
from knowledge_agent.cli import cli
from knowledge_agent.processors.code_names import python_names, scanned_names
from knowledge_agent.processors.registry import process_bytes
from knowledge_agent.protocols import Storage
from knowledge_agent.storage import SQLiteStorageManager

NET = '''import time
from http import client as http_client


def backoff(attempt: int) -> float:
    """Seconds to wait before the next retry."""
    return min(60, 2 ** attempt)


def fetch(url, tries=5):
    # retry until the server replies
    for attempt in range(tries):
        time.sleep(backoff(attempt))
        reply = http_client.request(url)
        if reply:
            return reply
'''
JOBS = '''from net import backoff


class Job:
    def run(self):
        """Run the job again after a retry pause."""
        self.pause = backoff(3)
        return self.pause
'''
OTHER = '''def retry_pause():
    """A retry pause without backoff."""
    return 5
'''


def test_a_function_chunk_has_symbol_kind_signature_and_exact_lines() -> None:
    config = ChunkConfig(min_chunk_size=20, max_chunk_size=400)
    document = process_bytes(NET.encode(), "net.py", config)
    (fetch,) = [c for c in document.chunks if c.metadata.get("symbol") == "fetch"]
    metadata = fetch.metadata
    assert (metadata["kind"], metadata["signature"]) == ("function", "def fetch(url, tries=5)")
    lines = NET.split("\n")
    assert lines[metadata["start_line"] - 1].startswith("def fetch")
    assert lines[metadata["end_line"] - 1].strip() == "return reply"
    assert metadata["references"] == ["backoff", "http_client.request", "time.sleep"]
    assert document.metadata["imports"] == ["time", "http.client"]


def test_python_names_leave_out_builtins_parameters_and_locals() -> None:
    names = {use.name for use in python_names(NET) if use.role == "reference"}
    assert names == {"backoff", "time.sleep", "http_client.request"}
    jobs = {use.name for use in python_names(JOBS)}
    assert jobs == {"net.backoff", "backoff", "pause"}, "self. is dropped from a chain"


def test_the_offsets_of_names_count_characters_not_bytes() -> None:
    source = "x = 'é€'; y = backoff()\n"
    (use,) = [u for u in python_names(source) if u.name == "backoff"]
    assert source[use.offset : use.offset + 7] == "backoff"


def test_brace_languages_give_calls_and_imports_but_not_comments_or_definitions() -> None:
    source = (
        'import { retry } from "./lib/retry";\n'
        "// import nothing from 'nowhere'\n"
        "function load(url) {\n"
        "  return retry(() => api.get(url)); // fetch(later)\n"
        "}\n"
    )
    uses = scanned_names(source, "javascript")
    assert [(u.role, u.name) for u in uses] == [
        ("import", "./lib/retry"),
        ("reference", "retry"),
        ("reference", "api.get"),
    ]


# -- storage rows, on both backends --------------------------------------------------------


def _item(item_id: str) -> KnowledgeItem:
    return KnowledgeItem(id=item_id, title=item_id, content="x" * 40)


def _chunk(chunk_id: str, index: int, **metadata: Any) -> KnowledgeChunk:
    return KnowledgeChunk(
        id=chunk_id, chunk_index=index, content="x", end_position=1, metadata=metadata
    )


def test_chunk_names_are_written_replaced_and_deleted_with_their_chunks(
    backend_storage: Storage,
) -> None:
    backend_storage.save_item_with_chunks(
        _item("i1"),
        [
            _chunk("c1", 0, symbols=["Parser.parse_args"], references=["os.path.join"]),
            _chunk("c2", 1, imports=["./lib/retry"], references=["retry"]),
            _chunk("c3", 2),
        ],
    )
    named = backend_storage.chunks_named
    assert named(["parse_args"], "symbol") == [("c1", "i1")]
    assert named(["Parser.parse_args"], "symbol") == [("c1", "i1")]
    assert named(["parse_args"], "reference") == []
    assert named(["join"], "reference") == [("c1", "i1")]
    assert sorted(named(["retry"], "reference")) == [("c2", "i1")]
    backend_storage.save_chunks("i1", [_chunk("c4", 0, references=["join"])])
    assert named(["join"], "reference") == [("c4", "i1")]
    assert named(["retry"], "reference") == []
    backend_storage.delete_item("i1")
    assert named(["join"], "reference") == []


# -- the search filters, on both backends ----------------------------------------------------


def _code(folder: Path) -> Path:
    folder.mkdir()
    for name, text in (("net.py", NET), ("jobs.py", JOBS), ("other.py", OTHER)):
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic"])
def test_references_and_symbol_filter_before_ranking_in_every_engine(
    open_core: Callable[[], KnowledgeAgentCore], tmp_path: Path, mode: str
) -> None:
    core = open_core()
    core.collect_knowledge(_code(tmp_path / "src"))

    def titles(**filters: Any) -> list[str]:
        return sorted(r.item.title for r in core.search("retry", mode=mode, **filters))

    assert titles() == ["jobs.py", "net.py", "other.py"]
    assert titles(references="backoff") == ["jobs.py", "net.py"]
    assert titles(symbol="backoff") == ["net.py"]
    assert titles(references="time.sleep") == ["net.py"]
    assert titles(symbol="Job.run", references="backoff") == ["jobs.py"]
    assert titles(references="no_such_name") == []
    assert titles(references="backoff", level="item") == ["jobs.py", "net.py"]


def test_facets_count_only_the_documents_the_name_filters_allow(
    open_core: Callable[[], KnowledgeAgentCore], tmp_path: Path
) -> None:
    core = open_core()
    core.collect_knowledge(_code(tmp_path / "src"))
    assert core.facets("retry").total == 3
    assert core.facets("retry", references="backoff").total == 2
    assert core.facets("retry", symbol="Job.run", references="backoff").total == 1
    assert core.facets("retry", references="no_such_name").total == 0


def test_the_search_code_tool_takes_symbol_and_references(tmp_path: Path) -> None:
    from knowledge_agent.server.mcp_tools import search_code

    with KnowledgeAgentCore(tmp_path / "kb") as core:
        core.collect_knowledge(_code(tmp_path / "src"))

        def titles(**filters: Any) -> list[str]:
            answer = search_code(core, "retry", **filters)
            return sorted(result["title"] for result in answer["results"])

        assert titles() == ["jobs.py", "net.py", "other.py"]
        assert titles(references="backoff") == ["jobs.py", "net.py"]
        assert titles(symbol=["Job.run"], references="backoff") == ["jobs.py"]
        facets = search_code(core, "retry", references="backoff", facets=True)["facets"]
        assert facets["total"] == 2


def test_search_references_on_the_command_line(tmp_path: Path) -> None:
    data = tmp_path / "kb"
    with KnowledgeAgentCore(data) as core:
        core.collect_knowledge(_code(tmp_path / "src"))
    result = CliRunner().invoke(
        cli,
        ["--data-dir", str(data), "search", "retry", "--references", "backoff", "--files"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert sorted(Path(line).name for line in result.output.split()) == ["jobs.py", "net.py"]


# -- migrations -----------------------------------------------------------------------------


def _symbol_chunks() -> list[KnowledgeChunk]:
    return [_chunk("c1", 0, symbols=["Job.run"], references=["backoff"]), _chunk("c2", 1)]


def test_a_sqlite_database_of_schema_3_gets_its_chunk_names_filled(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with SQLiteStorageManager(path) as storage:
        storage.save_item_with_chunks(_item("i1"), _symbol_chunks())
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE chunk_names")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with SQLiteStorageManager(path) as storage:
        assert storage.chunks_named(["run"], "symbol") == [("c1", "i1")]
        assert storage.chunks_named(["backoff"], "reference") == [("c1", "i1")]


def test_a_postgresql_storage_of_version_1_gets_its_chunk_names_filled(postgres_url: str) -> None:
    import psycopg

    from knowledge_agent.backends.postgres.storage import PostgresStorage

    with PostgresStorage(postgres_url) as storage:
        storage.save_item_with_chunks(_item("i1"), _symbol_chunks())
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE chunk_names")
        conn.execute("UPDATE schema_versions SET version = 1 WHERE component = 'storage'")
    with PostgresStorage(postgres_url) as storage:
        assert storage.chunks_named(["run"], "symbol") == [("c1", "i1")]
        assert storage.chunks_named(["backoff"], "reference") == [("c1", "i1")]
