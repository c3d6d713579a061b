"""A BERT encoder in numpy: safetensors weights in, last hidden states out, float32.

What ``transformers.BertModel`` computes in inference, for the absolute-position,
post-LayerNorm encoders (MiniLM, BERT, all-MiniLM-L6-v2): word + position + token-type
embeddings and a LayerNorm, then per layer self-attention, a residual LayerNorm, a
feed-forward block with the exact (erf) GELU and another residual LayerNorm. Dropout is an
identity at inference and is left out.

Weights are read from a ``.safetensors`` file: an 8-byte little-endian header length, a
JSON table of names, dtypes, shapes and byte ranges, then the raw little-endian buffers.
Nothing in it can run code.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from knowledge_agent.embeddings.base import positive_int
from knowledge_agent.errors import ConfigError

__all__ = ["BertConfig", "BertEncoder", "read_safetensors"]

_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "I64": np.dtype("<i8")}
_MAX_HEADER = 16 * 1024 * 1024  # a real header is a few tens of KB


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a numpy array (float ones as float32).

    ``ConfigError`` naming the file when it is not a well-formed safetensors file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if len(data) < 8:
        raise ConfigError(f"{path} is not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise ConfigError(f"{path} is not a safetensors file (header of {size} bytes)")
    try:
        header = json.loads(data[8 : 8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not a safetensors file ({exc})") from exc
    if not isinstance(header, dict):
        raise ConfigError(f"{path} is not a safetensors file (its header is not a table)")
    body = memoryview(data)[8 + size :]
    tensors: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not all(isinstance(value, int) for value in (start, end, *shape)):
                raise TypeError("offsets and shape must be integers")
            count = math.prod(shape)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: tensor {name!r} has an unreadable entry {entry!r}") from exc
        dtype = _DTYPES.get(dtype_name)
        if dtype is None:
            raise ConfigError(f"{path}: tensor {name!r} is {dtype_name}, not F32, F16 or I64")
        if not 0 <= start <= end <= len(body) or end - start != count * dtype.itemsize:
            raise ConfigError(f"{path}: tensor {name!r} lies outside the file or has a bad size")
        array = np.frombuffer(body[start:end], dtype=dtype).reshape(shape)
        tensors[name] = array.astype(np.float32, copy=False) if array.dtype.kind == "f" else array
    return tensors


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT encoder, from its ``config.json``."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        """Read ``config.json``; ``ConfigError`` when it does not describe a supported BERT."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read the model configuration {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path} is not a model configuration")
        activation = raw.get("hidden_act", "gelu")
        positions = raw.get("position_embedding_type", "absolute")
        if activation != "gelu" or positions != "absolute":
            raise ConfigError(f"{path}: only BERT with GELU and absolute positions is supported")
        eps = raw.get("layer_norm_eps", 1e-12)
        sizes = {
            name: raw.get(name) for name in cls.__dataclass_fields__ if name != "layer_norm_eps"
        }
        bad = [name for name, value in sizes.items() if not positive_int(value)]
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            bad.append("layer_norm_eps")
        if bad:
            raise ConfigError(f"{path}: {', '.join(bad)} missing or not positive")
        config = cls(**sizes, layer_norm_eps=float(eps))
        if config.hidden_size % config.num_attention_heads:
            raise ConfigError(f"{path}: hidden_size is not a multiple of num_attention_heads")
        return config


@dataclass(frozen=True)
class _Layer:
    qkv: np.ndarray  # (hidden, 3 * hidden): query, key and value projections side by side
    qkv_bias: np.ndarray
    attention_out: np.ndarray  # (hidden, hidden)
    attention_out_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]
    intermediate: np.ndarray  # (hidden, intermediate)
    intermediate_bias: np.ndarray
    output: np.ndarray  # (intermediate, hidden)
    output_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]


class BertEncoder:
    """The encoder of a BERT model; :meth:`forward` maps token ids to hidden states.

    Immutable once built, so one encoder serves any number of threads. ``erf`` is the
    vectorised error function (``scipy.special.erf``), passed in so that importing this
    module loads nothing heavy.
    """

    def __init__(
        self,
        config: BertConfig,
        weights: dict[str, np.ndarray],
        erf: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        self.config = config
        self._erf = erf
        hidden = config.hidden_size

        def take(name: str, shape: tuple[int, ...]) -> np.ndarray:
            array = weights.get(name)
            if array is None:
                raise ConfigError(f"the weights have no {name}")
            if array.shape != shape:
                raise ConfigError(f"weight {name} has shape {array.shape}, not {shape}")
            return array

        def linear(name: str, size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray]:
            # torch's Linear stores (out, in); a contiguous (in, out) copy makes x @ W plain.
            matrix = take(f"{name}.weight", (size_out, size_in))
            return np.ascontiguousarray(matrix.T), take(f"{name}.bias", (size_out,))

        def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
            return take(f"{name}.weight", (hidden,)), take(f"{name}.bias", (hidden,))

        self._word = take("embeddings.word_embeddings.weight", (config.vocab_size, hidden))
        self._position = take(
            "embeddings.position_embeddings.weight", (config.max_position_embeddings, hidden)
        )
        # Every text is one segment: token type 0 throughout.
        self._token_type = take(
            "embeddings.token_type_embeddings.weight", (config.type_vocab_size, hidden)
        )[0]
        self._embedding_norm = norm("embeddings.LayerNorm")
        layers = []
        for index in range(config.num_hidden_layers):
            name = f"encoder.layer.{index}"
            query, key, value = (
                linear(f"{name}.attention.self.{part}", hidden, hidden)
                for part in ("query", "key", "value")
            )
            size = config.intermediate_size
            layers.append(
                _Layer(
                    # The three projections side by side: one product instead of three.
                    np.concatenate((query[0], key[0], value[0]), axis=1),
                    np.concatenate((query[1], key[1], value[1])),
                    *linear(f"{name}.attention.output.dense", hidden, hidden),
                    norm(f"{name}.attention.output.LayerNorm"),
                    *linear(f"{name}.intermediate.dense", hidden, size),
                    *linear(f"{name}.output.dense", size, hidden),
                    norm(f"{name}.output.LayerNorm"),
                )
            )
        self._layers = tuple(layers)

    def forward(self, ids: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
        """Hidden states ``(len(ids), hidden)`` float32 of several texts at once.

        ``ids`` holds the texts' token ids one after another, ``lengths`` how many each
        has. Nothing is padded: the projections run over every token of every text as one
        matrix, attention runs text by text (what a padding mask computes, without the
        padded rows and columns).
        """
        config = self.config
        ids = np.asarray(ids, dtype=np.int64)
        sizes = np.asarray(lengths, dtype=np.int64)
        if ids.ndim != 1 or sizes.sum() != len(ids) or (sizes < 1).any():
            raise ValueError("ids must be 1-D and lengths positive counts that add up to it")
        if len(sizes) and sizes.max() > config.max_position_embeddings:
            raise ValueError(f"a text of {sizes.max()} tokens, more than the model's positions")
        hidden, heads = config.hidden_size, config.num_attention_heads
        head_size = hidden // heads
        if not len(ids):
            return np.zeros((0, hidden), dtype=np.float32)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        positions = np.arange(len(ids)) - np.repeat(starts, sizes)
        x = self._word[ids] + self._position[positions] + self._token_type
        x = self._layer_norm(x, self._embedding_norm)
        scale = np.float32(1.0 / math.sqrt(head_size))
        spans = list(zip(starts.tolist(), (starts + sizes).tolist(), strict=True))
        for layer in self._layers:
            qkv = x @ layer.qkv
            qkv += layer.qkv_bias
            # (tokens, 3, heads, head) -> (3, heads, tokens, head): per head, one text's
            # queries, keys and values are then consecutive rows.
            q, k, v = np.ascontiguousarray(
                qkv.reshape(-1, 3, heads, head_size).transpose(1, 2, 0, 3)
            )
            q *= scale
            context = np.empty_like(q)
            for start, end in spans:
                scores = q[:, start:end] @ k[:, start:end].transpose(0, 2, 1)
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)
                scores /= scores.sum(axis=-1, keepdims=True)
                np.matmul(scores, v[:, start:end], out=context[:, start:end])
            attended = context.transpose(1, 0, 2).reshape(-1, hidden) @ layer.attention_out
            attended += layer.attention_out_bias
            attended += x
            x = self._layer_norm(attended, layer.attention_norm)
            inner = x @ layer.intermediate
            inner += layer.intermediate_bias
            inner = self._gelu(inner)
            out = inner @ layer.output
            out += layer.output_bias
            out += x
            x = self._layer_norm(out, layer.output_norm)
        return x

    def _layer_norm(self, x: np.ndarray, norm: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        weight, bias = norm
        centred = x - x.mean(axis=-1, keepdims=True)
        variance = np.mean(centred * centred, axis=-1, keepdims=True)
        return centred / np.sqrt(variance + np.float32(self.config.layer_norm_eps)) * weight + bias

    def _gelu(self, x: np.ndarray) -> np.ndarray:
        # The exact form BERT was trained with: x * Φ(x) = x/2 * (1 + erf(x / √2)).
        result = self._erf(x * np.float32(1.0 / math.sqrt(2.0)))
        result += np.float32(1.0)
        result *= x
        result *= np.float32(0.5)
        return result
