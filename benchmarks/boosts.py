"""What the ranking options cost on the quality sets: recency boost, temporal decay, MMR.

    python benchmarks/boosts.py                              # every set, the default samples
    python benchmarks/boosts.py --datasets-only cranfield --variant '{"mmr_lambda": 0.5}'

The data sets have no dates, so every item is given a random age of 0–365 days (seeded); each
set is ingested once and every variant (``search(options=...)``) is searched over it, beside
the defaults. An option that only reorders by age costs what it moves away from relevance.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.datasets import default_datasets_dir, load_dataset
from benchmarks.evaluation import METRICS, evaluate
from benchmarks.package_system import KnowledgeAgentSystem, SharedKnowledgeBase
from benchmarks.systems import Hit
from knowledge_agent import KnowledgeAgentCore

SAMPLES = {"cranfield": None, "squad-long": 1000, "tldr": 2000, "cmrc2018": None}
VARIANTS = ({"recency_weight": 0.5}, {"decay_half_life": 90}, {"mmr_lambda": 0.7})


def age_items(core: KnowledgeAgentCore, seed: int) -> None:
    """Give every stored item a ``modified_at`` of 0–365 days ago."""
    rng = random.Random(seed)
    now = datetime.now(timezone.utc)
    for item in core.storage.iter_items():
        item.metadata["modified_at"] = (now - timedelta(days=rng.uniform(0, 365))).isoformat()
        core.storage.save_item(item)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=None, help="folder of the data sets")
    parser.add_argument("--datasets-only", default=",".join(SAMPLES), help="comma-separated")
    parser.add_argument("--variant", action="append", type=json.loads, help="JSON options")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    variants = [{}, *(args.variant or VARIANTS)]
    for name in args.datasets_only.split(","):
        dataset = load_dataset(name, args.datasets or default_datasets_dir())
        dataset = dataset.sample_queries(SAMPLES.get(name), 0)
        system = KnowledgeAgentSystem("ka", SharedKnowledgeBase(KnowledgeAgentCore, {}))
        system.index(dataset.documents)
        core = system._core
        age_items(core, args.seed)
        depth, _ = METRICS[name]
        print(f"== {name}: {len(dataset.queries)} queries")
        for options in variants:
            started = time.perf_counter()
            runs = {
                query.query_id: [
                    Hit(
                        r.item.source_uri,
                        r.relevance_score,
                        r.matched_chunks[0].content if r.matched_chunks else None,
                    )
                    for r in core.search(
                        query.text, limit=depth, context_window=0, options=options or None
                    )
                ]
                for query in dataset.queries
            }
            ms = (time.perf_counter() - started) / len(dataset.queries) * 1000
            figures = " ".join(f"{k} {v:.3f}" for k, v in evaluate(dataset, runs).items())
            print(f"{json.dumps(options) or '{}':<28} {figures}  {ms:.1f} ms", flush=True)
        system.close()


if __name__ == "__main__":
    main()
