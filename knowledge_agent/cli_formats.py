"""Search results as data for other programs: JSON lines, CSV, Markdown, or paths only."""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from knowledge_agent.cli_render import print_json, print_json_line
from knowledge_agent.models.result_view import (
    chunk_heading,
    chunk_location,
    item_path,
    result_view,
)

if TYPE_CHECKING:
    from knowledge_agent.models import SearchFacets, SearchResult

__all__ = ["FORMATS", "distinct_paths", "result_json", "write_results"]

FORMATS = ("text", "json", "ndjson", "csv", "md", "files")
"""``text`` is the human view; the others are written by :func:`write_results`."""

_CSV_COLUMNS = (
    "rank", "score", "confidence", "path", "title", "kb", "location", "heading", "evidence_ref",
)  # fmt: skip


def result_json(
    result: SearchResult, texts: Mapping[str, str] | None = None, *, explain: bool = False
) -> dict[str, Any]:
    """A result as data (:func:`result_view`): its passages always, their explanations when
    asked, its document's whole text only when ``texts`` (by item id) has it — one hit in a
    700 KB release-notes file must not make the answer 700 KB."""
    return result_view(
        result, explain=explain, content=None if texts is None else texts.get(result.item.id)
    )


def write_results(
    fmt: str,
    query: str,
    mode: str,
    results: Sequence[SearchResult],
    *,
    texts: Mapping[str, str] | None = None,
    explain: bool = False,
    stream: TextIO | None = None,
    facets: SearchFacets | None = None,
) -> None:
    """Write ``results`` in ``fmt`` (any of :data:`FORMATS` but ``text``); ``texts``: the
    documents' whole texts by item id, and ``explain``: the score explanations, both for
    the JSON formats; ``facets``, the per-scope counts, for ``json``."""
    out = stream or sys.stdout
    if fmt == "json":
        payload: dict[str, Any] = {
            "query": query,
            "mode": mode,
            "results": [result_json(r, texts, explain=explain) for r in results],
        }
        if facets is not None:
            payload["facets"] = facets.to_dict()
        print_json(payload, out)
    elif fmt == "ndjson":
        for result in results:
            print_json_line(result_json(result, texts, explain=explain), out)
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(_CSV_COLUMNS)
        for rank, result in enumerate(results, start=1):
            writer.writerow(_row(rank, result))
    elif fmt == "md":
        for rank, result in enumerate(results, start=1):
            out.write(_markdown(rank, result))
    elif fmt == "files":
        for result in _first_of_each_path(results):
            out.write(item_path(result.item) + "\n")
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {FORMATS}")


def _first_of_each_path(results: Sequence[SearchResult]) -> list[SearchResult]:
    seen: set[str] = set()
    kept = []
    for result in results:
        path = item_path(result.item)
        if path not in seen:
            seen.add(path)
            kept.append(result)
    return kept


_MORE_ROUNDS = 4  # searches for more results before settling for fewer distinct paths


def distinct_paths(
    search: Callable[[int], Sequence[SearchResult]], limit: int
) -> list[SearchResult]:
    """The best result of each path, ``limit`` of them when there are that many: one file
    collected into several knowledge bases is one path, so ``search(asked)`` is asked for
    more (four times as many each round) until enough paths are found or it runs out."""
    asked = limit
    kept: list[SearchResult] = []
    for _ in range(_MORE_ROUNDS):
        results = search(asked)
        kept = _first_of_each_path(results)
        if len(kept) >= limit or len(results) < asked:
            break
        asked *= 4
    return kept[:limit]


def _where(result: SearchResult) -> str:
    """The best passage's location (``path:12-30``, ``path p.3``, ``url#section``)."""
    path = item_path(result.item)
    return chunk_location(result.matched_chunks[0], path) if result.matched_chunks else path


def _row(rank: int, result: SearchResult) -> list[Any]:
    best = result.matched_chunks[0] if result.matched_chunks else None
    return [
        rank,
        round(result.relevance_score, 4),
        round(result.confidence, 4),
        item_path(result.item),
        result.item.title,
        result.item.kb,
        _where(result),
        chunk_heading(best) if best else "",
        best.evidence_ref if best else "",
    ]


def _markdown(rank: int, result: SearchResult) -> str:
    title = result.item.title or item_path(result.item)
    text = f"{rank}. **{title}** — `{_where(result)}` ({result.confidence:.2f})\n"
    if result.highlights:
        snippet = " ".join(result.highlights[0].split())
        text += f"   > {snippet}\n"
    return text
