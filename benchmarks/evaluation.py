"""Which metrics each data set reports, and how a run (query id → hits) is scored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.datasets import Dataset, Query
from benchmarks.metrics import contains_answer, mean, ndcg_at_k, recall_at_k, reciprocal_rank_at_k
from benchmarks.systems import Hit

Scorer = Callable[[Query, list[Hit], dict[str, int]], float]


def _ids(hits: list[Hit]) -> list[str]:
    return [hit.doc_id for hit in hits]


def _ndcg(k: int) -> Scorer:
    return lambda query, hits, gains: ndcg_at_k(_ids(hits), gains, k)


def _mrr(k: int) -> Scorer:
    return lambda query, hits, gains: reciprocal_rank_at_k(_ids(hits), gains, k)


def _recall(k: int) -> Scorer:
    return lambda query, hits, gains: recall_at_k(_ids(hits), gains, k)


def _answer_at_1(query: Query, hits: list[Hit], gains: dict[str, int]) -> float:
    """The best passage of the top document contains one of the answers (whatever the doc)."""
    return float(bool(hits) and contains_answer(hits[0].passage, query.answers))


def _any_query(query: Query) -> bool:
    return True


def _lang(lang: str) -> Callable[[Query], bool]:
    return lambda query: query.lang == lang


@dataclass(frozen=True)
class Metric:
    label: str
    score: Scorer
    applies: Callable[[Query], bool] = _any_query


# data set → (search depth, metrics)
METRICS: dict[str, tuple[int, list[Metric]]] = {
    "cranfield": (
        100,
        [Metric("nDCG@10", _ndcg(10)), Metric("MRR@10", _mrr(10)), Metric("R@100", _recall(100))],
    ),
    "squad-long": (
        10,
        [Metric("R@1", _recall(1)), Metric("R@5", _recall(5)), Metric("answer@1", _answer_at_1)],
    ),
    "cmrc2018": (10, [Metric("R@1", _recall(1)), Metric("MRR@10", _mrr(10))]),
    "tldr": (
        10,
        [
            Metric("MRR@10 en", _mrr(10), _lang("en")),
            Metric("MRR@10 zh", _mrr(10), _lang("zh")),
        ],
    ),
}


def evaluate(dataset: Dataset, runs: dict[str, list[Hit]]) -> dict[str, float]:
    """Mean of every metric of ``dataset`` over its queries (a missing run scores 0)."""
    _, metrics = METRICS[dataset.name]
    figures = {}
    for metric in metrics:
        figures[metric.label] = mean(
            [
                metric.score(query, runs.get(query.query_id, []), dataset.qrels[query.query_id])
                for query in dataset.queries
                if metric.applies(query) and query.query_id in dataset.qrels
            ]
        )
    return figures
