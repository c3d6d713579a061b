"""Search results as data for other programs: JSON lines, CSV, Markdown, or paths only."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from knowledge_agent.cli_render import print_json, print_json_line

if TYPE_CHECKING:
    from knowledge_agent.models import SearchResult

__all__ = ["FORMATS", "result_json", "write_results"]

FORMATS = ("text", "json", "ndjson", "csv", "md", "files")
"""``text`` is the human view; the others are written by :func:`write_results`."""

_CSV_COLUMNS = (
    "rank", "score", "confidence", "path", "title", "kb", "lines", "heading", "evidence_ref",
)  # fmt: skip


def result_json(result: SearchResult, *, full: bool) -> dict[str, Any]:
    """A result as data: its passages always, its document's whole text only when asked
    (one hit in a 700 KB release-notes file must not make the answer 700 KB)."""
    data = result.to_dict()
    if not full:
        content = data["item"].pop("content")
        data["item"]["content_chars"] = len(content)
    return data


def write_results(
    fmt: str,
    query: str,
    mode: str,
    results: Sequence[SearchResult],
    *,
    full: bool = False,
    stream: TextIO | None = None,
) -> None:
    """Write ``results`` in ``fmt`` (any of :data:`FORMATS` but ``text``)."""
    out = stream or sys.stdout
    if fmt == "json":
        payload = {
            "query": query,
            "mode": mode,
            "results": [result_json(r, full=full) for r in results],
        }
        print_json(payload, out)
    elif fmt == "ndjson":
        for result in results:
            print_json_line(result_json(result, full=full), out)
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(_CSV_COLUMNS)
        for rank, result in enumerate(results, start=1):
            writer.writerow(_row(rank, result))
    elif fmt == "md":
        for rank, result in enumerate(results, start=1):
            out.write(_markdown(rank, result))
    elif fmt == "files":
        seen: set[str] = set()
        for result in results:
            path = _path(result)
            if path not in seen:
                seen.add(path)
                out.write(path + "\n")
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {FORMATS}")


def _path(result: SearchResult) -> str:
    item = result.item
    return item.source_uri or item.title or item.id


def _lines(result: SearchResult) -> str:
    if not result.matched_chunks:
        return ""
    meta = result.matched_chunks[0].metadata
    start, end = meta.get("start_line"), meta.get("end_line")
    return f"{start}-{end}" if isinstance(start, int) and isinstance(end, int) else ""


def _row(rank: int, result: SearchResult) -> list[Any]:
    best = result.matched_chunks[0] if result.matched_chunks else None
    return [
        rank,
        round(result.relevance_score, 4),
        round(result.confidence, 4),
        _path(result),
        result.item.title,
        result.item.kb,
        _lines(result),
        best.heading if best else "",
        best.evidence_ref if best else "",
    ]


def _markdown(rank: int, result: SearchResult) -> str:
    lines = _lines(result)
    where = f"{_path(result)}:{lines}" if lines else _path(result)
    text = (
        f"{rank}. **{result.item.title or _path(result)}** — `{where}` ({result.confidence:.2f})\n"
    )
    if result.highlights:
        snippet = " ".join(result.highlights[0].split())
        text += f"   > {snippet}\n"
    return text
