"""Local embeddings from WordLlama: static token vectors, average-pooled, CPU only.

The ``wordllama`` wheel ships the ``l2_supercat`` 256-dimension weights and its tokenizer,
so nothing is downloaded. One trap (wordllama 0.4.0): ``WordLlama.load`` looks for the
tokenizer in ``wordllama/tokenizer/`` while the wheel ships it in ``wordllama/tokenizers/``,
so by default it falls back to a Hugging Face download. We copy the file into a per-user
cache folder, where ``load`` looks next, and load with ``disable_download=True``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import platformdirs

from knowledge_agent.embeddings.base import (
    EmbeddingKind,
    check_batch_size,
    check_kind,
    check_texts,
    normalize_rows,
    positive_int,
)
from knowledge_agent.embeddings.usage import UsageCounter
from knowledge_agent.errors import ConfigError
from knowledge_agent.extras import missing_extra

__all__ = ["WordLlamaEmbedder", "default_cache_dir"]

logger = logging.getLogger(__name__)

_MISSING = missing_extra("the WordLlama embedder (wordllama)", "embed")


def default_cache_dir() -> Path:
    """The per-user cache folder for WordLlama files (``$XDG_CACHE_HOME`` is honoured).

    ``~/.cache/knowledge-agent/wordllama`` on Linux, the platform's cache folder elsewhere;
    never inside a data folder, which is shared and copied.
    """
    return Path(platformdirs.user_cache_dir("knowledge-agent", appauthor=False)) / "wordllama"


class WordLlamaEmbedder:
    """Embeddings from a WordLlama model, offline.

    ``dim`` below the shipped 256 uses the first ``dim`` components of the 256-dimension
    weights (the model is trained Matryoshka-style; that is what ``trunc_dim`` does); a larger
    ``dim`` needs its weights file placed in ``{cache_dir}/weights/`` by hand. The model is
    loaded on the first ``embed`` (or by :meth:`load`, to surface errors early) and kept.
    ``kind`` is ignored: the model is symmetric. ``name`` is ``"wordllama:{config}:{dim}"``.
    Thread-safe.
    """

    languages = ("en",)
    """Its vocabulary and training are English: other languages' queries skip it."""

    def __init__(
        self,
        config: str = "l2_supercat",
        dim: int = 256,
        *,
        batch_size: int = 256,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not isinstance(config, str) or not config:
            raise ConfigError(f"config must be a WordLlama configuration name, got {config!r}")
        if not positive_int(dim):
            raise ConfigError(f"dim must be a positive integer, got {dim!r}")
        if importlib.util.find_spec("wordllama") is None:
            raise ConfigError(_MISSING)
        self.config = config
        self.batch_size = check_batch_size(batch_size)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._dim = dim
        self._name = f"wordllama:{config}:{dim}"
        self._lock = threading.Lock()
        self.usage = UsageCounter()  # calls and texts: a local model counts no tokens
        self._matrix: np.ndarray | None = None  # (vocabulary, dim) float32 token vectors
        self._tokenizer: Any = None
        self._csr_matrix: Any = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimensions(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"WordLlamaEmbedder(name={self._name!r})"

    def load(self) -> None:
        """Load the model now (idempotent); ``ConfigError`` if it cannot be loaded offline."""
        with self._lock:
            if self._matrix is None:
                self._load()

    def embed(self, texts: Sequence[str], *, kind: EmbeddingKind = "document") -> np.ndarray:
        """One unit (or zero, for a text without tokens) float32 row per text."""
        check_kind(kind)
        texts = check_texts(texts)
        self.load()
        self.usage.record(texts, local=True)
        matrix, tokenizer, csr_matrix = self._matrix, self._tokenizer, self._csr_matrix
        assert matrix is not None
        vocabulary = matrix.shape[0]
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
            lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(batch))
            indptr = np.zeros(len(batch) + 1, dtype=np.int64)
            np.cumsum(lengths, out=indptr[1:])
            ids = np.fromiter(
                itertools.chain.from_iterable(e.ids for e in encodings), np.int64, indptr[-1]
            )
            np.clip(ids, 0, vocabulary - 1, out=ids)
            # Sum of token vectors as (texts x vocabulary counts) @ vectors: memory is one row
            # per text, where wordllama's own padded (texts x longest x dim) tensor can take
            # gigabytes when one long text shares a batch with short ones. The mean's length
            # division is dropped: the rows are normalised anyway.
            counts = csr_matrix(
                (np.ones(len(ids), dtype=np.float32), ids, indptr),
                shape=(len(batch), vocabulary),
            )
            out[start : start + len(batch)] = normalize_rows(counts @ matrix)
        return out

    def _load(self) -> None:
        from scipy.sparse import csr_matrix

        wordllama = _import_wordllama()
        from wordllama.config import WordLlamaModels

        word_llama = wordllama.WordLlama
        configs = WordLlamaModels.list_configs()
        if self.config not in configs:
            raise ConfigError(
                f"unknown WordLlama config {self.config!r}; valid: {', '.join(sorted(configs))}"
            )
        uri = getattr(WordLlamaModels, self.config)
        if self._dim not in uri.available_dims:
            raise ConfigError(
                f"WordLlama {self.config} has no {self._dim} dimensions; valid: "
                f"{', '.join(map(str, uri.available_dims))}"
            )
        package_dir = Path(wordllama.__file__).parent
        _install_tokenizer(word_llama, uri, package_dir, self.cache_dir)
        source_dim = self._weights_dim(word_llama, uri, package_dir)
        try:
            model = word_llama.load(
                self.config,
                cache_dir=self.cache_dir,
                dim=source_dim,
                trunc_dim=self._dim if source_dim != self._dim else None,
                disable_download=True,
            )
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(
                f"WordLlama {self.config} could not be loaded offline: {exc}"
            ) from exc
        tokenizer = model.tokenizer
        # We pool unpadded token lists ourselves; this tokenizer object is ours alone.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        matrix = np.ascontiguousarray(model.embedding, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[1] != self._dim:
            raise ConfigError(f"WordLlama weights have shape {matrix.shape}, not (*, {self._dim})")
        self._tokenizer, self._csr_matrix = tokenizer, csr_matrix
        self._matrix = matrix  # set last: it is what marks the model as loaded
        logger.info("WordLlama %s loaded (%d tokens x %d dimensions)", self.config, *matrix.shape)

    def _weights_dim(self, word_llama: Any, uri: Any, package_dir: Path) -> int:
        """``dim`` if its weights are on disk, else the smallest larger local one to truncate."""
        cache_weights = word_llama.get_file_path("weights", self.cache_dir)
        candidates = [self._dim, *sorted(d for d in uri.available_dims if d > self._dim)]
        for candidate in candidates:
            filename = word_llama.get_filename(self.config, candidate, False)
            if (package_dir / "weights" / filename).is_file():
                return candidate
            if (cache_weights / filename).is_file():
                return candidate
        filename = word_llama.get_filename(self.config, self._dim, False)
        raise ConfigError(
            f"no local WordLlama weights for {self.config} at {self._dim} dimensions or more; "
            f"place {filename} in {cache_weights} (nothing is downloaded)"
        )


def _import_wordllama() -> ModuleType:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
    except ImportError as exc:
        raise ConfigError(f"{_MISSING} ({exc})") from exc
    finally:
        # wordllama calls logging.basicConfig(level=INFO) when imported; a library must
        # leave the host's logging alone (an MCP server's stderr would fill with INFO).
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return wordllama


def _install_tokenizer(word_llama: Any, uri: Any, package_dir: Path, cache_dir: Path) -> None:
    """Copy the wheel's tokenizer file to where ``WordLlama.load`` looks in ``cache_dir``.

    Safe with several processes at once: each writes a unique temporary file, fsyncs it and
    renames it over the target, so a reader sees the old file or the whole new one.
    """
    filename = uri.tokenizer_config
    if (package_dir / "tokenizer" / filename).is_file():
        return  # a release that ships it where load() looks first
    target_dir = word_llama.get_file_path("tokenizer", cache_dir)
    target = target_dir / filename
    source = package_dir / "tokenizers" / filename
    if not source.is_file():
        if target.is_file():
            return  # placed by hand
        raise ConfigError(
            f"the wordllama package has no tokenizer file {filename}; place it in {target_dir}"
        )
    data = source.read_bytes()
    with contextlib.suppress(OSError):
        if target.stat().st_size == len(data) and target.read_bytes() == data:
            return
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target_dir, prefix=f".{filename}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
    except OSError as exc:
        raise ConfigError(
            f"cannot write the WordLlama tokenizer to {target_dir} ({exc}); pass another cache_dir"
        ) from exc
    logger.info("WordLlama tokenizer copied to %s", target)
