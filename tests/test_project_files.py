"""001's .agentos/kb_config.json and 002's config.toml (with its knowledge/<kb>/ folders) are
read when a project has no .knowledge-agent.toml: every key applies, or is listed as not used."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from embedding_server import EmbeddingServer
from files import write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.errors import ConfigError
from knowledge_agent.project_files.model import SpecFile
from knowledge_agent.search.ranking.boosts import DEFAULT_DOC_TYPE_WEIGHTS
from knowledge_agent.server.knowledge_tools import knowledge_semantic_search
from knowledge_agent.settings import (
    CONFIG_FILE_NAME,
    ENV_HOME,
    LOCAL_DATA_DIR,
    NETWORK_PROVIDERS,
    Settings,
    _merged_config,
    find_project,
    load_config,
    resolve_settings,
    trust_config_file,
)
from knowledge_agent.trust import TrustStore

KB_CONFIG = ".agentos/kb_config.json"
SECRET = "sk-not-a-real-key-but-a-secret-all-the-same"

# 001's example, as its README gives it.
SPEC_001 = {
    "scan_paths": ["docs/**/*.md", "README.md", "adr/**/*.md"],
    "exclude_patterns": ["node_modules/**", ".history/**", ".git/**"],
    "chunk_size": {"min": 300, "max": 800},
    "index_weights": {"heading": 2.0, "first_paragraph": 1.5, "code_blocks": 1.2},
    "doc_type_weights": {"adr": 1.5, "runbook": 1.3, "spec": 1.4},
}


def config_toml(base_url: str = "http://127.0.0.1:9/v1", **knowledge: Any) -> str:
    """002's config.toml as its README gives it, pointed at ``base_url``."""
    table = {
        "enabled": True,
        "base_dir": "knowledge",
        "auto_scan": True,
        "auto_embed": True,
        "scan_interval": 60,
        "embed_batch_size": 64,
        "chunk_size": 10,
        "chunk_overlap": 2,
        "default_top_k": 5,
        "enable_rerank": True,
        "rerank_top_k": 3,
        **knowledge,
    }
    lines = [
        "[models.embedding]",
        f'api_url = "{base_url}"',
        f'api_key = "{SECRET}"',
        'model_name = "text-embedding-3-small"',
        "queue_interval_seconds = 0.0",
        "dimensions = 0",
        'query_instruction = ""',
        'document_instruction = ""',
        "",
        "[models.rerank]",
        f'api_url = "{base_url}"',
        f'api_key = "{SECRET}"',
        'model_name = "text-rerank-001"',
        "queue_interval_seconds = 0.0",
        'query_instruction = ""',
        "",
        "[knowledge]",
        *(f"{key} = {json.dumps(value)}" for key, value in table.items()),
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def _user_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No real user data folder or home variable leaks into a test."""
    monkeypatch.setattr("platformdirs.user_data_dir", lambda *a, **k: str(tmp_path / "user-data"))
    monkeypatch.delenv(ENV_HOME, raising=False)


def resolve(cwd: Path, user_config: Path, **kwargs: Any) -> Settings:
    return resolve_settings(
        kwargs.pop("data_dir", None), cwd=cwd, trust=TrustStore(user_config), environ={}, **kwargs
    )


def run(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def ok(result: Result) -> Any:
    """The JSON a successful command printed."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def listed_paths(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> set[str]:
    items = ok(run(cwd, monkeypatch, "list", "--json", *args))["items"]
    return {os.path.relpath(item["source_uri"], cwd).replace(os.sep, "/") for item in items}


def spec_001(folder: Path, data: dict[str, Any] | str) -> Path:
    text = data if isinstance(data, str) else json.dumps(data, indent=2)
    return write(folder / KB_CONFIG, text)


# -- 001: kb_config.json ----------------------------------------------------------------------


def test_scan_paths_and_exclude_patterns_choose_what_sync_collects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    for name in (
        "docs/guide.md",
        "docs/deep/er/setup.md",
        "docs/drafts/wip.md",
        "docs/notes.txt",
        "README.md",
        "CHANGES.md",
        "adr/0001-use-sqlite.md",
        "other/readme.md",
    ):
        write(repo / name, f"# {name}\n\nThe lighthouse keeper's notes in {name}.\n")
    spec_001(
        repo,
        {"scan_paths": ["docs/**/*.md", "README.md", "adr/*.md"], "exclude_patterns": ["drafts/"]},
    )
    ok(run(repo, monkeypatch, "sync", "--json"))
    assert listed_paths(repo, monkeypatch) == {
        "docs/guide.md",
        "docs/deep/er/setup.md",
        "README.md",
        "adr/0001-use-sqlite.md",
    }
    assert (repo / LOCAL_DATA_DIR).is_dir()  # the knowledge base lives in the project


def test_chunk_size_counts_tokens_and_sets_the_chunk_sizes(
    tmp_path: Path, user_config: Path
) -> None:
    text = "# Handbook\n\n" + "\n\n".join(
        f"Paragraph {n} tells the keeper how lamp {n} is trimmed, cleaned and lit at dusk."
        for n in range(60)
    )
    counts = {}
    for low, high in ((300, 800), (20, 50)):
        repo = tmp_path / f"repo-{high}"
        spec_001(repo, {"chunk_size": {"min": low, "max": high}})
        found = resolve(repo, user_config)
        assert found.config.chunk_config.min_chunk_size == low * 4
        assert found.config.chunk_config.max_chunk_size == high * 4
        with KnowledgeAgentCore(chunk_config=found.config.chunk_config) as core:
            item = core.add_text(text, title="Handbook")
            chunks = core.storage.get_chunks_for_item(item.id)
        assert all(len(chunk.content) <= high * 4 for chunk in chunks)
        counts[high] = len(chunks)
    # The text is 4,900 characters: 2 to 4 chunks of 1,200 to 3,200, many of at most 200.
    assert 2 <= counts[800] <= 4 and counts[50] > 20


def test_002_chunk_size_and_overlap_cut_windows_of_lines(tmp_path: Path, user_config: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "config.toml", config_toml(chunk_size=4, chunk_overlap=1))
    chunk_config = resolve(repo, user_config).config.chunk_config
    assert (chunk_config.strategy, chunk_config.chunk_size, chunk_config.chunk_overlap) == (
        "lines",
        4,
        1,
    )
    text = "\n\n".join(f"line {n} of the keeper's log" for n in range(10))
    with KnowledgeAgentCore(chunk_config=chunk_config) as core:
        item = core.add_text(text, title="Log")
        chunks = core.storage.get_chunks_for_item(item.id)
    # Ten non-empty lines, windows of 4 starting 3 apart: lines 0-3, 3-6, 6-9.
    firsts = [chunk.content.splitlines()[0] for chunk in chunks]
    assert firsts == [
        "line 0 of the keeper's log",
        "line 3 of the keeper's log",
        "line 6 of the keeper's log",
    ]
    assert all(len([x for x in c.content.splitlines() if x.strip()]) == 4 for c in chunks)


def test_doc_type_weights_override_the_built_in_ones(tmp_path: Path, user_config: Path) -> None:
    text = "Rotating the backup encryption key: stop the writer, rotate, start it again."

    def first(weights: dict[str, float] | None) -> str:
        repo = tmp_path / f"repo-{len(weights or {})}"
        spec_001(repo, {} if weights is None else {"doc_type_weights": weights})
        found = resolve(repo, user_config)
        with KnowledgeAgentCore(search_config=found.config.search_config) as core:
            core.add_text(text, title="Key rotation", doc_type="adr")
            core.add_text(text, title="Key rotation", doc_type="runbook")
            return core.search("rotate the backup encryption key")[0].item.doc_type

    assert first(None) == "adr"  # the built-in weights: adr 1.5, runbook 1.3
    assert first({"runbook": 3.0, "api_spec": 1.6}) == "runbook"
    weights = resolve(tmp_path / "repo-2", user_config).config.search_config.doc_type_weights
    assert dict(weights) == {**DEFAULT_DOC_TYPE_WEIGHTS, "runbook": 3.0, "api_spec": 1.6}


def test_keys_without_a_counterpart_are_accepted_logged_and_listed(
    tmp_path: Path, user_config: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = tmp_path / "repo"
    path = spec_001(repo, {**SPEC_001, "index_weights": {"heading": 3.0, "code_blocks": 1.2}})
    with caplog.at_level(logging.INFO, logger="knowledge_agent.settings"):
        found = resolve(repo, user_config)
    assert {(note.file, note.key) for note in found.config.not_used} == {
        (path, "index_weights.heading"),
        (path, "index_weights.code_blocks"),
    }
    logged = [record.getMessage() for record in caplog.records]
    assert f"{path}: index_weights.code_blocks is not used: " in logged[1]
    # 001's own default heading weight is what the index does: nothing to say about it.
    spec_001(repo, {**SPEC_001, "colour": "blue"})
    keys = {note.key for note in resolve(repo, user_config).config.not_used}
    assert keys == {"index_weights.first_paragraph", "index_weights.code_blocks", "colour"}


# -- 002: config.toml and knowledge/<kb>/ -----------------------------------------------------


def knowledge_project(repo: Path, text: str) -> Path:
    write(repo / "config.toml", text)
    cardio = repo / "knowledge" / "cardio"
    write(cardio / "intro.md", "Cardiology papers: arrhythmia and heart failure.\n")
    write(cardio / "texts" / "arrhythmia.txt", "Atrial fibrillation is an irregular rhythm.\n")
    write(cardio / "texts" / "trials" / "beta.md", "# Beta blockers\n\nThey slow the rhythm.\n")
    write(cardio / "chroma" / "chroma.sqlite3.txt", "vector store internals rhythm\n")
    write(cardio / ".manifest.json", '{"texts/arrhythmia.txt": "abc"}\n')
    write(cardio / "notes.md", "# Loose notes\n\nNot under texts/: not a document.\n")
    write(repo / "knowledge" / "faq" / "texts" / "reset.txt", "How to reset a password.\n")
    return repo


def test_knowledge_folders_are_knowledge_bases_named_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = knowledge_project(tmp_path / "repo", "[knowledge]\nbase_dir = 'knowledge'\n")
    ok(run(repo, monkeypatch, "sync", "--json"))
    kbs = {
        kb["name"]: kb
        for kb in ok(run(repo, monkeypatch, "kb", "list", "--json"))["knowledge_bases"]
    }
    assert set(kbs) == {"cardio", "faq"}
    assert kbs["cardio"]["description"] == "Cardiology papers: arrhythmia and heart failure."
    assert kbs["faq"]["description"] == ""
    assert listed_paths(repo, monkeypatch, "--kb", "cardio") == {
        "knowledge/cardio/texts/arrhythmia.txt",
        "knowledge/cardio/texts/trials/beta.md",
    }
    assert listed_paths(repo, monkeypatch, "--kb", "faq") == {"knowledge/faq/texts/reset.txt"}


def test_default_top_k_sets_the_number_of_results_and_n_still_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_config: Path
) -> None:
    repo = tmp_path / "repo"
    write(repo / "config.toml", "[knowledge]\ndefault_top_k = 2\n")
    for number in range(4):
        write(
            repo / "knowledge" / "ops" / "texts" / f"restore-{number}.txt",
            f"Restore step {number}: copy the backup archive back and check it.\n",
        )
    ok(run(repo, monkeypatch, "sync", "--json"))
    assert len(ok(run(repo, monkeypatch, "search", "restore backup", "--json"))["results"]) == 2
    found = ok(run(repo, monkeypatch, "search", "restore backup", "-n", "3", "--json"))
    assert len(found["results"]) == 3
    # knowledge_semantic_search without top_k: the same default.
    config = resolve(repo, user_config).config
    with KnowledgeAgentCore(repo / LOCAL_DATA_DIR, search_config=config.search_config) as core:
        answer = knowledge_semantic_search(core, "ops", "restore the backup")
        assert answer["count"] == 2
        assert knowledge_semantic_search(core, "ops", "restore the backup", top_k=4)["count"] == 4


def test_a_trusted_config_toml_configures_the_embedding_and_rerank_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_config: Path
) -> None:
    with EmbeddingServer() as server:
        text = config_toml(server.base_url, embed_batch_size=2, rerank_top_k=1, default_top_k=3)
        text = text.replace('query_instruction = ""', 'query_instruction = "query: "', 1)
        repo = knowledge_project(tmp_path / "repo", text)
        untrusted = run(repo, monkeypatch, "sync", "--json")
        ok(untrusted)
        assert server.requests == []  # nothing was sent to a service an untrusted file named
        assert untrusted.stderr.splitlines() == [
            f"warning: {repo / 'config.toml'} is not trusted: ignoring [models.embedding] "
            "(api_url, api_key) and [models.rerank] (api_url, api_key); run `knowledge-agent "
            "trust` to use them"
        ]

        trusted = run(repo, monkeypatch, "trust")
        assert trusted.stdout.splitlines() == [
            f"Trusted {repo / 'config.toml'} (sha256 "
            + trusted.stdout.split("sha256 ")[1].split(")")[0]
            + ").",
            "It may now use: [models.embedding] (api_url, api_key), [models.rerank] (api_url, "
            "api_key).",
        ]
        ok(run(repo, monkeypatch, "sync", "--json"))  # embeds every chunk once
        embedded = [r for r in server.requests if r.path == "/v1/embeddings"]
        assert embedded and all(r.headers["authorization"] == f"Bearer {SECRET}" for r in embedded)
        assert all(r.body["model"] == "text-embedding-3-small" for r in embedded)
        assert all(len(r.body["input"]) <= 2 for r in embedded)  # knowledge.embed_batch_size
        assert "dimensions" not in embedded[0].body  # 0: the model's own
        ok(run(repo, monkeypatch, "search", "irregular rhythm", "--mode", "dense", "--json"))
        assert server.bodies()[-1]["input"] == ["query: irregular rhythm"]

        config = resolve(repo, user_config).config
        with KnowledgeAgentCore(
            repo / LOCAL_DATA_DIR,
            search_config=config.search_config,
            reranker=config.rerank,
            embedder=config.embeddings,
        ) as core:
            answer = knowledge_semantic_search(core, "cardio", "rhythm")
        assert answer["reranked"] is True and answer["count"] == 1  # knowledge.rerank_top_k
        [rerank] = [r for r in server.requests if r.path == "/v1/rerank"]
        assert rerank.headers["authorization"] == f"Bearer {SECRET}"
        assert rerank.body["model"] == "text-rerank-001"
        assert len(rerank.body["documents"]) == 2  # the two passages about rhythm

        (repo / "config.toml").write_text(text + "# edited\n", encoding="utf-8")
        seen = len(server.requests)
        edited = run(repo, monkeypatch, "search", "rhythm", "--json")
        ok(edited)
        assert len(server.requests) == seen
        assert "has changed since it was trusted" in edited.stderr


def test_enable_rerank_false_is_the_default_a_call_can_override(
    tmp_path: Path, user_config: Path
) -> None:
    with EmbeddingServer() as server:
        repo = tmp_path / "repo"
        write(repo / "config.toml", config_toml(server.base_url, enable_rerank=False))
        trust_config_file(repo / "config.toml", TrustStore(user_config))
        config = resolve(repo, user_config).config
        assert config.search_config.enable_rerank is False and config.rerank is not None
        with KnowledgeAgentCore(search_config=config.search_config, reranker=config.rerank) as core:
            for number in range(5):
                core.add_text(f"Rhythm note {number}: the pulse is irregular.", kb="cardio")
            plain = knowledge_semantic_search(core, "cardio", "irregular pulse")
            asked = knowledge_semantic_search(core, "cardio", "irregular pulse", enable_rerank=True)
    assert plain["reranked"] is False and plain["count"] == 5
    assert asked["reranked"] is True and asked["count"] == 3  # knowledge.rerank_top_k
    assert len(server.bodies("/v1/rerank")) == 1


class CountingReranker:
    """Scores a text by its length; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls += 1
        return [float(len(text)) for text in texts]


@pytest.mark.parametrize("backend", ["local", "postgresql"])
def test_the_knowledge_defaults_apply_on_every_backend(
    tmp_path: Path, user_config: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    repo = tmp_path / "repo"
    write(
        repo / "config.toml",
        "[knowledge]\ndefault_top_k = 2\nrerank_top_k = 1\nenable_rerank = false\n",
    )
    search_config = resolve(repo, user_config).config.search_config
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    reranker = CountingReranker()
    with KnowledgeAgentCore(
        None if url else tmp_path / "data",
        backend=url,
        search_config=search_config,
        reranker=reranker,
    ) as core:
        for number in range(4):
            core.add_text(f"Restore step {number}: copy the backup archive back.", kb="ops")
        plain = knowledge_semantic_search(core, "ops", "restore the backup")
        asked = knowledge_semantic_search(
            core, "ops", "restore the backup", top_k=3, enable_rerank=True
        )
    assert (plain["count"], plain["reranked"]) == (2, False)  # default_top_k, enable_rerank
    assert (asked["count"], asked["reranked"]) == (1, True)  # rerank_top_k
    assert reranker.calls == 1


def test_the_spec_config_toml_maps_every_key(tmp_path: Path, user_config: Path) -> None:
    repo = tmp_path / "repo"
    path = write(repo / "config.toml", config_toml().replace("dimensions = 0", "dimensions = 512"))
    trust_config_file(path, TrustStore(user_config))
    config = resolve(repo, user_config).config
    assert config.embeddings == {
        "provider": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key": SECRET,
        "model": "text-embedding-3-small",
        "min_interval": 0.0,
        "dimensions": 512,
        "batch_size": 64,
    }
    assert config.rerank == {
        "provider": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key": SECRET,
        "model": "text-rerank-001",
        "min_interval": 0.0,
    }
    search = config.search_config
    assert (search.default_top_k, search.rerank_top_k, search.enable_rerank) == (5, 3, True)
    assert {note.key for note in config.not_used} == {
        "knowledge.base_dir",  # no knowledge/ folder yet
        "knowledge.enabled",
        "knowledge.auto_scan",
        "knowledge.auto_embed",
        "knowledge.scan_interval",
    }
    # 002's README also spells the tables [embedding] / [rerank].
    write(path, '[embedding]\napi_url = "http://127.0.0.1:9/v1"\nmodel_name = "m"\n')
    trust_config_file(path, TrustStore(user_config))
    assert resolve(repo, user_config).config.embeddings == {
        "provider": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
    }


# -- precedence --------------------------------------------------------------------------------


def test_a_knowledge_agent_toml_beside_them_comes_first(tmp_path: Path, user_config: Path) -> None:
    repo = tmp_path / "repo"
    spec = spec_001(repo, SPEC_001)
    toml = write(repo / "config.toml", "[knowledge]\ndefault_top_k = 2\n")
    write(repo / CONFIG_FILE_NAME, "[chunking]\nmax_chunk_size = 999\n")
    found = resolve(repo, user_config)
    assert found.config_file == repo / CONFIG_FILE_NAME
    assert found.config.chunk_config.max_chunk_size == 999
    assert found.config.search_config.default_top_k is None and found.config.scan == ()
    assert {(note.file, note.key) for note in found.config.not_used} == {
        (spec, "(the whole file)"),
        (toml, "(the whole file)"),
    }


def test_kb_config_json_wins_where_both_files_set_a_setting(tmp_path: Path) -> None:
    first = SpecFile(
        tmp_path / KB_CONFIG,
        "kb_config.json",
        chunking={"max_chunk_size": 3200},
        origins={"chunking.max_chunk_size": "chunk_size.max"},
    )
    second = SpecFile(
        tmp_path / "config.toml",
        "config.toml",
        chunking={"max_chunk_size": 400, "min_chunk_size": 50},
        search={"default_top_k": 7},
        origins={
            "chunking.max_chunk_size": "knowledge.chunk_size",
            "chunking.min_chunk_size": "knowledge.chunk_size",
            "search.default_top_k": "knowledge.default_top_k",
        },
    )
    config = _merged_config([first, second])
    assert config.chunk_config.max_chunk_size == 3200 and config.chunk_config.min_chunk_size == 50
    assert config.search_config.default_top_k == 7
    assert config.origins["chunking.max_chunk_size"].file == tmp_path / KB_CONFIG
    assert config.origins["chunking.min_chunk_size"].file == tmp_path / "config.toml"


def test_options_and_the_environment_win_over_the_files(
    tmp_path: Path, user_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    spec_001(repo, SPEC_001)
    write(repo / "config.toml", "[knowledge]\ndefault_top_k = 2\n")
    for found in (
        resolve(repo, user_config, data_dir=tmp_path / "kb"),
        resolve_settings(None, cwd=repo, environ={ENV_HOME: str(tmp_path / "kb")}),
    ):
        assert found.data_dir == tmp_path / "kb" and found.files == ()
        assert found.config.chunk_config.max_chunk_size == 1500  # the default, not 3200
        assert found.config.search_config.default_top_k is None
    shown = ok(run(repo, monkeypatch, "--data-dir", str(tmp_path / "kb"), "config", "--json"))
    data_dir = next(row for row in shown["settings"] if row["name"] == "data_dir")
    assert data_dir == {
        "name": "data_dir",
        "value": str(tmp_path / "kb"),
        "source": "option",
        "file": None,
        "key": "--data-dir",
    }


def test_the_nearest_project_wins(tmp_path: Path, user_config: Path) -> None:
    outer = tmp_path / "outer"
    write(outer / CONFIG_FILE_NAME, "[chunking]\nmax_chunk_size = 999\n")
    inner = outer / "vendor" / "tool"
    spec_001(inner, SPEC_001)
    (inner / "src").mkdir()
    assert find_project(inner / "src") == (inner / KB_CONFIG,)
    assert resolve(inner / "src", user_config).config.chunk_config.max_chunk_size == 3200
    assert resolve(outer / "vendor", user_config).config.chunk_config.max_chunk_size == 999


def test_a_config_toml_of_another_program_is_not_read(tmp_path: Path, user_config: Path) -> None:
    site = tmp_path / "site"
    write(site / "config.toml", 'baseURL = "https://example.org/"\n[params]\nchunk_size = 3\n')
    write(tmp_path / "broken" / "config.toml", "this = is [not toml\n")
    for folder in (site, tmp_path / "broken"):
        assert find_project(folder) == ()
        found = resolve(folder, user_config)
        assert found.origin == "user data folder" and found.files == ()


# -- trust -------------------------------------------------------------------------------------


def test_what_leaves_the_folder_waits_for_trust_and_an_edit_withdraws_it(
    tmp_path: Path, user_config: Path
) -> None:
    repo = tmp_path / "repo"
    write(tmp_path / "shared" / "team.md", "# Team\n\nShared notes.\n")
    write(tmp_path / "elsewhere" / "ops" / "texts" / "a.txt", "Outside the project.\n")
    kb_config = spec_001(repo, {"scan_paths": ["docs/*.md", "../shared/**/*.md"]})
    toml = write(repo / "config.toml", "[knowledge]\nbase_dir = '../elsewhere'\n")
    store = TrustStore(user_config)

    untrusted = resolve(repo, user_config)
    assert [scan.path for scan in untrusted.config.scan] == [repo]
    assert untrusted.ignored == (
        "scan_paths '../shared/**/*.md'",
        "knowledge.base_dir '../elsewhere'",
    )
    assert untrusted.warning == (
        f"{kb_config} is not trusted: ignoring scan_paths '../shared/**/*.md'; {toml} is not "
        "trusted: ignoring knowledge.base_dir '../elsewhere'; run `knowledge-agent trust` to "
        "use them"
    )
    assert [file.trusted for file in untrusted.files] == [False, False]

    assert trust_config_file(kb_config, store)[1] == ("scan_paths '../shared/**/*.md'",)
    assert trust_config_file(toml, store)[1] == ("knowledge.base_dir '../elsewhere'",)
    trusted = resolve(repo, user_config)
    assert trusted.warning is None and trusted.ignored == ()
    assert [(scan.path, scan.kb, scan.include) for scan in trusted.config.scan] == [
        (repo, "default", ("/docs/*.md",)),
        (tmp_path / "shared", "default", ("/**/*.md",)),
        (tmp_path / "elsewhere" / "ops", "ops", ()),
    ]

    with kb_config.open("a", encoding="utf-8") as handle:
        handle.write("\n")
    edited = resolve(repo, user_config)
    assert [scan.path for scan in edited.config.scan] == [repo, tmp_path / "elsewhere" / "ops"]
    assert edited.warning is not None and "has changed since it was trusted" in edited.warning


PATHS = [".", "docs", "docs/sub", "..", "../private", "/tmp", "~", "link-out", "link-in"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scan=st.lists(
        st.tuples(st.sampled_from(PATHS), st.sampled_from(["", "*.md", "**/*.md"])), max_size=3
    ),
    base_dir=st.one_of(st.none(), st.sampled_from(PATHS)),
    providers=st.sampled_from(
        [(), ("models.embedding",), ("embedding", "models.rerank"), ("models.rerank",)]
    ),
    with_key=st.booleans(),
)
def test_an_untrusted_spec_file_never_yields_an_endpoint_a_secret_or_an_outside_path(
    scan: list[tuple[str, str]], base_dir: str | None, providers: tuple[str, ...], with_key: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        (repo / "docs" / "sub").mkdir(parents=True)
        (base / "private" / "kb").mkdir(parents=True)
        (repo / "knowledge" / "local").mkdir(parents=True)
        try:
            (repo / "link-out").symlink_to(base / "private", target_is_directory=True)
            (repo / "link-in").symlink_to(repo / "docs", target_is_directory=True)
            (repo / "knowledge" / "away").symlink_to(base / "private", target_is_directory=True)
        except (OSError, NotImplementedError):
            pytest.skip("symlinks not available")
        patterns = [f"{path}/{glob}" if glob else path for path, glob in scan]
        spec_001(repo, {"scan_paths": patterns})
        lines = ["[knowledge]"] + (
            [] if base_dir is None else [f"base_dir = {json.dumps(base_dir)}"]
        )
        for table in providers:
            lines += [f"[{table}]", 'api_url = "http://127.0.0.1:9/v1"', 'model_name = "m"']
            lines += [f'api_key = "{SECRET}"'] if with_key else []
        write(repo / "config.toml", "\n".join(lines) + "\n")
        found = resolve_settings(None, cwd=repo, environ={}, trust=TrustStore(base / "config"))
        real_repo = os.path.realpath(repo)

        def inside(path: object) -> bool:
            real = os.path.realpath(os.fspath(path))  # type: ignore[arg-type]
            return real == real_repo or real.startswith(real_repo + os.sep)

        assert inside(found.data_dir)
        assert all(inside(entry.path) for entry in found.config.scan)
        for table in (found.config.embeddings, found.config.rerank):
            assert table is None or table["provider"] not in NETWORK_PROVIDERS
        assert SECRET not in repr(found.config)
        assert (found.warning is not None) == bool(found.ignored)


# -- malformed files ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "the file must be a table"),
        ('{"scan_paths": "docs/**/*.md"}', "scan_paths must be a list of strings"),
        ('{"scan_paths": [""]}', "scan_paths[1] must be a non-empty glob"),
        ('{"exclude_patterns": [3]}', "exclude_patterns must be a list of strings"),
        ('{"chunk_size": 500}', "chunk_size must be a table"),
        ('{"chunk_size": {"min": "small"}}', "chunk_size.min must be an integer >= 1"),
        ('{"chunk_size": {"min": 900, "max": 300}}', "chunk_size.min (900) must not exceed"),
        ('{"index_weights": {"heading": -1}}', "index_weights.heading must be a number >= 0"),
        ('{"doc_type_weights": {"adr": "high"}}', "doc_type_weights.adr must be a number"),
    ],
)
def test_a_bad_kb_config_json_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, user_config: Path, text: str, names: str
) -> None:
    path = spec_001(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, user_config)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and names in message and "\n" not in message


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[knowledge]\nchunk_size = \n", "invalid TOML"),
        ("[models.embedding]\nmodel_name = 'm'\n", "models.embedding.api_url is required"),
        ("[models.rerank]\napi_url = 'http://h/v1'\n", "models.rerank.model_name is required"),
        (
            "[models.embedding]\napi_url = 'http://h/v1'\nmodel_name = 'm'\napi_key = 3\n",
            "models.embedding.api_key must be a non-empty string",
        ),
        (
            "[models.embedding]\napi_url = 'http://h'\nmodel_name = 'm'\ndimensions = -1\n",
            "models.embedding.dimensions must be an integer >= 0",
        ),
        ("[knowledge]\ndefault_top_k = 0\n", "knowledge.default_top_k must be an integer >= 1"),
        ("[knowledge]\nenable_rerank = 'yes'\n", "knowledge.enable_rerank must be true or false"),
        ("[knowledge]\nbase_dir = 3\n", "knowledge.base_dir must be a non-empty string"),
        (
            "[knowledge]\nchunk_size = 4\nchunk_overlap = 4\n",
            "knowledge.chunk_overlap (4) must be below knowledge.chunk_size (4)",
        ),
        (
            "[embedding]\napi_url = 'http://h'\nmodel_name = 'm'\n"
            "[models.embedding]\napi_url = 'http://h'\nmodel_name = 'm'\n",
            "give [models.embedding] or [embedding], not both",
        ),
    ],
)
def test_a_bad_config_toml_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, user_config: Path, text: str, names: str
) -> None:
    path = write(tmp_path / "config.toml", text)
    with pytest.raises(ConfigError) as caught:
        resolve(tmp_path, user_config)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and names in message and "\n" not in message


def test_a_bad_file_fails_every_command_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = spec_001(tmp_path / "repo", '{"chunk_size": {"max": 0}}')
    for args in (("search", "x"), ("config", "--show")):
        result = run(tmp_path / "repo", monkeypatch, *args)
        assert result.exit_code == 1
        assert result.stderr == f"Error: {path}: chunk_size.max must be an integer >= 1, got 0\n"


def test_a_knowledge_agent_toml_keeps_keys_out_of_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path / CONFIG_FILE_NAME,
        '[embeddings]\nprovider = "openai"\nbase_url = "http://h/v1"\nmodel = "m"\n'
        f'api_key = "{SECRET}"\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: embeddings.api_key: keys are not stored in this file; put the key in an "
        "environment variable and name it with api_key_env"
    )


# -- config --show -------------------------------------------------------------------------------


def test_config_show_names_the_file_and_key_of_every_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = knowledge_project(tmp_path / "repo", config_toml())
    kb_config = spec_001(repo, SPEC_001)
    toml = repo / "config.toml"
    shown = ok(run(repo, monkeypatch, "config", "--show", "--json"))
    rows = {row["name"]: row for row in shown["settings"] if row["name"] != "scan"}
    assert shown["files"] == [
        {"path": str(kb_config), "format": "kb_config.json", "trusted": False, "ignored": []},
        {
            "path": str(toml),
            "format": "config.toml",
            "trusted": False,
            "ignored": [
                "[models.embedding] (api_url, api_key)",
                "[models.rerank] (api_url, api_key)",
            ],
        },
    ]
    assert rows["data_dir"] == {
        "name": "data_dir",
        "value": str(repo / LOCAL_DATA_DIR),
        "source": "project folder",
        "file": str(kb_config),
        "key": None,
    }
    assert rows["chunking.max_chunk_size"] == {
        "name": "chunking.max_chunk_size",
        "value": 3200,
        "source": "file",
        "file": str(kb_config),
        "key": "chunk_size.max",
    }
    assert (rows["search.default_top_k"]["file"], rows["search.default_top_k"]["key"]) == (
        str(toml),
        "knowledge.default_top_k",
    )
    assert rows["search.doc_type_weights"]["key"] == "doc_type_weights"
    assert rows["search.fusion"] == {
        "name": "search.fusion",
        "value": "rrf",
        "source": "default",
        "file": None,
        "key": None,
    }
    assert rows["embeddings"]["value"] is None and rows["embeddings"]["source"] == "default"
    scans = [row for row in shown["settings"] if row["name"] == "scan"]
    assert [(row["value"]["path"], row["value"]["kb"], row["key"]) for row in scans] == [
        (str(repo), "default", "scan_paths"),
        (str(repo / "knowledge" / "cardio"), "cardio", "knowledge.base_dir"),
        (str(repo / "knowledge" / "faq"), "faq", "knowledge.base_dir"),
    ]
    assert {(note["file"], note["key"]) for note in shown["not_used"]} >= {
        (str(kb_config), "index_weights.first_paragraph"),
        (str(toml), "knowledge.scan_interval"),
    }

    text = run(repo, monkeypatch, "config")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert f"  {kb_config} (kb_config.json, not trusted)" in lines
    [line] = [line for line in lines if line.startswith("  chunking.max_chunk_size ")]
    assert line.split() == ["chunking.max_chunk_size", "3200", f"{kb_config}:", "chunk_size.max"]
    assert f"  {toml}: [models.rerank] (api_url, api_key)" in lines
    assert any(line.startswith(f"  {kb_config}: index_weights.code_blocks: ") for line in lines)

    trust_config_file(toml, TrustStore(Path(os.environ["KNOWLEDGE_AGENT_CONFIG_DIR"])))
    trusted = run(repo, monkeypatch, "config", "--json")
    rows = {row["name"]: row for row in ok(trusted)["settings"]}
    assert rows["embeddings"]["value"]["api_key"] == "***"
    assert rows["embeddings"]["key"] == "[models.embedding], knowledge.embed_batch_size"
    for output in (trusted.output, run(repo, monkeypatch, "config").output):
        assert SECRET not in output


def test_config_show_for_a_knowledge_agent_toml_and_for_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    path = write(repo / CONFIG_FILE_NAME, 'default_kb = "handbook"\n[search]\nrrf_k = 7\n')
    rows = {row["name"]: row for row in ok(run(repo, monkeypatch, "config", "--json"))["settings"]}
    assert (rows["default_kb"]["value"], rows["default_kb"]["key"]) == ("handbook", "default_kb")
    assert (rows["search.rrf_k"]["file"], rows["search.rrf_k"]["key"]) == (
        str(path),
        "search.rrf_k",
    )
    assert rows["chunking.max_chunk_size"]["source"] == "default"

    empty = tmp_path / "empty"
    empty.mkdir()
    shown = ok(run(empty, monkeypatch, "config", "--json"))
    assert shown["files"] == [] and shown["warning"] is None
    assert {row["source"] for row in shown["settings"]} == {"default"}
    assert "  none: every setting has its default" in run(empty, monkeypatch, "config").stdout
