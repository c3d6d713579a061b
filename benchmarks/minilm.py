"""The numpy MiniLM embedder: its speed on this machine and its agreement with torch.

    python benchmarks/minilm.py                                   # speed only
    python benchmarks/minilm.py --reference-python /path/to/torch-env/bin/python
    python benchmarks/minilm.py --texts 200 --threads 1 --json minilm.json

The texts are real chunks: SQuAD's long articles cut by the default chunker, embedded as
the dense index embeds a chunk (heading, newline, content), a deterministic sample of
``--texts``. Measured: chunks embedded per second (``embed`` over all of them, as the index
calls it) and milliseconds per query (one short question at a time), for each BLAS thread
count in ``--threads`` ("default" leaves BLAS as it is).

With ``--reference-python``, an interpreter that has torch and sentence-transformers runs
benchmarks/minilm_reference.py on the same texts (through files in ``--cache``); the table
then gives the cosine between each numpy vector and sentence-transformers' (min, mean, how
many fall below 0.999) and torch's own speed on the same texts.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np
from threadpoolctl import threadpool_limits
from tokenizers import Tokenizer

from benchmarks.datasets import default_datasets_dir, load_dataset
from knowledge_agent.backends.local.dense.index import MAX_TEXT_CHARS
from knowledge_agent.chunking.content_chunker import ChunkConfig, ContentChunker
from knowledge_agent.embeddings import MiniLMEmbedder

AGREEMENT = 0.999
QUERIES = 50


def chunk_texts(root: Path, count: int, seed: int) -> list[str]:
    """``count`` chunks of SQuAD's long articles, as the dense index embeds them."""
    chunker = ContentChunker(ChunkConfig())
    texts = []
    for doc in load_dataset("squad-long", root).documents:
        for chunk in chunker.chunk(doc.text, title=doc.title):
            text = f"{chunk.heading}\n{chunk.content}" if chunk.heading else chunk.content
            texts.append(text[:MAX_TEXT_CHARS])
    random.Random(seed).shuffle(texts)
    return texts[:count]


def query_texts(root: Path, count: int, seed: int) -> list[str]:
    queries = [query.text for query in load_dataset("squad-long", root).queries]
    return random.Random(seed).sample(queries, min(count, len(queries)))


def measure(
    embedder: MiniLMEmbedder, texts: list[str], queries: list[str], threads: str
) -> dict[str, Any]:
    limits = None if threads == "default" else int(threads)
    with threadpool_limits(limits=limits, user_api="blas"):
        started = time.perf_counter()
        vectors = embedder.embed(texts)
        seconds = time.perf_counter() - started
        timings = []
        for query in queries:
            started = time.perf_counter()
            embedder.embed([query], kind="query")
            timings.append(1000 * (time.perf_counter() - started))
    return {
        "threads": threads,
        "chunks_per_second": len(texts) / seconds,
        "query_ms_median": statistics.median(timings),
        "query_ms_p95": sorted(timings)[int(0.95 * (len(timings) - 1))],
        "vectors": vectors,
    }


def run_reference(
    python: str,
    texts: list[str],
    queries: list[str],
    cache: Path,
    model_dir: Path,
    threads: int | None,
) -> tuple[dict[str, Any], np.ndarray]:
    """Run benchmarks/minilm_reference.py in ``python``: its summary and its vectors."""
    cache.mkdir(parents=True, exist_ok=True)
    texts_path, queries_path = cache / "texts.json", cache / "queries.json"
    texts_path.write_text(json.dumps(texts), encoding="utf-8")
    queries_path.write_text(json.dumps(queries), encoding="utf-8")
    out = cache / "reference.npy"
    script = Path(__file__).with_name("minilm_reference.py")
    command = [python, str(script), str(texts_path), str(out), "--model-dir", str(model_dir)]
    command += ["--queries", str(queries_path)]
    if threads:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the reference failed ({shlex.join(command)}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1]), np.load(out).astype(np.float64)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=None, metavar="DIR")
    parser.add_argument("--texts", type=int, default=1000, help="chunks to embed (1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        default="default,1",
        help="comma-separated BLAS thread counts to measure, 'default' as BLAS is (default,1)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="MiniLMEmbedder batch_size")
    parser.add_argument(
        "--reference-python",
        default=None,
        metavar="PATH",
        help="a Python with torch and sentence-transformers: compare with its vectors",
    )
    parser.add_argument(
        "--reference-threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "knowledge-agent-minilm-bench",
        help="folder for the texts and the reference vectors",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write figures")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = args.datasets or default_datasets_dir()
    texts = chunk_texts(root, args.texts, args.seed)
    queries = query_texts(root, QUERIES, args.seed)
    embedder = MiniLMEmbedder(batch_size=args.batch_size)
    embedder.load()
    tokenizer = Tokenizer.from_file(str(embedder.model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=embedder.max_tokens)
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    print(
        f"{len(texts)} SQuAD chunks: {statistics.mean(len(t) for t in texts):.0f} characters, "
        f"{statistics.mean(lengths):.0f} tokens on average, "
        f"{sum(n >= embedder.max_tokens for n in lengths) / len(lengths):.0%} cut at "
        f"{embedder.max_tokens}; {len(queries)} single queries"
    )
    report: dict[str, Any] = {
        "command": shlex.join(["python", "benchmarks/minilm.py", *(argv or sys.argv[1:])]),
        "texts": len(texts),
        "mean_tokens": statistics.mean(lengths),
        "numpy": [],
    }
    vectors = None
    for threads in args.threads.split(","):
        figures = measure(embedder, texts, queries, threads.strip())
        vectors = figures.pop("vectors")
        report["numpy"].append(figures)
        print(
            f"numpy, BLAS threads {figures['threads']}: {figures['chunks_per_second']:.1f} "
            f"chunks/s, query {figures['query_ms_median']:.1f} ms median "
            f"({figures['query_ms_p95']:.1f} ms p95)",
            flush=True,
        )
    if args.reference_python and vectors is not None:
        torch, reference = run_reference(
            args.reference_python,
            texts,
            queries,
            args.cache,
            embedder.model_dir,
            args.reference_threads,
        )
        cosines = (vectors.astype(np.float64) * reference).sum(axis=1) / (
            np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1)
        )
        agreement = {
            "min_cosine": float(cosines.min()),
            "mean_cosine": float(cosines.mean()),
            "below": int((cosines < AGREEMENT).sum()),
            "max_abs_difference": float(np.abs(vectors - reference).max()),
        }
        report["torch"] = torch
        report["agreement"] = agreement
        print(
            f"torch {torch['torch']} ({torch['threads']} threads), sentence-transformers: "
            f"{torch['texts_per_second']:.1f} chunks/s, query {torch['query_ms_median']:.1f} ms "
            "median"
        )
        print(
            f"agreement with sentence-transformers on {len(texts)} chunks: cosine min "
            f"{agreement['min_cosine']:.9f}, mean {agreement['mean_cosine']:.9f}, "
            f"{agreement['below']} below {AGREEMENT}; largest component difference "
            f"{agreement['max_abs_difference']:.1e}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
