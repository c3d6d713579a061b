"""The published reference figures of ../shared/datasets/README.md, printed beside the
figures measured in the same run (the measured ones are what to compare against)."""

from __future__ import annotations

# data set → metric label → system name → figure
PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "cranfield": {"nDCG@10": {"bm25s-doc": 0.373, "fts5": 0.369}},
    "squad-long": {
        "R@1": {"bm25s-doc": 0.912, "bm25s-para": 0.943},
        "answer@1": {"bm25s-doc": 0.000, "bm25s-para": 0.802},
    },
    "cmrc2018": {"R@1": {"bm25s-doc": 0.934, "bm25s-para": 0.934}},
    "tldr": {"MRR@10 en": {"bm25s-doc": 0.879}, "MRR@10 zh": {"bm25s-doc": 0.870}},
}

# Figures in the README that no system of this harness reproduces.
NOTES: dict[str, str] = {
    "cranfield": "Whoosh defaults (StandardAnalyzer, OR): p@1 0.256 (BM25 p@1 ≈ 0.43)",
    "cmrc2018": "Whoosh defaults (StandardAnalyzer, OR): R@1 0.164",
}
