"""Reranking for ``knowledge_semantic_search``: the spec's rule for ``rerank_top_k``, and the call.

The rule (seed 002, "参数优先级与约束"): ``rerank_top_k`` is a positive integer below the
number of passages recalled (``top_k``). A call that breaks it is not refused — the answer
would be the same passages in another order, so refusing helps nobody — it is downgraded:
``rerank_top_k`` becomes ``top_k - 1``, or the rerank is turned off when ``top_k`` is 1,
with a warning in the log and a note in the answer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from knowledge_agent.core.knowledge_agent_core import Reranker

__all__ = ["DEFAULT_RERANK_TOP_K", "RerankPlan", "plan_rerank", "rerank_scores"]

logger = logging.getLogger(__name__)

DEFAULT_RERANK_TOP_K = 3
"""Passages kept after a rerank when the call does not say (the spec's configured default)."""


@dataclass(frozen=True)
class RerankPlan:
    """Whether this call reranks, how many passages it then keeps, and what to tell the agent."""

    enabled: bool
    keep: int
    notes: tuple[str, ...] = ()


def plan_rerank(
    *,
    top_k: int,
    enable_rerank: bool | None,
    rerank_top_k: int | None,
    available: bool,
    default_keep: int = DEFAULT_RERANK_TOP_K,
) -> RerankPlan:
    """The rerank a call gets.

    ``enable_rerank`` None means the server's default: rerank whenever a reranker is
    configured (``available``). Asking for a rerank the server cannot do is not an error:
    the passages come back in recall order, with a note saying why. ``default_keep`` is
    ``rerank_top_k`` when the call does not give it (the settings' ``rerank_top_k``).
    """
    if enable_rerank is False:
        return RerankPlan(False, top_k)
    if not available:
        asked = enable_rerank is True or rerank_top_k is not None
        note = "no reranker is configured on this server: passages are in recall order"
        return RerankPlan(False, top_k, (note,) if asked else ())
    keep = default_keep if rerank_top_k is None else rerank_top_k
    if keep < top_k:
        return RerankPlan(True, keep)
    given = f"rerank_top_k {keep}" + (" (the default)" if rerank_top_k is None else "")
    if top_k == 1:
        note = f"{given} must be below top_k 1: the rerank was turned off"
        plan = RerankPlan(False, top_k, (note,))
    else:
        note = f"{given} must be below top_k {top_k}: lowered to {top_k - 1}"
        plan = RerankPlan(True, top_k - 1, (note,))
    logger.warning("knowledge_semantic_search: %s", note)
    return plan


def rerank_scores(reranker: Reranker, query: str, texts: Sequence[str]) -> list[float] | None:
    """The reranker's score for each text, or None (logged) when it fails or answers wrongly.

    A reranker is often a remote service: its failure costs the answer its order, never
    the answer itself, so any exception is caught here.
    """
    try:
        scores = [float(score) for score in reranker.rerank(query, list(texts))]
    except Exception:
        logger.warning("the reranker failed; keeping the recall order", exc_info=True)
        return None
    if len(scores) != len(texts) or not all(math.isfinite(score) for score in scores):
        logger.warning(
            "the reranker gave %d scores for %d texts (or a non-finite one); keeping the "
            "recall order",
            len(scores),
            len(texts),
        )
        return None
    return scores
