"""An OpenAI-compatible embedding and rerank server for tests (no tests of its own).

:class:`EmbeddingServer` answers ``POST /v1/embeddings`` and ``POST /v1/rerank`` on
127.0.0.1 from a daemon thread. Vectors are a hashed bag of words (:func:`fake_vector`), so
texts sharing words are similar, and deliberately not unit length; rerank scores are the
share of query words a document contains (:func:`overlap_score`). Answers come in reverse
order (embeddings) or best first (rerank) so a client must sort by ``index``. Every request
is recorded (headers, decoded body, start time); :meth:`EmbeddingServer.fail` and
:meth:`EmbeddingServer.answer_raw` queue faults, and attributes change the steady behaviour
(``dims``, ``honour_dimensions``, ``drop_last``, ``duplicate_index``, ``delay``,
``report_usage``: a ``usage`` with one token a word, as OpenAI and Jina report theirs).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["DIMS", "EmbeddingServer", "Fault", "Recorded", "fake_vector", "overlap_score"]

DIMS = 64
_WORD = re.compile(r"\w+")
_STEP = 0.02  # how often a sleeping handler looks whether the server is closing


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def fake_vector(text: str, dims: int = DIMS) -> list[float]:
    """A deterministic, unnormalised vector: each word adds ±2.5 at a hashed position."""
    vector = [0.0] * dims
    for word in words(text):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[int.from_bytes(digest[:4], "big") % dims] += 2.5 if digest[4] & 1 else -2.5
    return vector


def overlap_score(query: str, document: str) -> float:
    """The share of the query's distinct words found in the document."""
    wanted = set(words(query))
    return len(wanted & set(words(document))) / len(wanted) if wanted else 0.0


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    path: str
    headers: dict[str, str]  # names lower-case
    body: Any  # decoded JSON, or None when the body was not JSON
    started: float  # time.monotonic() when the handler began


@dataclass
class Fault:
    """One queued bad answer: an error status with a message, or a raw body."""

    status: int = 500
    message: str = "internal server error"
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as-is instead of a JSON error
    delay: float = 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: EmbeddingServer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out and hung up is what the slow answers are for


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean

    def do_POST(self) -> None:
        owner = self.server.owner
        started = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        owner._record(Recorded(self.path, headers, body, started))
        fault = owner._next_fault()
        owner._sleep((fault.delay if fault else 0.0) or owner.delay)
        if fault is not None:
            if fault.raw is not None:
                self._send(fault.status, fault.raw, fault.headers)
            else:
                error = {"error": {"message": fault.message, "type": "server_error"}}
                self._send(fault.status, json.dumps(error).encode(), fault.headers)
            return
        if self.path == "/v1/embeddings":
            status, answer = owner._embeddings(body)
        elif self.path == "/v1/rerank":
            status, answer = owner._rerank(body)
        else:
            status, answer = 404, {"detail": f"no route {self.path}"}
        self._send(status, json.dumps(answer).encode())

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class EmbeddingServer:
    """The fake service; use as a context manager. ``base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.dims = DIMS  # vector size when a request names no "dimensions"
        self.honour_dimensions = True
        self.drop_last = False  # answer one item short
        self.duplicate_index = False  # give the last item the first one's index
        self.delay = 0.0  # seconds before every answer
        self.report_usage = False  # add "usage": {"total_tokens": words sent} to answers
        self.requests: list[Recorded] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        # A short poll keeps close() (and so every test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def fail(
        self,
        status: int = 500,
        message: str = "internal server error",
        *,
        retry_after: str | None = None,
        times: int = 1,
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests with ``status`` and a JSON error message."""
        headers = dict(headers or {})
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        with self._lock:
            self._faults.extend(Fault(status, message, headers, None, delay) for _ in range(times))

    def answer_raw(self, body: bytes, status: int = 200, *, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``body`` as-is (e.g. malformed JSON)."""
        with self._lock:
            self._faults.extend(Fault(status, raw=body) for _ in range(times))

    def bodies(self, path: str = "/v1/embeddings") -> list[Any]:
        with self._lock:
            return [request.body for request in self.requests if request.path == path]

    def _record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._closing.is_set() and time.monotonic() < deadline:
            time.sleep(min(_STEP, max(0.0, deadline - time.monotonic())))

    def _embeddings(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return 400, {"error": {"message": "'model' is required"}}
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
            return 400, {"error": {"message": "'input' must be a string or a list of strings"}}
        if any(text == "" for text in inputs):  # as OpenAI does
            return 400, {"error": {"message": "'input' cannot contain an empty string"}}
        dims = body.get("dimensions") if self.honour_dimensions else None
        dims = dims or self.dims
        data = [
            {"object": "embedding", "index": index, "embedding": fake_vector(text, dims)}
            for index, text in enumerate(inputs)
        ]
        data.reverse()
        if self.drop_last:
            data = data[:-1]
        if self.duplicate_index and len(data) > 1:
            data[-1]["index"] = data[0]["index"]
        answer = {"object": "list", "data": data, "model": body["model"]}
        if self.report_usage:
            tokens = sum(len(words(text)) for text in inputs)
            answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, answer

    def _rerank(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return 400, {"detail": "'query' is required"}
        documents = body.get("documents")
        if not isinstance(documents, list):
            return 400, {"detail": "'documents' must be a list"}
        results = [
            {"index": index, "relevance_score": overlap_score(body["query"], document)}
            for index, document in enumerate(documents)
        ]
        results.sort(key=lambda result: -result["relevance_score"])
        top_n = body.get("top_n")
        if isinstance(top_n, int):
            results = results[:top_n]
        if self.drop_last:
            results = results[:-1]
        answer = {"model": body.get("model"), "results": results}
        if self.report_usage:
            query = len(words(body["query"]))
            tokens = sum(query + len(words(str(document))) for document in documents)
            answer["usage"] = {"total_tokens": tokens}
        return 200, answer
