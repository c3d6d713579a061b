"""Terminal output of the ``knowledge-agent`` command: rich text for people, JSON for programs.

Every function here only formats: it takes plain results from the core and a rich
``Console`` and prints. Consoles are made per command (:func:`make_console`) on the streams
of the moment, so output captured by tests or piped to a file is plain text — no colour
codes, no line wrapping — while a terminal gets colour and wrapping.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from knowledge_agent.core.text_search import TextMatch
from knowledge_agent.ingest.git_state import git_state_of
from knowledge_agent.ingest.report import (
    MAX_KEPT_PATHS,
    NOT_DOCUMENT,
    NOT_TEXT,
    CollectProgress,
    CollectReport,
    FileIssue,
    SkipGroup,
    walk_skip_reason,
)
from knowledge_agent.ingest.walker import LINK_OUTSIDE
from knowledge_agent.models import (
    KnowledgeChunk,
    KnowledgeItem,
    MatchedChunk,
    ScoreExplanation,
    SearchResult,
)
from knowledge_agent.models.result_view import chunk_heading, chunk_location, location
from knowledge_agent.models.status import ChunkContext, IndexStatus
from knowledge_agent.storage.doc_sources import DocSource

if TYPE_CHECKING:
    from knowledge_agent.analysis import TextAnalyzer
    from knowledge_agent.core.citations import CitationCheck
    from knowledge_agent.embeddings import ServiceUsage
    from knowledge_agent.models import SearchFacets
    from knowledge_agent.patterns import TextPattern
from knowledge_agent.storage.sources import KnowledgeBaseInfo, SourceRoot, path_to_db

__all__ = [
    "collect_progress",
    "display_path",
    "location",
    "make_console",
    "marked_text",
    "print_chunk_context",
    "print_issues",
    "print_item",
    "print_items",
    "print_json",
    "print_json_line",
    "print_kb",
    "print_kbs",
    "print_matches",
    "print_report",
    "print_results",
    "print_skipped",
    "print_status",
    "report_line",
    "spinner",
]

MATCH_STYLE = "bold yellow"
DIM = "dim"
SNIPPET_LINES = 8  # lines of a matched snippet shown per result
PASSAGE_LINES = 8  # lines of a passage of prose shown per result
CODE_LINES = 30  # lines of a passage holding a fenced code block
LINE_CHARS = 400  # characters of one passage line, around its matches
OTHER_CHARS = 100  # characters of another matched passage's text, off a terminal
MIN_OTHER_CHARS = 20  # less room than this on a terminal line: the location alone
CONTEXT_LINES = 2  # lines of each context chunk shown per result
INLINE_PATHS = 3  # a group of skipped files this small is named, not described by extensions
LISTED_EXTENSIONS = 4  # extensions shown per group of skipped files
PLAIN_PROGRESS_INTERVAL = 5.0  # seconds between progress lines off a terminal
_UNWRAPPED_WIDTH = 10_000  # "no wrapping" for output that is not a terminal
_FENCE = re.compile(r"[ \t]*(```|~~~)")


def make_console(stream: TextIO | None = None, *, stderr: bool = False) -> Console:
    """A console on ``stream`` (default: the current stdout, or stderr with ``stderr``).

    Not a terminal: no colour, no wrapping (each record stays on its lines for grep).
    """
    file = stream if stream is not None else (sys.stderr if stderr else sys.stdout)
    terminal = _isatty(file)
    return Console(
        file=file,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=not terminal,
        width=None if terminal else _UNWRAPPED_WIDTH,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def print_json(data: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """One JSON document (a top-level object), indented."""
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(data, ensure_ascii=_ascii_only(out), indent=2) + "\n")
    out.flush()


def print_json_line(data: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """One JSON object on one line (JSON Lines, for streams of events)."""
    out = stream if stream is not None else sys.stdout
    out.write(json.dumps(data, ensure_ascii=_ascii_only(out)) + "\n")
    out.flush()


def _ascii_only(stream: TextIO) -> bool:
    """Escape non-ASCII text in JSON unless the stream speaks UTF (both parse the same)."""
    try:
        return not codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name.startswith(
            "utf"
        )
    except LookupError:
        return True


# -- shared pieces -------------------------------------------------------------------------


def display_path(uri: str | None, base: str | None = None) -> str:
    """A source path as shown: relative to ``base`` when it lies below it, else as stored."""
    if not uri:
        return ""
    if base and os.path.isabs(uri):
        root = base.rstrip(os.sep) + os.sep
        if uri.startswith(root):
            return uri[len(root) :]
    return uri


def marked_text(snippet: str, style: str = MATCH_STYLE) -> Text:
    """A snippet whose ``**term**`` markers (from ``SearchResult.highlights``) become bold."""
    text = Text()
    for index, part in enumerate(snippet.split("**")):
        text.append(part, style=style if index % 2 else None)
    return text


def _lines(text: str, limit: int) -> list[str]:
    """The first ``limit`` non-blank lines, right-stripped; "…" as the last when cut."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return [*lines[:limit], "…"] if len(lines) > limit else lines


def _item_label(item: KnowledgeItem, base: str | None) -> str:
    return display_path(item.source_uri, base) or item.title or item.id


def _indented(text: Text, indent: str) -> Text:
    """Each line of ``text`` prefixed with ``indent`` (styles kept)."""
    out = Text()
    for number, line in enumerate(text.split("\n", allow_blank=True)):
        if number:
            out.append("\n")
        out.append(indent)
        out.append_text(line)
    return out


# -- search --------------------------------------------------------------------------------


def print_results(
    console: Console,
    results: Sequence[SearchResult],
    *,
    explain: bool = False,
    base: str | None = None,
    query: str = "",
    analyzer: TextAnalyzer | None = None,
    full: bool = False,
) -> None:
    """Search results: rank, title, where the best passage is (location and heading path),
    its lines with the terms of ``query`` marked (as ``analyzer`` reads them), the other
    matched passages a line each, the context.

    A passage of prose shows up to ``PASSAGE_LINES`` lines, one holding a fenced code block
    up to ``CODE_LINES`` (the lines with the most matches when it is longer, "…" where cut),
    each line up to ``LINE_CHARS`` characters around its matches; ``full`` shows passages
    whole. A result without a passage shows its highlight.
    """
    if not results:
        console.print("No results.")
        return
    # Imported here: the command starts without the search engines' modules.
    from knowledge_agent.analysis import TextAnalyzer, highlight, highlight_terms, matched_spans

    reader = analyzer or TextAnalyzer()
    terms = highlight_terms([query], reader) if query else frozenset()
    marks = _Marks(
        spans=lambda text: matched_spans(text, terms, reader) if terms else [],
        cut=lambda text, size: highlight(text, terms, reader, marker=("", ""), max_chars=size),
    )
    for rank, result in enumerate(results, start=1):
        if rank > 1:
            console.print()
        _print_result(console, rank, result, explain=explain, base=base, marks=marks, full=full)


@dataclass(frozen=True)
class _Marks:
    """Marks the query's terms in a result's text, the way the engines analyse them:
    ``spans(text)`` where they are, ``cut(text, size)`` the text cut around the densest of
    them ("…" where cut)."""

    spans: Callable[[str], list[tuple[int, int]]]
    cut: Callable[[str, int], str]

    def text(self, line: str, max_chars: int | None = None) -> Text:
        """``line`` with the terms marked, cut to ``max_chars`` around them."""
        if max_chars is not None and len(line) > max_chars:
            line = self.cut(line, max_chars)
        text = Text(line)
        for start, end in self.spans(line):
            text.stylize(MATCH_STYLE, start, end)
        return text


def _print_result(
    console: Console,
    rank: int,
    result: SearchResult,
    *,
    explain: bool,
    base: str | None,
    marks: _Marks,
    full: bool,
) -> None:
    item = result.item
    path = display_path(item.source_uri, base)
    title = Text.assemble(
        (f"{rank}. ", "bold"),
        (item.title or path or item.id, "bold cyan"),
        (f"  {result.relevance_score:.4f} · confidence {result.confidence:.2f}", DIM),
    )
    console.print(title)
    best = result.matched_chunks[0] if result.matched_chunks else None
    where = Text("   ")
    where.append(chunk_location(best, path) if best else path, style="green")
    heading = chunk_heading(best) if best else ""
    if heading:
        where.append("  § " + heading, style="magenta")
    console.print(where)
    if best is not None and best.passage is not None and best.passage.text.strip():
        console.print(_indented(_passage_text(best.passage.text, marks, full=full), "   "))
    elif result.highlights:
        snippet = "\n".join(_lines(result.highlights[0], SNIPPET_LINES))
        console.print(_indented(marked_text(snippet), "   "))
    for chunk in result.matched_chunks[1:]:
        console.print(_other_passage(console, chunk, path, marks, full=full))
    for chunk in result.context_chunks:
        console.print(_context_text(chunk))
    if explain:
        console.print(_explanation(result))


def _passage_text(text: str, marks: _Marks, *, full: bool = False) -> Text:
    """A passage's lines as stored, the terms marked: up to ``CODE_LINES`` when it holds a
    fenced code block, else ``PASSAGE_LINES`` — where longer, its first lines, or when
    they match nothing the run with the most matching lines, "…" where cut — and each
    line up to ``LINE_CHARS`` around its matches; ``full``: all of it."""
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    first = next((index for index, line in enumerate(lines) if line.strip()), len(lines))
    lines = lines[first:]
    limit = CODE_LINES if any(_FENCE.match(line) for line in lines) else PASSAGE_LINES
    start, end = 0, len(lines)
    if not full and len(lines) > limit:
        matched = [1 if marks.spans(line) else 0 for line in lines]
        window = best = sum(matched[:limit])
        for index in range(limit, len(lines) if not best else limit):
            window += matched[index] - matched[index - limit]
            if window > best:
                best, start = window, index - limit + 1
        end = start + limit
    out = Text("…\n" if start else "")
    for number, line in enumerate(lines[start:end]):
        if number:
            out.append("\n")
        out.append_text(marks.text(line, None if full else LINE_CHARS))
    if end < len(lines):
        out.append("\n…")
    return out


def _other_passage(
    console: Console, chunk: MatchedChunk, path: str, marks: _Marks, *, full: bool
) -> Text:
    """Another matched passage of the document on one line: where it is, its section and
    as much of its text (around the matches) as fits the terminal's width."""
    text = Text("   also ", style=DIM)
    text.append(chunk_location(chunk, path), style="green")
    heading = chunk_heading(chunk)
    if heading:
        text.append("  § " + heading, style="magenta")
    words = " ".join((chunk.passage.text if chunk.passage else chunk.content).split())
    room = console.width - text.cell_len - 2 if console.is_terminal else OTHER_CHARS
    if words and (full or room >= MIN_OTHER_CHARS):
        text.append("  ")
        text.append_text(marks.text(words, None if full else room))
    return text


def _context_text(chunk: MatchedChunk | KnowledgeChunk) -> Text:
    """A neighbouring chunk, dimmed and indented: where it is, then its first lines."""
    where = location("", chunk.metadata).lstrip(":") or f"chunk {chunk.chunk_index}"
    text = Text(f"   ┆ {where}", style=DIM)
    for line in _lines(chunk.content, CONTEXT_LINES):
        text.append(f"\n   ┆   {line}", style=DIM)
    return text


def _explanation(result: SearchResult) -> Text:
    """The score breakdown: each engine's score and rank, the fusion, the boosts, the
    rerank, the matched terms."""
    info = result.explanation
    text = Text.assemble(("   why: ", "bold"))
    if info is None:
        text.append(f"score {result.relevance_score:.4f}")
        return text
    text.append_text(explanation_text(info, result.search_mode, result.matched_fields))
    text.append(f"\n   item {result.item.id}")
    chunk_id = info.details.get("chunk_id")
    if chunk_id:
        text.append(f" · chunk {chunk_id}")
    return text


def explanation_text(
    info: ScoreExplanation, level: str = "chunk", fields: Sequence[str] = ()
) -> Text:
    """An explanation as lines: engines, fusion, evidence, boosts and rerank, terms."""
    text = Text()

    def rank(value: int | None) -> str:
        return f" (rank {value})" if value is not None else " (not ranked)"

    details = info.details
    mode = details.get("mode", level)
    fusion = details.get("fusion", "")
    text.append(
        f"keyword {info.keyword_score:.4f}{rank(info.keyword_rank)} · "
        f"semantic {info.semantic_score:.4f}{rank(info.semantic_rank)} → "
        f"fused {info.fused_score:.4f} ({fusion}, {mode}, {level} level)"
    )
    evidence = [
        f"{name} +{details[key]:.4f}"
        for key, name in (("passage_bonus", "passage"), ("document_bonus", "document"))
        if details.get(key)
    ]
    if evidence:
        text.append(f"\n   evidence: rank fusion {details.get('rank_fusion', 0.0):.4f} + ")
        text.append(" + ".join(evidence))
    text.append(
        f"\n   final {info.final_score:.4f} = fused × document {info.document_boost:g}"
        f" × recency {info.recency_boost:.3g} + rerank {info.rerank_delta:.4f}"
    )
    if info.rank_before_rerank is not None:
        text.append(f" (rank {info.rank_before_rerank} → {info.rank_after_rerank})")
    terms = ", ".join(f"{term} ×{count}" for term, count in info.term_frequencies.items())
    text.append(f"\n   terms: {terms or '-'}")
    if fields:
        text.append(f" · fields: {', '.join(fields)}")
    if info.path:
        where = " ".join(
            part for part in (info.lines, f"p.{info.page}" if info.page else "") if part
        )
        text.append(f"\n   at {info.path}" + (f" {where}" if where else ""))
    return text


# -- grep ----------------------------------------------------------------------------------


def print_matches(
    console: Console,
    matches: Sequence[TextMatch],
    expression: TextPattern,
    *,
    base: str | None = None,
) -> None:
    """``path:line: text`` per matching line, the matches marked; a line of a crawled page
    at its link instead (``https://…/page#section: text``)."""
    for match in matches:
        if match.link:
            text = Text.assemble((match.link, "green"), ": ")
        else:
            label = display_path(match.source_uri, base) or match.title or match.item_id
            text = Text.assemble((label, "green"), ":", (str(match.line_number), "cyan"), ": ")
        line = Text(match.line)
        for found in expression.finditer(match.line):
            if found.end() > found.start():
                line.stylize(MATCH_STYLE, found.start(), found.end())
        text.append_text(line)
        console.print(text)


# -- items and chunks ------------------------------------------------------------------------


def _when(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"


def _iso_seconds(text: str | None) -> str:
    """An ISO timestamp without its fraction of a second ("-" for None)."""
    if not text:
        return "-"
    try:
        return _when(datetime.fromisoformat(text))
    except ValueError:
        return text


def print_item(console: Console, item: KnowledgeItem, *, base: str | None = None) -> None:
    """An item's metadata, then its content."""
    console.print(Text(item.title or "(untitled)", style="bold cyan"))
    fields = [
        ("id", item.id),
        ("kb", item.kb),
        ("source", display_path(item.source_uri, base) or "-"),
        ("type", f"{item.source_type} ({item.content_type})"),
        ("doc type", item.doc_type or "-"),
        ("language", item.language or "-"),
        ("tags", ", ".join(item.tags) or "-"),
        ("created", _when(item.created_at)),
        ("updated", _when(item.updated_at)),
        ("size", f"{len(item.content)} characters"),
    ]
    if item.metadata:
        fields.append(("metadata", json.dumps(item.metadata, ensure_ascii=False, default=str)))
    for name, value in fields:
        console.print(Text.assemble((f"  {name:<9} ", DIM), value))
    console.print(Text("─" * 40, style=DIM))
    console.print(Text(item.content))


def print_chunk_context(
    console: Console, context: ChunkContext, *, base: str | None = None
) -> None:
    """A chunk with its neighbours (dimmed) and where it sits in its item."""
    chunk, item = context.chunk, context.item
    console.print(Text(item.title or item.id, style="bold cyan"))
    where = Text("  ")
    where.append(location(_item_label(item, base), chunk.metadata), style="green")
    if chunk.heading:
        where.append("  § " + chunk.heading, style="magenta")
    console.print(where)
    console.print(Text(f"  chunk {chunk.chunk_index} · {chunk.id} · item {item.id}", style=DIM))
    for neighbour in context.before:
        console.print(_neighbour(neighbour))
    console.print(Text("─" * 40, style=DIM))
    console.print(Text(chunk.content))
    console.print(Text("─" * 40, style=DIM))
    for neighbour in context.after:
        console.print(_neighbour(neighbour))


def _neighbour(chunk: KnowledgeChunk) -> Text:
    where = location("", chunk.metadata).lstrip(":")
    head = Text(f"┆ chunk {chunk.chunk_index} {where}".rstrip(), style=DIM)
    body = Text("\n" + chunk.content.strip(), style=DIM)
    return _indented(head + body, "  ")


def print_items(
    console: Console,
    items: Iterable[KnowledgeItem],
    *,
    base: str | None,
    short_ids: Mapping[str, str] | None = None,
) -> None:
    """One line per item: id (its short unique prefix, when given), kb/type, title, source."""
    count = 0
    for item in items:
        count += 1
        path = display_path(item.source_uri, base)
        console.print(
            Text.assemble(
                ((short_ids or {}).get(item.id, item.id), DIM),
                "  ",
                (f"{item.kb}/{item.source_type}", "magenta"),
                "  ",
                (item.title or "(untitled)", "bold"),
                ("  " + path if path and path != item.title else "", "green"),
            )
        )
    if not count:
        console.print("No items.")


# -- collection reports and progress ---------------------------------------------------------


def report_line(report: CollectReport) -> str:
    """The one-line summary of a collection run."""
    return (
        f"processed {report.processed} · unchanged {report.unchanged} · "
        f"skipped {report.skipped_count} · failed {len(report.failed)} · "
        f"removed {report.removed} · chunks +{report.chunks_added} -{report.chunks_removed} · "
        f"{report.duration_s:.2f} s"
    )


def print_report(
    console: Console, report: CollectReport, *, verbose: bool = False, base: str | None = None
) -> None:
    """The summary line, each failed file as ``path: reason``, then the skipped files.

    Skipped files are counted by kind (:func:`print_skipped`); ``verbose`` lists each too.
    """
    console.print(Text(report_line(report), style="bold"))
    for limit in report.stopped_by:
        console.print(Text(f"stopped early: {limit}", style="yellow"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    print_issues(console, "failed", report.failed, style="red")
    print_skipped(console, report, verbose=verbose, base=base)


def print_issues(
    console: Console,
    label: str,
    issues: Sequence[FileIssue],
    *,
    style: str,
    limit: int | None = None,
) -> None:
    """``label:`` then ``  path: reason`` per issue (the first ``limit`` of them)."""
    if not issues:
        return
    console.print(Text(f"{label}:", style=style))
    shown = issues if limit is None else issues[:limit]
    for issue in shown:
        console.print(Text(f"  {issue.path}: {issue.reason}", style=style))
    if len(shown) < len(issues):
        console.print(Text(f"  … and {len(issues) - len(shown)} more", style=style))


# What a group of skipped files is called, one and many; other kinds say "file(s)" + reason.
_SKIP_NOUNS: dict[str, tuple[str, str]] = {
    "image": ("image", "images"),
    "font": ("font", "fonts"),
    "media": ("audio or video file", "audio and video files"),
    "archive": ("archive", "archives"),
    "lock file": ("lock file", "lock files"),
    "source map": ("source map", "source maps"),
    "minified": ("minified bundle", "minified bundles"),
    "template": ("template", "templates"),
    "site setting": ("site setting file", "site setting files"),
    LINK_OUTSIDE: ("link leaving the folder", "links leaving the folder"),
    "binary": ("binary file", "binary files"),
    "empty": ("empty file", "empty files"),
    "encoding": (
        "file in an unrecognised text encoding",
        "files in an unrecognised text encoding",
    ),
    "no text": (
        "file with no extractable text (scanned PDF?)",
        "files with no extractable text (scanned PDFs?)",
    ),
}


def skip_group_text(group: SkipGroup, *, base: str | None = None, width: int = 0) -> str:
    """One group of skipped files: ``187 images (png, jpg, svg)``, ``1 file over the 20.0 MB
    limit: data/dump.sql``; the count right-aligned to ``width``."""
    one, many = _SKIP_NOUNS.get(group.kind) or (
        ("file", "files") if group.kind == "too large" else ("file:", "files:")
    )
    noun = one if group.count == 1 else many
    if group.kind not in _SKIP_NOUNS:
        noun = f"{noun} {group.reason}"
    text = f"{group.count:>{width},} {noun}"
    if group.paths and group.count <= INLINE_PATHS:
        names = ", ".join(display_path(path, base) for path in group.paths)
        return f"{text}{' ' if text.endswith(':') else ': '}{names}"
    extensions = [extension for extension, _ in group.extensions if extension]
    if not extensions:
        return text
    more = ", …" if len(extensions) > LISTED_EXTENSIONS else ""
    return f"{text} ({', '.join(extensions[:LISTED_EXTENSIONS])}{more})"


def print_skipped(
    console: Console, report: CollectReport, *, verbose: bool = False, base: str | None = None
) -> None:
    """The skipped files: one line per kind and reason, the biggest group first.

    With ``verbose``, every skipped file as ``path: reason`` first (a run keeps the paths
    of the first ``MAX_KEPT_PATHS`` files left out as not text; the rest are counted).
    """
    total = report.skipped_count
    if not total:
        return
    if verbose:
        listed = [(issue.path, issue.reason) for issue in report.skipped]
        for path, kind in report.not_text.paths:
            reason = walk_skip_reason(kind)
            shown = f"{reason} ({kind})" if reason in (NOT_TEXT, NOT_DOCUMENT) else reason
            listed.append((path, shown))
        console.print(Text("skipped:", style=DIM))
        for path, reason in sorted(listed):
            console.print(Text(f"  {path}: {reason}", style=DIM))
        dropped = report.not_text.dropped
        if dropped:
            console.print(
                Text(
                    f"  … and {dropped:,} more not text, counted but not listed "
                    f"(a run keeps {MAX_KEPT_PATHS:,} paths)",
                    style=DIM,
                )
            )
    groups = report.skip_summary()
    hint = "" if verbose else " (--verbose lists them)"
    console.print(Text(f"skipped {total:,}{hint}:", style=DIM))
    width = len(f"{groups[0].count:,}")  # the biggest group comes first
    for group in groups:
        console.print(Text("  " + skip_group_text(group, base=base, width=width), style=DIM))


# -- progress --------------------------------------------------------------------------------

_RATE_WINDOW = 20.0  # seconds of events a rate is measured over: recent speed, not the average
_MIN_RATE_SPAN = 1.0  # seconds of events needed before a rate (and an ETA) means anything
_MB = 1e6
_BIG_FILES = _MB  # average file size from which collecting is measured in MB/s


def _clock_text(seconds: float) -> str:
    """``H:MM:SS``, rounded up (an ETA of 0.2 s says 0:00:01)."""
    whole = max(0, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02}:{rest % 60:02}"


def _rate_text(rate: float, unit: str) -> str:
    """``1,234 chunks/s``, ``35 files/s``, ``2.4 MB/s``: three figures at most."""
    figures = f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"
    return f"{figures} {unit}/s"


class _Phase:
    """One phase of a run (collecting files, indexing chunks): counts, recent rate, ETA.

    Counts add up over the runs of one command (several paths, or indexes written in
    batches): an event after a run was complete, or whose ``done`` goes back down,
    starts a new run after the last.
    """

    def __init__(self, unit: str, *, measures_bytes: bool, since: float | None = None) -> None:
        self.unit = unit
        self.measures_bytes = measures_bytes
        # What the final average counts from: (time, done, bytes done). Without ``since``
        # (indexing: no event says when it began), the first event, whose work is excluded.
        self._baseline = None if since is None else (since, 0, 0)
        self._timed = since is not None
        self.done = self.total = self.bytes_done = self.bytes_total = 0
        self._offset = (0, 0, 0, 0)  # done, total, bytes done, bytes total of earlier runs
        self._last_done = self._last_total = 0  # the previous event's own counts
        self.started: float | None = None
        self.updated = 0.0
        self._samples: deque[tuple[float, int, int]] = deque()  # (time, done, bytes done)

    def update(self, event: CollectProgress, now: float) -> None:
        if event.done < self._last_done or 0 < self._last_total <= self._last_done:
            self._offset = (self.done, self.total, self.bytes_done, self.bytes_total)
        base_done, base_total, base_bytes, base_bytes_total = self._offset
        self._last_done, self._last_total = event.done, event.total
        self.done, self.total = base_done + event.done, base_total + event.total
        self.bytes_done = base_bytes + event.bytes_done
        self.bytes_total = base_bytes_total + event.bytes_total
        if self.started is None:
            self.started = now
            if self._baseline is None:
                self._baseline = (now, self.done, self.bytes_done)
        self.updated = now
        self._samples.append((now, self.done, self.bytes_done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= _RATE_WINDOW:
            self._samples.popleft()  # keep one sample at or beyond the window's start

    @property
    def finished(self) -> bool:
        return self.total > 0 and self.done >= self.total

    @property
    def in_megabytes(self) -> bool:
        """Big files are measured in MB/s: their count says little about the time left."""
        if not self.measures_bytes or self.total <= 0:
            return False
        return self.bytes_total / self.total >= _BIG_FILES

    def rate(self) -> float | None:
        """Files (or MB, or chunks) per second over the last ``_RATE_WINDOW`` seconds."""
        if len(self._samples) < 2:
            return None
        first, last = self._samples[0], self._samples[-1]
        span = last[0] - first[0]
        if span < _MIN_RATE_SPAN:
            return None
        amount = (last[2] - first[2]) / _MB if self.in_megabytes else last[1] - first[1]
        return amount / span

    def eta(self) -> float | None:
        """Seconds left at the current rate, None when unknown."""
        rate = self.rate()
        if not rate or self.finished or self.total <= 0:  # no total, no time left to tell
            return None
        if self.in_megabytes:
            return (self.bytes_total - self.bytes_done) / _MB / rate
        return (self.total - self.done) / rate

    def counts(self) -> str:
        """``418/1,204 files · 12.3/80.0 MB``; a total not known (a crawl's) is left out."""
        total = f"/{self.total:,}" if self.total > 0 else ""
        text = f"{self.done:,}{total} {self.unit}"
        if self.measures_bytes:
            size = f"/{self.bytes_total / _MB:.1f}" if self.bytes_total > 0 else ""
            text += f" · {self.bytes_done / _MB:.1f}{size} MB"
        return text

    def stats(self, *, with_eta: bool = True) -> str:
        """``418/1,204 files · 12.3/80.0 MB · 35 files/s · ETA 0:00:22`` (what is known)."""
        parts = [self.counts()]
        rate = self.rate()
        if rate is not None:
            parts.append(_rate_text(rate, "MB" if self.in_megabytes else self.unit))
        eta = self.eta() if with_eta else None
        if eta is not None:
            parts.append(f"ETA {_clock_text(eta)}")
        return " · ".join(parts)

    def summary(self) -> str:
        """The phase once over: ``1,204 files · 79.5 MB in 0:00:37 (33 files/s)``; the time
        only when the phase's start is known."""
        if self.finished:
            text = f"{self.done:,} {self.unit}"
            if self.measures_bytes:
                text += f" · {self.bytes_done / _MB:.1f} MB"
        else:  # cut short
            text = self.counts()
        if self._baseline is None:
            return text
        since, done, bytes_done = self._baseline
        elapsed = self.updated - since
        if self._timed:
            text += f" in {_clock_text(elapsed)}"
        if elapsed >= _MIN_RATE_SPAN:
            if self.in_megabytes:
                rate = _rate_text((self.bytes_done - bytes_done) / _MB / elapsed, "MB")
            else:
                rate = _rate_text((self.done - done) / elapsed, self.unit)
            text += f" ({rate})"
        return text


class _ProgressState:
    """Both phases of a collection, fed by ``CollectProgress`` events in any order.

    Indexing may run in batches while files are still being collected; its ETA is shown
    only once collecting is over, since until then its total is still growing.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        # Collecting is timed from here: the walk before the first file counts too.
        self.collecting = _Phase("files", measures_bytes=True, since=clock())
        self.indexing = _Phase("chunks", measures_bytes=False)
        self.current = ""  # the file of the latest collecting event

    def update(self, event: CollectProgress) -> _Phase | None:
        """Apply an event; the phase it moved, None when it carried nothing to show."""
        now = self.clock()
        if event.status == "indexing":
            if event.total <= 0:
                return None
            self.indexing.update(event, now)
            return self.indexing
        self.collecting.update(event, now)
        self.current = os.path.basename(event.path)
        return self.collecting

    def collecting_over(self) -> bool:
        return self.collecting.started is None or self.collecting.finished

    def indexing_stats(self) -> str:
        return self.indexing.stats(with_eta=self.collecting_over())

    def line(self) -> str:
        """Off a terminal: the phases under way, ``collecting … · indexing …``."""
        parts = []
        if self.collecting.started is not None and (
            not self.collecting.finished or self.indexing.started is None
        ):
            parts.append(f"collecting {self.collecting.stats()}")
        if self.indexing.started is not None:
            parts.append(f"indexing {self.indexing_stats()}")
        return " | ".join(parts)

    def final_line(self) -> str:
        """Off a terminal, at the end: what each phase did and in how long."""
        parts = []
        if self.collecting.started is not None:
            parts.append(f"collected {self.collecting.summary()}")
        if self.indexing.started is not None:
            parts.append(f"indexed {self.indexing.summary()}")
        return " | ".join(parts)


@contextmanager
def collect_progress(
    console: Console | None,
    *,
    clock: Callable[[], float] = time.monotonic,
    interval: float | None = None,
) -> Iterator[Callable[[CollectProgress], None] | None]:
    """Progress of a collection fed by ``CollectProgress`` events; None: no display.

    On a terminal, a live bar per phase: collecting (files, MB, rate, ETA, the current
    file) and indexing (chunks, rate, ETA). Elsewhere (a log file, CI), plain lines of
    the same figures, at most one per ``interval`` seconds (``PLAIN_PROGRESS_INTERVAL``)
    — none for a run shorter than that, whose report says it all — and a last line with
    what each phase did.
    """
    if console is None:
        yield None
        return
    every = PLAIN_PROGRESS_INTERVAL if interval is None else interval
    state = _ProgressState(clock)
    if console.is_terminal:
        with _live_progress(console, state) as live:
            yield live
        return
    last_line = clock()
    printed = False

    def update(event: CollectProgress) -> None:
        nonlocal last_line, printed
        if state.update(event) is None:
            return
        now = clock()
        if now - last_line >= every:
            console.print(Text(state.line()))
            last_line, printed = now, True

    try:
        yield update
    finally:
        if printed:
            console.print(Text(state.final_line()))


@contextmanager
def _live_progress(
    console: Console, state: _ProgressState
) -> Iterator[Callable[[CollectProgress], None]]:
    """The terminal form of :func:`collect_progress`: one rich bar per phase."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description:<10}"),
        BarColumn(),
        TextColumn("{task.fields[stats]}"),
        TextColumn("{task.fields[current]}", style=DIM),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        collecting = progress.add_task("collecting", total=None, stats="", current="")
        indexing: TaskID | None = None

        def update(event: CollectProgress) -> None:
            nonlocal indexing
            phase = state.update(event)
            if phase is None:
                return
            if phase is state.indexing:
                if indexing is None:  # a second bar, from the first indexing event on
                    indexing = progress.add_task("indexing", total=None, stats="", current="")
                progress.update(indexing, total=phase.total, completed=phase.done)
            else:
                name = state.current
                progress.update(
                    collecting,
                    total=phase.total or None,  # a crawl's is not known: no bar to fill
                    completed=phase.done,
                    current=name if len(name) <= 40 else name[:39] + "…",
                )
            # Both lines: a collecting event changes whether indexing may show an ETA.
            progress.update(collecting, stats=state.collecting.stats())
            if indexing is not None:
                progress.update(indexing, stats=state.indexing_stats())

        yield update


@contextmanager
def progress_bar(
    console: Console | None, label: str
) -> Iterator[Callable[[int, int], None] | None]:
    """A bar fed by ``(done, total)`` calls while the block runs; None: no display."""
    if console is None:
        yield None
        return
    columns = (TextColumn(label), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"))
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update


@contextmanager
def spinner(console: Console | None, message: str) -> Iterator[None]:
    """A spinner with ``message`` while the block runs; nothing when ``console`` is None."""
    if console is None:
        yield
        return
    with console.status(message):
        yield


# -- status and knowledge bases ---------------------------------------------------------------


def _size(count: int) -> str:
    """Bytes for people: 812 B, 3.4 KB, 12.0 MB, 1.2 GB."""
    size = float(count)
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def print_status(
    console: Console, status: IndexStatus, *, origin: str = "", config_file: str | None = None
) -> None:
    """Counts, index sizes and consistency, one ``name  value`` line each."""
    sizes = status.sizes
    where = status.data_dir or "(in memory)"
    place = (
        ("data folder", f"{where}" + (f"  ({origin})" if origin else ""))
        if status.backend == "local"
        else ("server", status.backend)
    )
    rows = [
        place,
        ("project file", config_file or "-"),
        ("knowledge bases", str(status.knowledge_bases)),
        ("items", str(status.items)),
        ("chunks", str(status.chunks)),
        ("sources", f"{status.sources} files under {status.roots} collected paths"),
        ("last indexed", _iso_seconds(status.last_indexed_at)),
        ("database", _size(sizes.get("database", 0))),
        (
            "keyword index",
            f"{status.keyword_items} items, {status.keyword_chunks} chunks, "
            f"{_size(sizes.get('keyword_index', 0))}",
        ),
        (
            "semantic index",
            f"{status.semantic_items} items, {status.semantic_chunks} chunks, "
            f"{_size(sizes.get('semantic_index', 0))}",
        ),
    ]
    if status.chunking:
        rows.append(("chunking", chunking_label(status.chunking, len(status.rechunk_pending))))
    for name, value in rows:
        console.print(Text.assemble((f"{name:<16} ", DIM), value))
    if status.consistent:
        state = "consistent" + (" (repaired)" if status.repaired else "")
        console.print(Text.assemble((f"{'status':<16} ", DIM), (state, "green")))
        return
    console.print(Text.assemble((f"{'status':<16} ", DIM), ("inconsistent", "bold red")))
    for problem in status.problems:
        console.print(Text(f"  - {problem}", style="red"))


def chunking_label(chunking: dict[str, Any], pending: int = 0) -> str:
    """``headings (100-1500 characters, overlap 0.2)`` / ``lines (10, overlap 2)``, and how
    many collected paths the next sync re-chunks."""
    strategy = chunking.get("strategy", "headings")
    if strategy == "headings":
        sizes = (
            f"{chunking.get('min_chunk_size')}-{chunking.get('max_chunk_size')} characters, "
            f"overlap {chunking.get('overlap_ratio')}"
        )
    else:
        sizes = f"{chunking.get('chunk_size')} {strategy}, overlap {chunking.get('chunk_overlap')}"
    label = f"{strategy} ({sizes})"
    if pending:
        paths = "path" if pending == 1 else "paths"
        label += f"; {pending} collected {paths} re-chunked at the next sync"
    return label


def print_facets(console: Console, facets: SearchFacets) -> None:
    """Where the matches are: the documents matching, per knowledge base, doc type and
    source type, a line each (``(none)`` for documents without a doc type)."""
    console.print(Text.assemble(("matches".ljust(16) + " ", DIM), f"{facets.total:,} documents"))
    for name, counts in (
        ("knowledge base", facets.kb),
        ("doc type", facets.doc_type),
        ("source type", facets.source_type),
    ):
        shown = ", ".join(f"{value or '(none)'} {count:,}" for value, count in counts.items())
        console.print(Text.assemble((f"{name:<16} ", DIM), shown or "-"))
    console.print()


def print_usage(console: Console, usage: Mapping[str, ServiceUsage]) -> None:
    """The embedder's and reranker's usage in this process, a line each (none without
    them): requests, texts, and tokens as reported (or estimated where not)."""
    for kind, used in usage.items():
        parts = [f"{used.requests:,} requests", f"{used.texts:,} texts"]
        if used.failed:
            parts[0] += f" ({used.failed:,} failed)"
        if used.tokens or not used.estimated_tokens:
            parts.append(f"{used.tokens:,} tokens")
        if used.estimated_tokens:
            parts.append(f"~{used.estimated_tokens:,} tokens estimated (not reported)")
        line = f"{used.name}: {', '.join(parts)} in this process"
        console.print(Text.assemble((f"{kind:<16} ", DIM), line))


def print_kbs(console: Console, kbs: Sequence[KnowledgeBaseInfo]) -> None:
    """A table of knowledge bases: name, counts, last indexed, description."""
    if not kbs:
        console.print("No knowledge bases yet. Add files with: knowledge-agent add PATH")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("name", no_wrap=True, style="cyan")
    for name in ("items", "chunks", "sources"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("last indexed", no_wrap=True)
    table.add_column("description")
    for info in kbs:
        table.add_row(
            info.name,
            str(info.items),
            str(info.chunks),
            str(info.sources),
            _when(info.last_indexed_at),
            info.description,
        )
    console.print(table)


def print_citation(console: Console, check: CitationCheck) -> None:
    """What became of a cited passage, and the text there now."""
    style = {"unchanged": "green", "moved": "yellow", "changed": "bold yellow"}.get(
        check.status, "bold red"
    )
    console.print(Text.assemble(("cited text ", DIM), (check.status, style)))
    if check.chunk is None:
        console.print(Text("  nothing at that place any more", style=DIM))
        return
    if check.current_ref != check.ref:
        console.print(Text.assemble(("  now at ", DIM), check.current_ref))
    for line in _lines(check.chunk.content, 40):
        console.print(Text(f"  {line}"))


def print_sources(console: Console, roots: Sequence[SourceRoot], docs: Sequence[DocSource]) -> None:
    """A table of what was collected: folders and files, then doc sources from the web."""
    if not roots and not docs:
        console.print("Nothing collected yet. Add some with: knowledge-agent add PATH|URL")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("kb", no_wrap=True, style="cyan")
    table.add_column("source")
    table.add_column("pages", justify="right", no_wrap=True)
    table.add_column("last run", no_wrap=True)
    table.add_column("next", no_wrap=True)
    for root in roots:
        state = git_state_of(root.options)
        label = path_to_db(root.root) + (f" (git {state.label()})" if state else "")
        table.add_row(root.kb, label, "", _when(root.synced_at), "sync")
    for doc in docs:
        label = doc.url + (f" ({doc.name})" if doc.name else "")
        if not doc.enabled:
            state = "disabled"
        elif doc.due():
            state = "due"
        elif doc.refresh_interval <= 0 or doc.crawled_at is None:
            state = "on request"
        else:
            state = _when(doc.crawled_at + timedelta(seconds=doc.refresh_interval))
        last = _when(doc.crawled_at) + (f" ({doc.last_error})" if doc.last_error else "")
        table.add_row(doc.kb, label, str(doc.pages), last, state)
    console.print(table)


def print_kb(console: Console, info: KnowledgeBaseInfo) -> None:
    """One knowledge base in detail, with its collected paths."""
    console.print(Text(info.name, style="bold cyan"))
    rows = [
        ("description", info.description or "-"),
        ("items", str(info.items)),
        ("chunks", str(info.chunks)),
        ("sources", str(info.sources)),
        ("created", _when(info.created_at)),
        ("last indexed", _when(info.last_indexed_at)),
    ]
    for name, value in rows:
        console.print(Text.assemble((f"  {name:<12} ", DIM), value))
    for root in info.roots:
        console.print(Text.assemble((f"  {'collects':<12} ", DIM), root))
