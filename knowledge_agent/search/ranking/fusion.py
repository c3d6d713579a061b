"""Pure functions that fuse the keyword and semantic rankings into one score per chunk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["FUSION_METHODS", "fuse", "reciprocal_rank_fusion", "weighted_score_fusion"]

FUSION_METHODS = ("rrf", "weighted")


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]], weights: Sequence[float], k: int = 60
) -> dict[str, float]:
    """Σ weight / (k + rank) over the rankings a key appears in (ranks start at 1).

    Scaled by the best possible sum, so a key ranked first everywhere scores 1.0.
    """
    best = sum(weight / (k + 1) for weight in weights)
    fused: dict[str, float] = {}
    if best <= 0:
        return fused
    for ranking, weight in zip(rankings, weights, strict=True):
        if weight <= 0:
            continue
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank) / best
    return fused


def weighted_score_fusion(
    scores: Sequence[Mapping[str, float]], weights: Sequence[float]
) -> dict[str, float]:
    """Σ weight × score / max score, over Σ weight: each engine's scores scaled to [0, 1]."""
    total = sum(weights)
    fused: dict[str, float] = {}
    if total <= 0:
        return fused
    for engine_scores, weight in zip(scores, weights, strict=True):
        top = max(engine_scores.values(), default=0.0)
        if top <= 0 or weight <= 0:
            continue
        for key, score in engine_scores.items():
            fused[key] = fused.get(key, 0.0) + weight * max(score, 0.0) / top / total
    return fused


def fuse(
    method: str,
    scores: Sequence[Mapping[str, float]],
    weights: Sequence[float],
    rrf_k: int = 60,
) -> dict[str, float]:
    """Fuse per-engine scores (each mapping ordered best first) with ``method``."""
    if method == "rrf":
        return reciprocal_rank_fusion([list(s) for s in scores], weights, rrf_k)
    return weighted_score_fusion(scores, weights)
