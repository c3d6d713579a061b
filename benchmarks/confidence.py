"""Does ``SearchResult.confidence`` tell "this answers it" from "nothing here matches"?

    python benchmarks/confidence.py                     # 300 queries per set, every pairing
    python benchmarks/confidence.py --limit-queries 1000 --threshold 0.3 --json conf.json

Each set's queries are asked of their own corpus (answerable) and of another set's corpus
(unanswerable); the figure is the AUC of the top result's confidence between the two (1.0:
every answerable query scores above every unanswerable one), with the precision and recall
of ``--threshold`` (a query counts as "answered" when its top confidence reaches it; no
result counts as 0).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import the harness as the `benchmarks` package
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.datasets import Dataset, default_datasets_dir, load_dataset
from benchmarks.package_system import SharedKnowledgeBase, load_core_class

# (queries of, asked of another corpus): same-language pairings, as an agent would meet them.
PAIRINGS = (
    ("squad-long", "tldr"),
    ("tldr", "squad-long"),
    ("cranfield", "squad-long"),
    ("squad-long", "cranfield"),
    ("cmrc2018", "tldr"),
)
DEFAULT_THRESHOLD = 0.3


def auc(positive: list[float], negative: list[float]) -> float:
    """P(a random positive scores above a random negative), ties counting half."""
    ranked = sorted([(v, 1) for v in positive] + [(v, 0) for v in negative])
    # Rank-sum (Mann-Whitney U) with average ranks for ties.
    rank_sum = 0.0
    index = 0
    while index < len(ranked):
        end = index
        while end < len(ranked) and ranked[end][0] == ranked[index][0]:
            end += 1
        average = (index + end + 1) / 2  # 1-based ranks index+1 .. end
        rank_sum += average * sum(label for _, label in ranked[index:end])
        index = end
    n_pos, n_neg = len(positive), len(negative)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def top_confidences(core: Any, dataset: Dataset) -> list[float]:
    out = []
    for query in dataset.queries:
        if dataset.name == "tldr" and query.lang != "en":
            continue  # tldr's Chinese queries would be "unanswerable" by language alone
        results = core.search(query.text, limit=1, context_window=0)
        out.append(results[0].confidence if results else 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=None, metavar="DIR")
    parser.add_argument("--limit-queries", type=int, default=300, metavar="N")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, metavar="T")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args(argv)
    root = args.datasets or default_datasets_dir()
    names = sorted({name for pairing in PAIRINGS for name in pairing})
    datasets = {name: load_dataset(name, root).sample_queries(args.limit_queries) for name in names}
    cores = {}
    for name, dataset in datasets.items():
        cores[name] = SharedKnowledgeBase(load_core_class(), {}).acquire(dataset.documents)
    print(f"{'queries of':<12} {'asked of':<12} {'AUC':>6} {'precision':>9} {'recall':>7}")
    rows = []
    for own, other in PAIRINGS:
        answerable = top_confidences(cores[own], datasets[own])
        unanswerable = top_confidences(cores[other], datasets[own])
        kept_good = sum(value >= args.threshold for value in answerable)
        kept_bad = sum(value >= args.threshold for value in unanswerable)
        row = {
            "queries": own,
            "corpus": other,
            "auc": auc(answerable, unanswerable),
            "precision": kept_good / (kept_good + kept_bad) if kept_good + kept_bad else 0.0,
            "recall": kept_good / len(answerable),
        }
        rows.append(row)
        print(
            f"{own:<12} {other:<12} {row['auc']:6.3f} {row['precision']:9.3f} {row['recall']:7.3f}",
            flush=True,
        )
    if args.json:
        command = shlex.join(["python", "benchmarks/confidence.py", *sys.argv[1:]])
        report = {"command": command, "threshold": args.threshold, "pairings": rows}
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
