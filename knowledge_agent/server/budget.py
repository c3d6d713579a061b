"""Keeping a tool's answer under a token budget, without a tokenizer.

:func:`~knowledge_agent.tokens.estimate_tokens` counts roughly as an LLM does (one token per
CJK character, one per four other characters); :func:`fit_to_budget` trims a search answer
until its JSON text (:func:`dumps`, exactly what the agent receives) fits, cheapest losses
first, and says so.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from knowledge_agent.tokens import estimate_tokens

__all__ = ["dumps", "estimate_tokens", "fit_to_budget"]


def dumps(payload: Any) -> str:
    """The compact JSON text of a tool answer (non-ASCII kept as is, as the agent reads it)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


_SHORTENED = "shortened"


class _Budget:
    """Shrinks a list of search-result dicts until the whole answer fits ``max_tokens``."""

    def __init__(
        self, results: list[dict[str, Any]], max_tokens: int, extra: dict[str, Any]
    ) -> None:
        self.results = results
        self.max_tokens = max_tokens
        self.extra = extra
        self.cuts: Counter[str] = Counter()
        self.used = self.measure()

    def payload(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "results": self.results,
            "count": len(self.results),
            "truncated": bool(self.cuts),
        }
        if self.cuts:
            answer["note"] = _trim_note(self.cuts, self.max_tokens)
        answer.update(self.extra)
        return answer

    def measure(self) -> int:
        return estimate_tokens(dumps(self.payload()))

    def drop(self, lists: Iterable[list[Any]], kind: str, *, keep: int = 0) -> None:
        """Pop entries off the end of each list in turn until the answer fits."""
        for entries in lists:
            while len(entries) > keep and self.used > self.max_tokens:
                # Subtracting the piece's own estimate avoids re-serialising everything per
                # pop; the exact measure settles it once the estimate says it fits.
                self.used -= estimate_tokens(dumps(entries.pop()))
                self.cuts[kind] += 1
                if self.used <= self.max_tokens:
                    self.used = self.measure()
        self.used = self.measure()

    def shorten(self, chunk: dict[str, Any], part: str = "content") -> None:
        """Cut a chunk's ``content`` (or its passage's text, ``part="passage"``) from the
        end until the answer fits or nothing is left of it."""
        holder, key = (chunk.get("passage"), "text") if part == "passage" else (chunk, part)
        if not isinstance(holder, dict):
            return
        while self.used > self.max_tokens and holder.get(key):
            text = holder[key]
            chars_per_token = len(text) / max(1, estimate_tokens(text))
            cut = int((self.used - self.max_tokens) * chars_per_token) + 8
            kept = text[: max(0, len(text) - cut)].rstrip()
            holder[key] = kept + "…" if kept else ""
            if not chunk.get("content_truncated"):
                chunk["content_truncated"] = True
                self.cuts[_SHORTENED] += 1
            self.used = self.measure()


def _trim_note(cuts: Counter[str], max_tokens: int) -> str:
    dropped = [f"{count} {kind}" for kind, count in cuts.items() if kind != _SHORTENED]
    said = "dropped " + ", ".join(dropped) if dropped else ""
    if cuts[_SHORTENED]:
        said += ("; " if said else "") + f"shortened {cuts[_SHORTENED]} chunk(s)"
    return (
        f"Trimmed to fit max_tokens={max_tokens}: {said}. read_chunk(chunk_id) returns a "
        "chunk in full; a larger max_tokens keeps more."
    )


def fit_to_budget(
    results: list[dict[str, Any]], max_tokens: int, *, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The search answer for ``results`` (dicts, best first), trimmed to ``max_tokens``;
    ``extra`` are more keys of the answer, measured with it and never trimmed.

    Losses in order of least value: context chunks, then matched chunks after each result's
    best one (lowest results first), then the lowest results, then the tail of the remaining
    chunks' text, their passages' text last. A trimmed answer has ``truncated: true`` and a
    ``note`` saying what went.
    """
    budget = _Budget(results, max_tokens, dict(extra or {}))
    budget.drop((r["context_chunks"] for r in reversed(results)), "context chunk(s)")
    budget.drop((r["matched_chunks"] for r in reversed(results)), "extra matched chunk(s)", keep=1)
    budget.drop((r.get("snippets", []) for r in reversed(results)), "snippet(s)", keep=1)
    budget.drop([results], "lower-ranked result(s)", keep=1)
    # The passage is what answers; the rest of a chunk's text goes first.
    for part in ("content", "passage"):
        for result in results:
            for chunk in result["matched_chunks"]:
                budget.shorten(chunk, part)
    budget.drop([results], "lower-ranked result(s)")  # only if a bare result cannot fit
    return budget.payload()
