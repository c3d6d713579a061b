"""What a document's type and age do to its score, and MMR de-duplication: pure functions.

``document_boost`` is the weight of the document's type (``adr`` 1.5 … ``index`` 0.3);
``time_boost`` is the recency boost ``1 + weight · exp(−age_days / days)`` times the
temporal decay ``0.5 ** (age_days / half_life)``, each off at weight or half-life 0.
:func:`mmr_order` picks results that are relevant and unlike those picked before them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

__all__ = ["DEFAULT_DOC_TYPE_WEIGHTS", "age_days", "cosine", "mmr_order", "time_boost"]

DEFAULT_DOC_TYPE_WEIGHTS: Mapping[str, float] = {
    "adr": 1.5,
    "spec": 1.4,
    "runbook": 1.3,
    "guide": 1.1,
    "index": 0.3,
}
"""Architecture decisions first, specs and runbooks next; tables of contents last."""


def age_days(when: str | datetime | None, now: datetime) -> float:
    """Days from ``when`` (ISO 8601; naive means UTC) to ``now``; 0 when unknown or future."""
    if when is None:
        return 0.0
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (now - when).total_seconds() / 86400.0)


def time_boost(age: float, recency_weight: float, recency_days: float, half_life: float) -> float:
    """The age factor of a score: recency boost × temporal decay (1.0 when both are off)."""
    factor = 1.0
    if recency_weight > 0 and recency_days > 0:
        factor *= 1.0 + recency_weight * math.exp(-age / recency_days)
    if half_life > 0:
        factor *= 0.5 ** (age / half_life)
    return factor


def cosine(a: Counter[str], b: Counter[str]) -> float:
    """Cosine similarity of two term-count vectors."""
    if not a or not b:
        return 0.0
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    dot = sum(count * large.get(term, 0) for term, count in small.items())
    norm = math.sqrt(sum(c * c for c in a.values())) * math.sqrt(sum(c * c for c in b.values()))
    return dot / norm if norm else 0.0


def mmr_order(
    scores: Sequence[float], vectors: Sequence[Counter[str]], lam: float, k: int
) -> list[int]:
    """Indexes of up to ``k`` entries by maximal marginal relevance.

    Each step takes the entry maximising ``lam · relevance − (1 − lam) · similarity`` to the
    entries already taken, relevance being the score scaled to the best one; ``lam`` 1 keeps
    the score order. Near-identical passages (an alias page, a copied paragraph) go down.
    """
    if not scores:
        return []
    top = max(scores) or 1.0
    left = list(range(len(scores)))
    closest = [0.0] * len(scores)  # each entry's highest similarity to those taken so far
    taken: list[int] = []
    while left and len(taken) < k:
        best = max(left, key=lambda i: lam * scores[i] / top - (1 - lam) * closest[i])
        taken.append(best)
        left.remove(best)
        for i in left:
            closest[i] = max(closest[i], cosine(vectors[i], vectors[best]))
    return taken
