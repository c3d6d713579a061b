"""Embeddings and reranking from OpenAI-compatible HTTP services.

``POST {base_url}/embeddings`` (OpenAI, vLLM, llama.cpp, Ollama, LM Studio, TEI, Infinity…)
and ``POST {base_url}/rerank`` (the Jina / Cohere / vLLM shape). Standard library only.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Sequence
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
from knowledge_agent.embeddings.http_client import JsonClient
from knowledge_agent.embeddings.usage import UsageCounter
from knowledge_agent.errors import ConfigError, EmbeddingError

__all__ = ["OpenAIEmbedder", "OpenAIReranker"]

logger = logging.getLogger(__name__)


class OpenAIEmbedder:
    """Vectors from an OpenAI-compatible ``/embeddings`` endpoint.

    Texts go out ``batch_size`` at a time, request starts at least ``min_interval`` seconds
    apart (across threads). ``query_prefix`` / ``document_prefix`` are prepended for
    instruction-tuned models (``"query: "``, ``"passage: "`` for E5). An empty text gets a
    zero row without being sent (OpenAI rejects ``""``). ``dimensions`` is sent to the server
    when given; otherwise it is learnt from the first answer, and every answer must match it.

    ``name`` is ``"openai:{base_url}:{model}"``, then ``":{dimensions}"`` when dimensions are
    requested, then ``":prefix-{hash}"`` when prefixes are set: it never needs the network.
    Reading ``dimensions`` before any ``embed`` call sends one probe request if they were
    not given. The API key is ``api_key`` when given (as 002's ``config.toml`` holds it),
    else read from ``api_key_env`` on each request. ``usage`` counts the requests, texts and
    tokens sent (:mod:`~knowledge_agent.embeddings.usage`). Thread-safe.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        min_interval: float = 0.0,
        query_prefix: str = "",
        document_prefix: str = "",
        timeout: float = 30.0,
    ) -> None:
        self._client = JsonClient(
            base_url,
            api_key_env=api_key_env,
            api_key=api_key,
            timeout=timeout,
            min_interval=min_interval,
        )
        self.model = _check_model(model)
        if dimensions is not None and not positive_int(dimensions):
            raise ConfigError(f"dimensions must be a positive integer or None, got {dimensions!r}")
        self.batch_size = check_batch_size(batch_size)
        for key, value in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(value, str):
                raise ConfigError(f"{key} must be a string, not {type(value).__name__}")
        self.requested_dimensions = dimensions
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._dimensions = dimensions
        self._lock = threading.Lock()
        self.usage = UsageCounter()
        name = f"openai:{self._client.base_url}:{self.model}"
        if dimensions is not None:
            name += f":{dimensions}"
        if query_prefix or document_prefix:
            # The instructions change the vectors, so they are part of the space's identity.
            digest = hashlib.sha256(f"{query_prefix}\0{document_prefix}".encode()).hexdigest()
            name += f":prefix-{digest[:12]}"
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def base_url(self) -> str:
        return self._client.base_url

    @property
    def url(self) -> str:
        return self._client.url("embeddings")

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            self._embed_batch(["dimensions probe"])
        assert self._dimensions is not None  # set by the answer or an error was raised
        return self._dimensions

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(name={self._name!r})"

    def embed(self, texts: Sequence[str], *, kind: EmbeddingKind = "document") -> np.ndarray:
        """One unit (or zero) float32 row per text, in input order."""
        check_kind(kind)
        texts = check_texts(texts)
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        todo = [i for i, text in enumerate(texts) if text]
        parts: list[tuple[list[int], np.ndarray]] = []
        for start in range(0, len(todo), self.batch_size):
            positions = todo[start : start + self.batch_size]
            parts.append((positions, self._embed_batch([prefix + texts[i] for i in positions])))
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for positions, vectors in parts:
            out[positions] = normalize_rows(vectors)
        return out

    def _embed_batch(self, inputs: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": inputs}
        if self.requested_dimensions is not None:
            payload["dimensions"] = self.requested_dimensions
        answer = _post(self._client, self.usage, "embeddings", payload, inputs)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise EmbeddingError(self.url, "answer has no 'data' list")
        rows = _by_index(self.url, data, len(inputs), "embeddings")
        vectors = [row.get("embedding") for row in rows]
        if not all(isinstance(vector, list) for vector in vectors):
            raise EmbeddingError(self.url, "an 'embedding' is not a list of numbers")
        try:
            matrix = np.array(vectors, dtype=np.float64)
        except (TypeError, ValueError):
            raise EmbeddingError(
                self.url, "embeddings are not lists of numbers of one length"
            ) from None
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise EmbeddingError(self.url, "embeddings are not flat, non-empty lists of numbers")
        if not np.isfinite(matrix).all():
            raise EmbeddingError(self.url, "an embedding has a non-finite value (NaN or inf)")
        self._check_dimensions(matrix.shape[1])
        return matrix

    def _check_dimensions(self, found: int) -> None:
        with self._lock:
            if self._dimensions is None:
                self._dimensions = found
                logger.info("%s gives %d-dimensional embeddings", self.url, found)
                return
            expected = self._dimensions
        if found != expected:
            hint = " (does the server ignore 'dimensions'?)" if self.requested_dimensions else ""
            raise EmbeddingError(
                self.url, f"expected {expected}-dimensional embeddings, got {found}{hint}"
            )


class OpenAIReranker:
    """Relevance scores from a Jina / Cohere / vLLM style ``/rerank`` endpoint.

        Documents go out ``batch_size`` at a time (a cross-encoder scores each pair on its own,
        so scores from different batches compare). ``query_prefix`` is prepended to the query
        for models that expect an instruction (seed 002's ``query_instruction``, e.g.
        ``"Instruct: …
    Query: "``); it changes what the service reads, not the documents.
        ``name`` is ``"openai-rerank:{base_url}:{model}"``. The API key is ``api_key`` or read
        from ``api_key_env``, as for :class:`OpenAIEmbedder`. ``usage`` counts the requests,
        texts and tokens sent (:mod:`~knowledge_agent.embeddings.usage`). Thread-safe.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        api_key: str | None = None,
        batch_size: int = 64,
        min_interval: float = 0.0,
        query_prefix: str = "",
        timeout: float = 30.0,
    ) -> None:
        self._client = JsonClient(
            base_url,
            api_key_env=api_key_env,
            api_key=api_key,
            timeout=timeout,
            min_interval=min_interval,
        )
        self.model = _check_model(model)
        self.batch_size = check_batch_size(batch_size)
        if not isinstance(query_prefix, str):
            raise ConfigError(f"query_prefix must be a string, not {type(query_prefix).__name__}")
        self.query_prefix = query_prefix
        self.usage = UsageCounter()
        self._name = f"openai-rerank:{self._client.base_url}:{self.model}"

    @property
    def name(self) -> str:
        return self._name

    @property
    def base_url(self) -> str:
        return self._client.base_url

    @property
    def url(self) -> str:
        return self._client.url("rerank")

    def __repr__(self) -> str:
        return f"OpenAIReranker(name={self._name!r})"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text, in input order; higher is more relevant."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        texts = check_texts(texts)
        query = self.query_prefix + query
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            # top_n asks servers that return only the best few by default for all of them.
            payload = {"model": self.model, "query": query, "documents": batch, "top_n": len(batch)}
            # A cross-encoder reads the query with every document.
            sent = [query + text for text in batch]
            answer = _post(self._client, self.usage, "rerank", payload, sent)
            results = answer.get("results") if isinstance(answer, dict) else None
            if not isinstance(results, list):
                raise EmbeddingError(self.url, "answer has no 'results' list")
            for row in _by_index(self.url, results, len(batch), "scores"):
                score = row.get("relevance_score", row.get("score"))
                if isinstance(score, bool) or not isinstance(score, (int, float)):
                    raise EmbeddingError(self.url, "a result has no numeric 'relevance_score'")
                if not math.isfinite(score):
                    raise EmbeddingError(self.url, "a relevance score is not finite")
                scores.append(float(score))
        return scores


def _post(
    client: JsonClient, usage: UsageCounter, endpoint: str, payload: dict[str, Any], sent: list[str]
) -> Any:
    """``client.post``, counted in ``usage`` (``sent``: the texts the service reads)."""
    try:
        answer = client.post(endpoint, payload)
    except EmbeddingError:
        usage.record_failure()
        raise
    usage.record(sent, answer)
    return answer


def _by_index(url: str, items: list[Any], expected: int, what: str) -> list[dict[str, Any]]:
    """``items`` put in input order by their ``index`` (list order when none has one)."""
    if len(items) != expected:
        raise EmbeddingError(url, f"asked for {expected} {what}, got {len(items)}")
    if not all(isinstance(item, dict) for item in items):
        raise EmbeddingError(url, f"the {what} are not JSON objects")
    if all("index" not in item for item in items):
        return items
    ordered: list[dict[str, Any] | None] = [None] * expected
    for item in items:
        index = item.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
            raise EmbeddingError(url, f"index {index!r} is not in 0..{expected - 1}")
        if ordered[index] is not None:
            raise EmbeddingError(url, f"index {index} appears twice")
        ordered[index] = item
    return ordered  # type: ignore[return-value]  # every slot filled: count checked above


def _check_model(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f"model must be a non-empty string, got {model!r}")
    return model
