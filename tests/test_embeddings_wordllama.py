"""WordLlama embeddings: offline loading, shapes, normalisation, meaning, the cache folder.

Skipped when the ``wordllama`` package (the ``embed`` extra) is not installed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent.embeddings import Embedder, WordLlamaEmbedder
from knowledge_agent.embeddings import wordllama_provider as provider
from knowledge_agent.errors import ConfigError

wordllama = pytest.importorskip("wordllama")

QUESTION = "How do I reset my password?"
PARAPHRASE = "Steps to change a forgotten password"
UNRELATED = "The cat sat on the mat"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wordllama-cache")


@pytest.fixture(scope="module")
def embedder(cache_dir: Path) -> WordLlamaEmbedder:
    model = WordLlamaEmbedder(cache_dir=cache_dir)
    model.load()
    return model


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    attempts: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(repr(args))
        raise OSError("network access during an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts


def norms(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.norm(matrix.astype(np.float64), axis=1)


def test_loads_and_embeds_without_any_network_access(tmp_path: Path, no_network: list[str]) -> None:
    model = WordLlamaEmbedder(cache_dir=tmp_path / "cache")
    vectors = model.embed([QUESTION, PARAPHRASE])
    assert vectors.shape == (2, 256) and no_network == []
    # The tokenizer was put where WordLlama.load looks in the cache folder, nothing else.
    [copied] = (tmp_path / "cache").rglob("*.json")
    assert copied.name == "l2_supercat_tokenizer_config.json"
    assert [path.name for path in (tmp_path / "cache").rglob("*") if path.is_file()] == [
        copied.name
    ]


def test_shape_dtype_normalisation_and_name(embedder: WordLlamaEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dimensions) == ("wordllama:l2_supercat:256", 256)
    vectors = embedder.embed([QUESTION, "", "   ", PARAPHRASE], kind="query")
    assert vectors.shape == (4, 256) and vectors.dtype == np.float32
    np.testing.assert_allclose(norms(vectors[[0, 3]]), 1.0, rtol=1e-5)
    assert not vectors[1].any()  # no tokens: a zero row, never NaN
    assert np.isfinite(vectors).all()
    assert embedder.embed([]).shape == (0, 256)


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(embedder: WordLlamaEmbedder) -> None:
    question, paraphrase, unrelated = embedder.embed([QUESTION, PARAPHRASE, UNRELATED])
    assert question @ paraphrase > question @ unrelated + 0.2
    # Symmetric model: a query embeds as the same text as a document.
    np.testing.assert_array_equal(embedder.embed([QUESTION], kind="query")[0], question)


def test_vectors_match_wordllamas_own_pooling(embedder: WordLlamaEmbedder, cache_dir: Path) -> None:
    texts = [QUESTION, UNRELATED, "word " * 3000, "日本語のテキストと English"]
    reference = wordllama.WordLlama.load(cache_dir=cache_dir, disable_download=True)
    expected = reference.embed(texts, norm=True)
    np.testing.assert_allclose(embedder.embed(texts), expected, atol=1e-5)


def test_batches_and_long_texts_do_not_change_vectors(cache_dir: Path) -> None:
    texts = [f"paragraph {i} about topic {i % 7}" for i in range(11)] + ["long " * 20000]
    small = WordLlamaEmbedder(cache_dir=cache_dir, batch_size=2).embed(texts)
    large = WordLlamaEmbedder(cache_dir=cache_dir, batch_size=256).embed(texts)
    np.testing.assert_allclose(small, large, atol=1e-6)


def test_fewer_dimensions_truncate_the_shipped_weights(
    embedder: WordLlamaEmbedder, cache_dir: Path
) -> None:
    small = WordLlamaEmbedder(dim=64, cache_dir=cache_dir)
    assert small.name == "wordllama:l2_supercat:64"
    vectors = small.embed([QUESTION, PARAPHRASE])
    assert vectors.shape == (2, 64)
    full = embedder.embed([QUESTION, PARAPHRASE])[:, :64]
    np.testing.assert_allclose(vectors, full / norms(full)[:, None], atol=1e-5)


def test_configurations_that_cannot_load_offline(cache_dir: Path, no_network: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"place l2_supercat_512\.safetensors in .*weights"):
        WordLlamaEmbedder(dim=512, cache_dir=cache_dir).load()
    with pytest.raises(ConfigError, match="no 100 dimensions; valid: 64, 128, 256, 512, 1024"):
        WordLlamaEmbedder(dim=100, cache_dir=cache_dir).load()
    with pytest.raises(ConfigError, match="unknown WordLlama config 'l9'; valid: l2_supercat"):
        WordLlamaEmbedder("l9", cache_dir=cache_dir).load()
    assert no_network == []


def test_first_use_from_many_threads_loads_once(tmp_path: Path) -> None:
    model = WordLlamaEmbedder(cache_dir=tmp_path)
    results: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: results.append(model.embed([QUESTION, UNRELATED])))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


def test_the_tokenizer_copy_is_atomic_and_repairs_a_bad_file(tmp_path: Path) -> None:
    word_llama = wordllama.WordLlama
    uri = wordllama.config.WordLlamaModels.l2_supercat
    package_dir = Path(wordllama.__file__).parent
    source = (package_dir / "tokenizers" / uri.tokenizer_config).read_bytes()
    target = word_llama.get_file_path("tokenizer", tmp_path) / uri.tokenizer_config
    target.parent.mkdir(parents=True)
    target.write_bytes(source[: len(source) // 2])  # a copy cut short by a crash elsewhere

    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def install() -> None:
        barrier.wait()
        try:
            provider._install_tokenizer(word_llama, uri, package_dir, tmp_path)
        except BaseException as exc:  # collected: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=install) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() == source
    assert [path.name for path in target.parent.iterdir()] == [target.name]  # no temp files


def test_an_unwritable_cache_folder_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot write the WordLlama tokenizer"):
        WordLlamaEmbedder(cache_dir=blocker / "cache").load()


def test_a_fresh_process_imports_loads_and_embeds_offline_and_quietly(tmp_path: Path) -> None:
    # In-process tests run after wordllama was imported; this one blocks sockets first.
    code = f"""
import logging, socket, sys

def refuse(*args, **kwargs):
    sys.stderr.write("NETWORK " + repr(args))
    raise OSError("no network")

socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
from knowledge_agent.embeddings import WordLlamaEmbedder
vectors = WordLlamaEmbedder(cache_dir={str(tmp_path)!r}).embed(["offline"])
root = logging.getLogger()
print(vectors.shape[1], len(root.handlers), root.level)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "NETWORK" not in done.stderr
    # wordllama calls logging.basicConfig when imported; the root logger is left as it was.
    assert done.stdout.split() == ["256", "0", "30"]


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.one_of(st.just(""), st.text(max_size=60)), max_size=6))
def test_property_one_finite_unit_or_zero_row_per_text(
    embedder: WordLlamaEmbedder, texts: list[str]
) -> None:
    vectors = embedder.embed(texts)
    assert vectors.shape == (len(texts), 256) and vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    assert all(length == 0.0 or abs(length - 1.0) < 1e-5 for length in norms(vectors))
