"""Embedding and rerank providers over HTTP, the protocols and the configuration factory.

Every service is ``tests/embedding_server.py`` on 127.0.0.1; nothing here uses the internet.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from email.utils import formatdate
from pathlib import Path

import numpy as np
import pytest
from embedding_server import DIMS, EmbeddingServer, fake_vector, overlap_score
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import knowledge_agent.embeddings as embeddings
from knowledge_agent.embeddings import (
    Embedder,
    OpenAIEmbedder,
    OpenAIReranker,
    Reranker,
    WordLlamaEmbedder,
    default_cache_dir,
    embedder_from_config,
    http_client,
    normalize_rows,
    reranker_from_config,
    wordllama_provider,
)
from knowledge_agent.embeddings.http_client import Throttle, _retry_after
from knowledge_agent.errors import ConfigError, EmbeddingError, KnowledgeAgentError

TEXTS = ["reset a password", "change a forgotten password", "the cat sat on the mat", "ok"]
# The server's answer pauses between retries are not what these tests measure.
TOLERANCE = 0.03


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy would take the 127.0.0.1 requests elsewhere; a real key must never be sent.
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def shared_server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer() as fake:
        yield fake


def expected(texts: Sequence[str], dims: int = DIMS, prefix: str = "") -> np.ndarray:
    return normalize_rows(np.array([fake_vector(prefix + text, dims) for text in texts]))


def norms(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.norm(matrix.astype(np.float64), axis=1)


# --- the package surface -------------------------------------------------------------------


def test_all_is_exactly_the_public_api() -> None:
    assert sorted(embeddings.__all__) == [
        "Embedder",
        "EmbeddingKind",
        "MiniLMEmbedder",
        "OpenAIEmbedder",
        "OpenAIReranker",
        "Reranker",
        "ServiceUsage",
        "UsageCounter",
        "WordLlamaEmbedder",
        "default_cache_dir",
        "embedder_from_config",
        "normalize_rows",
        "reranker_from_config",
    ]
    assert all(hasattr(embeddings, name) for name in embeddings.__all__)


def test_importing_the_package_loads_nothing_heavy() -> None:
    code = (
        "import sys, knowledge_agent.embeddings\n"
        "heavy = ('wordllama', 'tokenizers', 'httpx', 'requests', 'safetensors', 'scipy')\n"
        "print([name for name in heavy if name in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_providers_meet_the_protocols(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", dimensions=8)
    reranker = OpenAIReranker(server.base_url, "r")
    assert isinstance(embedder, Embedder) and not isinstance(embedder, Reranker)
    assert isinstance(reranker, Reranker) and not isinstance(reranker, Embedder)

    class Plain:  # plain attributes satisfy the protocol as well as properties
        name = "plain"
        dimensions = 3

        def embed(self, texts: Sequence[str], *, kind: str = "document") -> np.ndarray:
            return np.zeros((len(texts), 3), dtype=np.float32)

    assert isinstance(Plain(), Embedder)


def test_embedding_error_is_a_knowledge_agent_error_and_pickles() -> None:
    error = EmbeddingError("http://h/v1/embeddings", "HTTP 500: boom", status=500)
    assert isinstance(error, KnowledgeAgentError)
    assert str(error) == "http://h/v1/embeddings: HTTP 500: boom"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.url, copy.reason, copy.status, str(copy)) == (
        error.url,
        error.reason,
        500,
        str(error),
    )


# --- normalisation -------------------------------------------------------------------------


def test_normalize_rows_gives_unit_rows_and_keeps_zero_rows_zero() -> None:
    rows = normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0], [1e300, 1e300], [1e-300, 0.0]]))
    assert rows.dtype == np.float32 and rows.flags.c_contiguous
    np.testing.assert_allclose(rows[0], [0.6, 0.8], rtol=1e-6)
    assert not rows[1].any()
    np.testing.assert_allclose(norms(rows[[0, 2, 3]]), 1.0, rtol=1e-6)
    assert normalize_rows(np.zeros((0, 5))).shape == (0, 5)
    with pytest.raises(ValueError, match="2-D"):
        normalize_rows(np.zeros(3))


@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=6),
        elements=st.floats(allow_nan=False, allow_infinity=False),
    )
)
def test_normalize_rows_property(matrix: np.ndarray) -> None:
    rows = normalize_rows(matrix)
    assert rows.shape == matrix.shape and rows.dtype == np.float32
    assert np.isfinite(rows).all()
    for row, source in zip(rows, matrix, strict=True):
        if source.any():
            assert abs(np.linalg.norm(row.astype(np.float64)) - 1.0) < 1e-5
        else:
            assert not row.any()


# --- OpenAIEmbedder: answers ---------------------------------------------------------------


def test_embed_returns_unit_float32_rows_in_input_order(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "fake-embed")
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), DIMS) and vectors.dtype == np.float32
    np.testing.assert_allclose(norms(vectors), 1.0, rtol=1e-6)
    # The server answers in reverse order: only sorting by "index" gives these rows.
    np.testing.assert_allclose(vectors, expected(TEXTS), atol=1e-6)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    [body] = server.bodies()
    assert body == {"model": "fake-embed", "input": TEXTS}
    assert embedder.dimensions == DIMS and len(server.requests) == 1


def test_batches_of_batch_size(server: EmbeddingServer) -> None:
    texts = [f"text number {i}" for i in range(7)]
    vectors = OpenAIEmbedder(server.base_url, "m", batch_size=3).embed(texts)
    assert [len(body["input"]) for body in server.bodies()] == [3, 3, 1]
    assert [text for body in server.bodies() for text in body["input"]] == texts
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)


def test_empty_texts_get_zero_rows_and_are_not_sent(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", document_prefix="passage: ")
    vectors = embedder.embed(["", "some words", ""])
    assert [body["input"] for body in server.bodies()] == [["passage: some words"]]
    assert not vectors[0].any() and not vectors[2].any()
    assert norms(vectors[1:2]) == pytest.approx([1.0])
    # Texts whose vector is all zero (no words for the fake model) stay zero too.
    assert not OpenAIEmbedder(server.base_url, "m").embed(["?!"]).any()


def test_empty_input_gives_an_empty_matrix(server: EmbeddingServer) -> None:
    assert OpenAIEmbedder(server.base_url, "m", dimensions=16).embed([]).shape == (0, 16)
    assert OpenAIEmbedder(server.base_url, "m", dimensions=16).embed(["", ""]).shape == (2, 16)
    assert server.requests == []
    # Unknown dimensions are learnt from one probe request.
    assert OpenAIEmbedder(server.base_url, "m").embed([]).shape == (0, DIMS)
    assert len(server.requests) == 1


def test_prefixes_go_before_queries_and_documents(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(
        server.base_url, "e5", query_prefix="query: ", document_prefix="passage: "
    )
    queries = embedder.embed(["cats"], kind="query")
    documents = embedder.embed(["cats", "dogs"])
    assert [body["input"] for body in server.bodies()] == [
        ["query: cats"],
        ["passage: cats", "passage: dogs"],
    ]
    np.testing.assert_allclose(queries, expected(["cats"], prefix="query: "), atol=1e-6)
    np.testing.assert_allclose(documents, expected(["cats", "dogs"], prefix="passage: "), atol=1e-6)
    plain = OpenAIEmbedder(server.base_url, "e5")
    other = OpenAIEmbedder(server.base_url, "e5", query_prefix="q: ", document_prefix="passage: ")
    assert len({embedder.name, plain.name, other.name}) == 3
    with pytest.raises(ConfigError, match="kind"):
        embedder.embed(["x"], kind="question")  # type: ignore[arg-type]


def test_name_identifies_url_model_and_requested_dimensions(server: EmbeddingServer) -> None:
    url = server.base_url
    assert OpenAIEmbedder(url + "/", "bge-m3").name == f"openai:{url}:bge-m3"
    assert OpenAIEmbedder(url, "bge-m3", dimensions=256).name == f"openai:{url}:bge-m3:256"
    assert OpenAIReranker(url, "bge-reranker").name == f"openai-rerank:{url}:bge-reranker"
    assert server.requests == []  # a name never needs the network


def test_the_key_comes_from_the_environment_at_call_time(
    server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", api_key_env="MY_KEY", dimensions=DIMS)
    monkeypatch.delenv("MY_KEY", raising=False)
    embedder.embed(["one"])
    monkeypatch.setenv("MY_KEY", "sk-test-123")
    embedder.embed(["two"])
    monkeypatch.setenv("MY_KEY", "")
    embedder.embed(["three"])
    auth = [request.headers.get("authorization") for request in server.requests]
    assert auth == [None, "Bearer sk-test-123", None]
    assert "sk-test" not in repr(embedder) + embedder.name + repr(vars(embedder))
    # The default variable is OPENAI_API_KEY; api_key_env=None never sends one.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-default")
    OpenAIReranker(server.base_url, "r").rerank("q", ["d"])
    OpenAIReranker(server.base_url, "r", api_key_env=None).rerank("q", ["d"])
    assert [request.headers.get("authorization") for request in server.requests[3:]] == [
        "Bearer sk-default",
        None,
    ]
    assert server.requests[0].headers["content-type"] == "application/json"


def test_dimensions_are_discovered_then_checked(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m")
    assert embedder.dimensions == DIMS  # one probe request
    assert len(server.requests) == 1
    embedder.embed(["a"])
    assert embedder.dimensions == DIMS and len(server.requests) == 2
    server.dims = 48
    with pytest.raises(EmbeddingError, match="expected 64-dimensional embeddings, got 48") as info:
        embedder.embed(["b"])
    assert info.value.url == f"{server.base_url}/embeddings"


def test_concurrent_first_calls_share_one_discovery(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", batch_size=2)
    results: dict[int, np.ndarray] = {}

    def work(n: int) -> None:
        results[n] = embedder.embed([f"thread {n} text {i}" for i in range(5)])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6 and len(server.requests) == 6 * 3  # no probe was needed
    for n, vectors in results.items():
        texts = [f"thread {n} text {i}" for i in range(5)]
        np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)


def test_requested_dimensions_are_sent_and_enforced(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", dimensions=32)
    assert embedder.embed(["a b c"]).shape == (1, 32)
    assert server.bodies()[0]["dimensions"] == 32
    server.honour_dimensions = False
    with pytest.raises(EmbeddingError, match=r"expected 32.*got 64.*ignore 'dimensions'"):
        embedder.embed(["a b c"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.one_of(st.just(""), st.text(max_size=40)), max_size=8))
def test_property_one_finite_unit_or_zero_row_per_text(
    shared_server: EmbeddingServer, texts: list[str]
) -> None:
    vectors = OpenAIEmbedder(shared_server.base_url, "m", dimensions=DIMS, batch_size=3).embed(
        texts
    )
    assert vectors.shape == (len(texts), DIMS) and vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    lengths = norms(vectors)
    assert all(length == 0.0 or abs(length - 1.0) < 1e-5 for length in lengths)
    for text, length in zip(texts, lengths, strict=True):
        assert (length > 0) == any(fake_vector(text))


# --- OpenAIEmbedder: throttling and errors -------------------------------------------------


def test_throttle_spaces_starts_across_threads() -> None:
    throttle = Throttle(0.05)
    starts: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(2):
            released = throttle.wait()
            with lock:
                starts.append(released)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    starts.sort()
    assert len(starts) == 6
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.05


def test_min_interval_is_a_lower_bound_between_request_starts(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", batch_size=1, min_interval=0.12)
    threads = [threading.Thread(target=embedder.embed, args=(["a", "b"],)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    starts = sorted(request.started for request in server.requests)
    assert len(starts) == 4
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.12 - TOLERANCE


def test_a_server_error_names_the_url_status_and_message(server: EmbeddingServer) -> None:
    server.fail(500, "CUDA out of memory")
    embedder = OpenAIEmbedder(server.base_url, "m")
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["x"])
    assert str(info.value) == f"{server.base_url}/embeddings: HTTP 500: CUDA out of memory"
    assert info.value.status == 500 and len(server.requests) == 1  # a 500 is not retried


def test_a_client_error_is_reported_with_the_servers_words(server: EmbeddingServer) -> None:
    with pytest.raises(EmbeddingError, match=r"/v1/nowhere/embeddings: HTTP 404: no route"):
        OpenAIEmbedder(server.base_url + "/nowhere", "m").embed(["x"])
    server.answer_raw(b"<html><body>Bad   Gateway</body></html>", status=502)
    with pytest.raises(EmbeddingError, match=r"HTTP 502: <html><body>Bad Gateway"):
        OpenAIEmbedder(server.base_url, "m").embed(["x"])


def test_429_and_503_are_retried_honouring_retry_after(server: EmbeddingServer) -> None:
    server.fail(429, "slow down", retry_after="0.2")
    server.fail(503, "loading model", retry_after=formatdate(usegmt=True))  # an HTTP date
    vectors = OpenAIEmbedder(server.base_url, "m").embed(["still works"])
    np.testing.assert_allclose(vectors, expected(["still works"]), atol=1e-6)
    starts = [request.started for request in server.requests]
    assert len(starts) == 3
    assert starts[1] - starts[0] >= 0.2 - TOLERANCE


def test_retries_are_bounded(server: EmbeddingServer) -> None:
    server.fail(503, "overloaded", retry_after="0", times=10)
    with pytest.raises(EmbeddingError, match="HTTP 503 after 4 attempts: overloaded") as info:
        OpenAIEmbedder(server.base_url, "m").embed(["x"])
    assert info.value.status == 503
    assert len(server.requests) == http_client.MAX_RETRIES + 1


def test_a_long_retry_after_fails_at_once(server: EmbeddingServer) -> None:
    server.fail(429, "quota exceeded", retry_after="3600")
    with pytest.raises(EmbeddingError, match="Retry-After 3600 s is longer than 30 s: quota"):
        OpenAIEmbedder(server.base_url, "m").embed(["x"])
    assert len(server.requests) == 1


def test_without_retry_after_the_client_backs_off(
    server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_client, "BACKOFF", 0.05)
    server.fail(429, "busy", times=2)
    OpenAIEmbedder(server.base_url, "m").embed(["x"])
    starts = [request.started for request in server.requests]
    assert len(starts) == 3
    assert starts[1] - starts[0] >= 0.05 - TOLERANCE
    assert starts[2] - starts[1] >= 0.10 - TOLERANCE


def test_retry_after_parsing() -> None:
    assert _retry_after("2") == 2.0 and _retry_after("0.5") == 0.5
    assert _retry_after("-3") == 0.0
    assert _retry_after(None) is None and _retry_after("soon") is None
    assert _retry_after("inf") is None
    later = _retry_after(formatdate(time.time() + 20, usegmt=True))
    assert later is not None and 15 < later <= 20


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "malformed JSON in answer"),
        (b"", "malformed JSON in answer"),
        (b'{"object": "list"}', "answer has no 'data' list"),
        (b"[1, 2]", "answer has no 'data' list"),
        (b'{"data": [{"index": 0, "embedding": "AAAA"}]}', "not a list of numbers"),
        (b'{"data": [{"index": 0, "embedding": [1, "x"]}]}', "not lists of numbers"),
        (b'{"data": [{"index": 0, "embedding": [[1], [2]]}]}', "not flat"),
        (b'{"data": [{"index": 0, "embedding": []}]}', "not flat, non-empty"),
        (b'{"data": [{"index": 0, "embedding": [1, NaN]}]}', "non-finite"),
        (b'{"data": [{"index": 5, "embedding": [1, 2]}]}', "index 5 is not in 0..0"),
        (b'{"data": [{"index": true, "embedding": [1, 2]}]}', "index True is not in"),
        (b'{"data": [7]}', "not JSON objects"),
    ],
)
def test_malformed_answers_are_errors(server: EmbeddingServer, body: bytes, reason: str) -> None:
    server.answer_raw(body)
    with pytest.raises(EmbeddingError, match=reason) as info:
        OpenAIEmbedder(server.base_url, "m").embed(["one"])
    assert str(info.value).startswith(f"{server.base_url}/embeddings: ")


def test_answers_without_index_are_taken_in_order(server: EmbeddingServer) -> None:
    body = {"data": [{"embedding": fake_vector("a")}, {"embedding": fake_vector("b")}]}
    server.answer_raw(json.dumps(body).encode())
    vectors = OpenAIEmbedder(server.base_url, "m").embed(["a", "b"])
    np.testing.assert_allclose(vectors, expected(["a", "b"]), atol=1e-6)


def test_a_wrong_count_or_a_repeated_index_is_an_error(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(server.base_url, "m", dimensions=DIMS)
    server.drop_last = True
    with pytest.raises(EmbeddingError, match="asked for 3 embeddings, got 2"):
        embedder.embed(["a", "b", "c"])
    server.drop_last = False
    server.duplicate_index = True
    with pytest.raises(EmbeddingError, match="index 2 appears twice"):
        embedder.embed(["a", "b", "c"])


def test_a_slow_server_times_out(server: EmbeddingServer) -> None:
    server.delay = 2.0
    with pytest.raises(EmbeddingError, match=r"/v1/embeddings: timed out after 0.2 s"):
        OpenAIEmbedder(server.base_url, "m", timeout=0.2).embed(["x"])


def test_a_refused_connection_is_an_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(EmbeddingError, match="/v1/embeddings: connection refused") as info:
        OpenAIEmbedder(url, "m").embed(["x"])
    assert info.value.status is None


def test_a_redirect_is_refused(server: EmbeddingServer) -> None:
    server.fail(307, "moved", headers={"Location": "http://elsewhere.example/v1/embeddings"})
    with pytest.raises(EmbeddingError, match=r"HTTP 307: redirected to http://elsewhere\.example"):
        OpenAIEmbedder(server.base_url, "m").embed(["x"])
    assert len(server.requests) == 1


def test_bad_arguments() -> None:
    good = "http://127.0.0.1:9/v1"
    for url in ("ftp://host/v1", "127.0.0.1:8080", "http:///v1", "http://h/v1?x=1"):
        with pytest.raises(ConfigError, match="base_url"):
            OpenAIEmbedder(url, "m")
    with pytest.raises(ConfigError, match="user info") as info:
        OpenAIEmbedder("http://user:hunter2@127.0.0.1/v1", "m")
    assert "hunter2" not in str(info.value)
    bad: list[dict[str, object]] = [
        {"model": ""},
        {"batch_size": 0},
        {"batch_size": True},
        {"dimensions": 0},
        {"timeout": 0},
        {"timeout": math.inf},
        {"min_interval": -1},
        {"api_key_env": ""},
        {"query_prefix": None},
    ]
    for options in bad:
        arguments: dict[str, object] = {"base_url": good, "model": "m", **options}
        with pytest.raises(ConfigError, match=next(iter(options))):
            OpenAIEmbedder(**arguments)  # type: ignore[arg-type]
    embedder = OpenAIEmbedder(good, "m", dimensions=4)
    with pytest.raises(TypeError, match="not one string"):
        embedder.embed("a text")
    with pytest.raises(TypeError, match="strings"):
        embedder.embed([b"bytes"])  # type: ignore[list-item]


# --- OpenAIReranker ------------------------------------------------------------------------


def test_rerank_scores_in_input_order(server: EmbeddingServer) -> None:
    documents = ["nothing relevant", "reset the password", "password", "reset password now"]
    reranker = OpenAIReranker(server.base_url, "bge-reranker", batch_size=3)
    scores = reranker.rerank("reset password", documents)
    assert scores == [overlap_score("reset password", document) for document in documents]
    assert scores == [0.0, 1.0, 0.5, 1.0]
    bodies = server.bodies("/v1/rerank")
    assert [body["documents"] for body in bodies] == [documents[:3], documents[3:]]
    assert bodies[0] == {
        "model": "bge-reranker",
        "query": "reset password",
        "documents": documents[:3],
        "top_n": 3,
    }
    assert reranker.rerank("anything", []) == [] and len(server.requests) == 2


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"data": []}', "answer has no 'results' list"),
        (b'{"results": [{"index": 0}, {"index": 1}]}', "no numeric 'relevance_score'"),
        (
            b'{"results": [{"index": 0, "relevance_score": "high"}, {"index": 1, "score": 1}]}',
            "no numeric",
        ),
        (
            b'{"results": [{"index": 0, "relevance_score": Infinity}, {"index": 1, "score": 1}]}',
            "not finite",
        ),
        (b'{"results": [{"index": 0, "relevance_score": 0.5}]}', "asked for 2 scores, got 1"),
        (b"oops", "malformed JSON"),
    ],
)
def test_rerank_errors(server: EmbeddingServer, body: bytes, reason: str) -> None:
    server.answer_raw(body)
    with pytest.raises(EmbeddingError, match=reason) as info:
        OpenAIReranker(server.base_url, "r").rerank("q", ["a", "b"])
    assert info.value.url == f"{server.base_url}/rerank"


def test_rerank_accepts_a_plain_score_and_reports_server_errors(server: EmbeddingServer) -> None:
    server.answer_raw(b'{"results": [{"index": 1, "score": 2}, {"index": 0, "score": -1.5}]}')
    reranker = OpenAIReranker(server.base_url, "r")
    assert reranker.rerank("q", ["a", "b"]) == [-1.5, 2.0]
    server.fail(400, "query too long")
    with pytest.raises(EmbeddingError, match=r"/v1/rerank: HTTP 400: query too long"):
        reranker.rerank("q", ["a"])


# --- the configuration factory -------------------------------------------------------------


def test_openai_embedder_from_config(server: EmbeddingServer) -> None:
    embedder = embedder_from_config(
        {
            "provider": "openai",
            "base_url": server.base_url,
            "model": "bge-m3",
            "api_key_env": "MY_KEY",
            "dimensions": 32,
            "batch_size": 8,
            "min_interval": 0,
            "query_prefix": "q: ",
            "document_prefix": "",
            "timeout": 5,
        }
    )
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model, embedder.batch_size, embedder.dimensions) == ("bge-m3", 8, 32)
    assert embedder.query_prefix == "q: " and embedder._client.api_key_env == "MY_KEY"
    assert embedder.embed(["x y"], kind="query").shape == (1, 32)
    reranker = reranker_from_config(
        {"provider": "openai", "base_url": server.base_url, "model": "r", "api_key_env": None}
    )
    assert isinstance(reranker, OpenAIReranker) and reranker.rerank("x", ["x"]) == [1.0]


def test_wordllama_embedder_from_config() -> None:
    pytest.importorskip("wordllama")
    embedder = embedder_from_config({"provider": "wordllama", "dim": 128, "cache_dir": "/x"})
    assert isinstance(embedder, WordLlamaEmbedder)
    assert (embedder.name, embedder.dimensions) == ("wordllama:l2_supercat:128", 128)
    assert str(embedder.cache_dir) == "/x"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "needs a 'provider' key; valid: minilm, openai, wordllama"),
        (
            {"provider": "cohere"},
            "unknown embedding provider 'cohere'; valid: minilm, openai, wordllama",
        ),
        (
            {"provider": "wordllama", "dims": 256},
            "unknown embedding key 'dims' for provider 'wordllama'; "
            "valid: provider, batch_size, cache_dir, config, dim",
        ),
        ({"provider": "openai", "model": "m"}, "provider 'openai' needs 'base_url'"),
        ({"provider": "openai"}, "needs 'base_url', 'model'"),
        (
            {"provider": "openai", "base_url": "http://h/v1", "model": "m", "api_key": ""},
            "api_key must be a non-empty string",
        ),
        (
            {"provider": "wordllama", "api_key": "sk"},
            "unknown embedding key 'api_key' for provider 'wordllama'",
        ),
        (
            {"provider": "openai", "base_url": "http://h/v1", "model": "m", "batch_size": "8"},
            "key 'batch_size' must be int, not str",
        ),
        (
            {"provider": "openai", "base_url": "http://h/v1", "model": "m", "timeout": True},
            "key 'timeout' must be int or float, not bool",
        ),
        (
            {"provider": "openai", "base_url": "http://h/v1", "model": "m", "dimensions": 1.5},
            "key 'dimensions' must be int or null, not float",
        ),
        ({"provider": "wordllama", "dim": 0}, "dim must be a positive integer"),
        (["provider", "openai"], "must be a table, not list"),
    ],
)
def test_embedder_config_errors(config: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        embedder_from_config(config)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_reranker_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown reranker provider 'wordllama'; valid: openai"):
        reranker_from_config({"provider": "wordllama"})
    with pytest.raises(ConfigError, match=r"unknown reranker keys 'dimensions', 'document_pr"):
        reranker_from_config(
            {
                "provider": "openai",
                "base_url": "http://h/v1",
                "model": "m",
                "dimensions": 3,
                "document_prefix": "",
            }
        )


# --- WordLlama without the package ---------------------------------------------------------


def test_wordllama_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordllama_provider.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[embed\]"'):
        WordLlamaEmbedder()
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[embed\]"'):
        embedder_from_config({"provider": "wordllama"})


def test_wordllama_import_failure_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # makes `import wordllama` fail
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[embed\]"'):
        wordllama_provider._import_wordllama()


@pytest.mark.skipif(sys.platform != "linux", reason="XDG applies on Linux")
def test_the_cache_folder_is_per_user_and_honours_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "knowledge-agent" / "wordllama"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert str(default_cache_dir()) == "/home/someone/.cache/knowledge-agent/wordllama"
