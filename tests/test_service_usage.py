"""The reranker's query instruction (seed 002), and what the embedding and rerank services
were asked for — requests, texts, tokens — in the providers, the core, ``stats`` and the
MCP server's ``index_status``. Real HTTP on 127.0.0.1 (``tests/embedding_server.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from embedding_server import EmbeddingServer, words

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.cli import cli
from knowledge_agent.embeddings import (
    OpenAIEmbedder,
    OpenAIReranker,
    ServiceUsage,
    reranker_from_config,
)
from knowledge_agent.errors import ConfigError, EmbeddingError
from knowledge_agent.server.mcp_tools import index_status
from knowledge_agent.tokens import estimate_tokens

INSTRUCTION = "Instruct: rank the passages that answer the question\nQuery: "
DOCUMENTS = ["reset a password from the login page", "the cat sat on the mat", "rotate keys"]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as fake:
        yield fake


# -- the reranker's query instruction -----------------------------------------------------------


def test_the_query_instruction_goes_before_the_query_the_reranker_reads(
    server: EmbeddingServer,
) -> None:
    plain = OpenAIReranker(server.base_url, "r").rerank("reset password", DOCUMENTS)
    instructed = OpenAIReranker(server.base_url, "r", query_prefix=INSTRUCTION)
    assert instructed.rerank("reset password", DOCUMENTS) != plain  # the service read it
    queries = [body["query"] for body in server.bodies("/v1/rerank")]
    assert queries == ["reset password", INSTRUCTION + "reset password"]
    assert [body["documents"] for body in server.bodies("/v1/rerank")] == [DOCUMENTS] * 2


def test_the_instruction_is_set_by_either_name_and_checked(server: EmbeddingServer) -> None:
    base = {"provider": "openai", "base_url": server.base_url, "model": "r"}
    for key in ("query_prefix", "query_instruction"):  # ours, and seed 002's
        reranker_from_config({**base, key: INSTRUCTION}).rerank("keys", ["rotate keys"])
    assert [body["query"] for body in server.bodies("/v1/rerank")] == [INSTRUCTION + "keys"] * 2
    with pytest.raises(ConfigError, match="'query_instruction' and 'query_prefix' are one"):
        reranker_from_config({**base, "query_prefix": "a", "query_instruction": "b"})
    with pytest.raises(ConfigError, match="key 'query_instruction' must be str, not int"):
        reranker_from_config({**base, "query_instruction": 3})


def test_a_project_files_rerank_instruction_is_used_once_the_file_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EmbeddingServer
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nRotate the signing keys every quarter.\n", "utf-8")
    (docs / "b.md").write_text("# B\n\nSigning keys: rotate them yearly.\n", "utf-8")
    (tmp_path / ".knowledge-agent.toml").write_text(
        'data_dir = "kb"\n[rerank]\nprovider = "openai"\n'
        f'base_url = "{server.base_url}"\nmodel = "overlap"\n'
        f"query_instruction = {json.dumps(INSTRUCTION)}\n",
        "utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
    runner = CliRunner()
    assert runner.invoke(cli, ["add", str(docs)]).exit_code == 0
    search = ["search", "rotate signing keys", "--rerank", "--json"]
    untrusted = runner.invoke(cli, search)
    assert untrusted.exit_code != 0 and server.bodies("/v1/rerank") == []  # the table is out
    assert runner.invoke(cli, ["trust"]).exit_code == 0
    trusted = runner.invoke(cli, search)
    assert trusted.exit_code == 0, trusted.output
    assert [body["query"] for body in server.bodies("/v1/rerank")] == [
        INSTRUCTION + "rotate signing keys"
    ]


# -- usage ----------------------------------------------------------------------------------------


def test_a_provider_counts_requests_texts_and_the_tokens_a_service_reports(
    server: EmbeddingServer,
) -> None:
    server.report_usage = True
    embedder = OpenAIEmbedder(server.base_url, "m", dimensions=8, batch_size=2)
    texts = ["reset a password", "change a forgotten password", "the cat sat", ""]
    embedder.embed(texts)  # the empty text is not sent
    sent = [text for text in texts if text]
    assert embedder.usage.snapshot("e") == ServiceUsage(
        "e", requests=2, texts=3, tokens=sum(len(words(text)) for text in sent)
    )
    reranker = OpenAIReranker(server.base_url, "r", batch_size=2, query_prefix="q: ")
    reranker.rerank("password", DOCUMENTS)
    tokens = sum(len(words("q: password")) + len(words(doc)) for doc in DOCUMENTS)
    assert reranker.usage.snapshot() == ServiceUsage(requests=2, texts=3, tokens=tokens)
    server.fail(400, "bad input")
    with pytest.raises(EmbeddingError):
        reranker.rerank("password", ["x"])
    assert reranker.usage.snapshot().failed == 1 and reranker.usage.snapshot().requests == 3


def test_without_a_reported_usage_the_tokens_are_estimated(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", dimensions=8, query_prefix="query: ")
    embedder.embed(["重置密码", "reset a password"], kind="query")
    used = embedder.usage.snapshot()
    assert (used.requests, used.texts, used.tokens) == (1, 2, 0)
    assert used.estimated_tokens == estimate_tokens("query: 重置密码") + estimate_tokens(
        "query: reset a password"
    )


@pytest.fixture(params=["local", "postgresql"])
def open_core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    opened: list[KnowledgeAgentCore] = []

    def open_(**options: object) -> KnowledgeAgentCore:
        if request.param == "local":
            core = KnowledgeAgentCore(tmp_path / "kb", **options)  # type: ignore[arg-type]
        else:
            url = request.getfixturevalue("postgres_server").new_database()
            core = KnowledgeAgentCore(backend=url, **options)  # type: ignore[arg-type]
        opened.append(core)
        return core

    yield open_
    for core in opened:
        core.close()


def test_the_core_and_index_status_report_this_process_usage(
    open_core: object, server: EmbeddingServer
) -> None:
    server.report_usage = True
    service = {"provider": "openai", "base_url": server.base_url, "model": "m"}
    core = open_core(  # type: ignore[operator]
        embedder={**service, "dimensions": 8}, reranker=service
    )
    assert set(core.usage()) == {"embedding", "rerank"}
    assert core.usage()["rerank"] == ServiceUsage(core.reranker.name)  # nothing asked yet
    core.add_text("# Keys\n\nRotate the signing keys every quarter.\n", title="Keys")
    core.add_text("# Cats\n\nThe cat sat on the signing keys.\n", title="Cats")
    core.search("rotate signing keys", rerank=True)
    embedding = server.bodies("/v1/embeddings")
    rerank = server.bodies("/v1/rerank")
    used = core.usage()
    assert used["embedding"].name == core.embedder.name
    assert used["embedding"].requests == len(embedding) > 0
    assert used["embedding"].texts == sum(len(body["input"]) for body in embedding)
    assert used["embedding"].tokens == sum(
        len(words(text)) for body in embedding for text in body["input"]
    )
    assert used["rerank"].requests == len(rerank) == 1
    assert used["rerank"].texts == len(rerank[0]["documents"]) == 2
    status = index_status(core)
    assert status["usage"] == {kind: figures.to_dict() for kind, figures in used.items()}


def test_stats_shows_this_process_usage_by_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EmbeddingServer
) -> None:
    (tmp_path / "keys.md").write_text("# Keys\n\nRotate the signing keys.\n", "utf-8")
    (tmp_path / ".knowledge-agent.toml").write_text(
        'data_dir = "kb"\n[embeddings]\nprovider = "openai"\n'
        f'base_url = "{server.base_url}"\nmodel = "m"\ndimensions = 8\n',
        "utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KNOWLEDGE_AGENT_HOME", raising=False)
    runner = CliRunner()
    assert runner.invoke(cli, ["trust"]).exit_code == 0
    assert runner.invoke(cli, ["add", "keys.md"]).exit_code == 0
    assert server.bodies()  # the add embedded the chunks, in its own process
    shown = runner.invoke(cli, ["stats", "--json"])
    assert shown.exit_code == 0, shown.output
    usage = json.loads(shown.output)["usage"]
    name = f"openai:{server.base_url}:m:8"
    # A new process: the index is current, so stats itself embedded nothing.
    assert usage == {"embedding": {**ServiceUsage(name).to_dict()}}
    text = runner.invoke(cli, ["stats"])
    assert f"embedding        {name}: 0 requests, 0 texts, 0 tokens in this process" in text.output
