"""knowledge_agent on a PostgreSQL database beside the same systems on the local backend, in
one run of benchmarks/quality.py: the systems built on a database, and how far their answers
are from the local ones (figures, and whether each query's first result is the same item and
its first passage the same chunk)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.package_system import KnowledgeAgentSystem, SharedKnowledgeBase
from benchmarks.systems import Hit, System

SUFFIX = "@postgresql"
# The systems a database can hold: no embeddings on that backend yet.
POSTGRES_SYSTEMS = ("knowledge_agent", "knowledge_agent-item")
FIGURE_GOAL = 0.005  # largest difference of a figure from the local one
AGREEMENT_GOAL = 0.95  # share of queries with the same first item and the same first passage


def postgres_systems(
    names: Sequence[str], core_class: type, ka_options: dict[str, Any], url: str
) -> list[System]:
    """The systems of ``names`` a database can hold, on the database at ``url``, named
    ``name@postgresql``; they share one ingestion as their local twins do."""
    shared = SharedKnowledgeBase(core_class, {**ka_options, "backend": url})
    levels = {"knowledge_agent": None, "knowledge_agent-item": "item"}
    return [
        KnowledgeAgentSystem(name + SUFFIX, shared, level=levels[name])
        for name in names
        if name in POSTGRES_SYSTEMS
    ]


@dataclass(frozen=True)
class Agreement:
    """How the answers of a system on a database compare with the same system's on the local
    backend, over the same queries."""

    system: str
    queries: int
    same_item: int  # first result the same item (or both empty)
    same_passage: int  # and its first passage the same chunk text
    largest_difference: float
    largest_label: str

    @property
    def item_share(self) -> float:
        return self.same_item / self.queries if self.queries else 1.0

    @property
    def passage_share(self) -> float:
        return self.same_passage / self.queries if self.queries else 1.0

    @property
    def met(self) -> bool:
        return (
            self.largest_difference <= FIGURE_GOAL
            and min(self.item_share, self.passage_share) >= AGREEMENT_GOAL
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "same_first_item": self.same_item,
            "same_first_passage": self.same_passage,
            "item_agreement": round(self.item_share, 4),
            "passage_agreement": round(self.passage_share, 4),
            "largest_difference": round(self.largest_difference, 4),
            "largest_difference_figure": self.largest_label,
            "met": self.met,
        }


def agreement(
    system: str,
    local_runs: dict[str, list[Hit]],
    other_runs: dict[str, list[Hit]],
    local_figures: dict[str, float],
    other_figures: dict[str, float],
) -> Agreement:
    """Top-1 agreement of ``other_runs`` with ``local_runs`` (query id → hits, the queries of
    ``local_runs``) and the largest difference between their figures."""
    same_item = same_passage = 0
    for query_id, local in local_runs.items():
        other = other_runs.get(query_id, [])
        first, second = (local[0] if local else None), (other[0] if other else None)
        if (first and first.doc_id) == (second and second.doc_id):
            same_item += 1
            if (first and first.passage) == (second and second.passage):
                same_passage += 1
    label, difference = "", 0.0
    for name, value in local_figures.items():
        gap = abs(value - other_figures.get(name, 0.0))
        if gap >= difference:
            label, difference = name, gap
    return Agreement(system, len(local_runs), same_item, same_passage, difference, label)


def agreements(results: Sequence[Any]) -> list[Agreement]:
    """One :class:`Agreement` per ``name@postgresql`` result that has a local twin, both run
    without error (``results``: quality.SystemResult, with their runs)."""
    by_name = {r.system: r for r in results if not r.error}
    found = []
    for name, other in by_name.items():
        local = by_name.get(name.removesuffix(SUFFIX))
        if name.endswith(SUFFIX) and local is not None:
            base = name.removesuffix(SUFFIX)
            found.append(agreement(base, local.runs, other.runs, local.figures, other.figures))
    return found


def format_agreements(found: Sequence[Agreement]) -> str:
    """Lines under a data set's table: per system, agreement and largest difference."""
    lines = []
    for a in found:
        lines.append(
            f"{a.system}{SUFFIX} vs local: first item same {a.same_item}/{a.queries} "
            f"({a.item_share:.1%}), first passage same {a.same_passage}/{a.queries} "
            f"({a.passage_share:.1%}); largest figure difference {a.largest_difference:.4f} "
            f"({a.largest_label}) — goal ≤ {FIGURE_GOAL} and ≥ {AGREEMENT_GOAL:.0%}: "
            + ("met" if a.met else "NOT MET")
        )
    return "\n".join(lines)
