"""Terminal output of the ``knowledge-agent`` command: rich text for people, JSON for programs.

Every function here only formats: it takes plain results from the core and a rich
``Console`` and prints. Consoles are made per command (:func:`make_console`) on the streams
of the moment, so output captured by tests or piped to a file is plain text — no colour
codes, no line wrapping — while a terminal gets colour and wrapping.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from knowledge_agent.core.status import ChunkContext, IndexStatus
from knowledge_agent.core.text_search import TextMatch
from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem, MatchedChunk, SearchResult
from knowledge_agent.storage.sources import KnowledgeBaseInfo

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
    "print_status",
    "report_line",
    "spinner",
]

MATCH_STYLE = "bold yellow"
DIM = "dim"
SNIPPET_LINES = 8  # lines of a matched snippet shown per result
CONTEXT_LINES = 2  # lines of each context chunk shown per result
MAX_LISTED_ISSUES = 10  # skipped files listed before "… and N more"
_UNWRAPPED_WIDTH = 10_000  # "no wrapping" for output that is not a terminal


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


def location(path: str, metadata: Mapping[str, Any]) -> str:
    """``path:12-30`` for text, ``path p.3`` (or ``p.3-4``) for PDF pages, else ``path``."""
    page, page_end = metadata.get("page"), metadata.get("page_end")
    if isinstance(page, int):
        pages = f"{page}-{page_end}" if isinstance(page_end, int) and page_end != page else page
        return f"{path} p.{pages}".strip()
    start, end = metadata.get("start_line"), metadata.get("end_line")
    if isinstance(start, int):
        lines = f"{start}-{end}" if isinstance(end, int) and end != start else str(start)
        return f"{path}:{lines}"
    return path


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
) -> None:
    """Search results: rank, title, location and heading, the marked snippet, the context."""
    if not results:
        console.print("No results.")
        return
    for rank, result in enumerate(results, start=1):
        if rank > 1:
            console.print()
        _print_result(console, rank, result, explain=explain, base=base)


def _print_result(
    console: Console, rank: int, result: SearchResult, *, explain: bool, base: str | None
) -> None:
    item = result.item
    path = display_path(item.source_uri, base)
    title = Text.assemble(
        (f"{rank}. ", "bold"),
        (item.title or path or item.id, "bold cyan"),
        (f"  {result.relevance_score:.4f}", DIM),
    )
    console.print(title)
    best = result.matched_chunks[0] if result.matched_chunks else None
    where = Text("   ")
    where.append(location(path, best.metadata) if best else path, style="green")
    if best is not None and best.heading:
        where.append("  § " + best.heading, style="magenta")
    console.print(where)
    if result.highlights:
        snippet = "\n".join(_lines(result.highlights[0], SNIPPET_LINES))
        console.print(_indented(marked_text(snippet), "   "))
    others = [location("", chunk.metadata).lstrip(":") for chunk in result.matched_chunks[1:]]
    if others:
        console.print(Text("   also matches " + ", ".join(others), style=DIM))
    for chunk in result.context_chunks:
        console.print(_context_text(chunk))
    if explain:
        console.print(_explanation(result))


def _context_text(chunk: MatchedChunk | KnowledgeChunk) -> Text:
    """A neighbouring chunk, dimmed and indented: where it is, then its first lines."""
    where = location("", chunk.metadata).lstrip(":") or f"chunk {chunk.chunk_index}"
    text = Text(f"   ┆ {where}", style=DIM)
    for line in _lines(chunk.content, CONTEXT_LINES):
        text.append(f"\n   ┆   {line}", style=DIM)
    return text


def _explanation(result: SearchResult) -> Text:
    """The score breakdown: each engine's score and rank, the fusion, the matched terms."""
    info = result.explanation
    text = Text.assemble(("   why: ", "bold"))
    if info is None:
        text.append(f"score {result.relevance_score:.4f}")
        return text

    def rank(value: int | None) -> str:
        return f" (rank {value})" if value is not None else " (not ranked)"

    mode = info.details.get("mode", result.search_mode)
    fusion = info.details.get("fusion", "")
    text.append(
        f"keyword {info.keyword_score:.4f}{rank(info.keyword_rank)} · "
        f"semantic {info.semantic_score:.4f}{rank(info.semantic_rank)} → "
        f"fused {info.fused_score:.4f} ({fusion}, {mode}, {result.search_mode} level)"
    )
    terms = ", ".join(f"{term} ×{count}" for term, count in info.matched_terms.items())
    text.append(f"\n   terms: {terms or '-'}")
    if result.matched_fields:
        text.append(f" · fields: {', '.join(result.matched_fields)}")
    chunk_id = info.details.get("chunk_id")
    text.append(f"\n   item {result.item.id}" + (f" · chunk {chunk_id}" if chunk_id else ""))
    return text


# -- grep ----------------------------------------------------------------------------------


def print_matches(
    console: Console,
    matches: Sequence[TextMatch],
    expression: re.Pattern[str],
    *,
    base: str | None = None,
) -> None:
    """``path:line: text`` per matching line, the matches marked."""
    for match in matches:
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


def print_items(console: Console, items: Iterable[KnowledgeItem], *, base: str | None) -> None:
    """One line per item: id, kb/type, title, source."""
    count = 0
    for item in items:
        count += 1
        path = display_path(item.source_uri, base)
        console.print(
            Text.assemble(
                (item.id, DIM),
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
        f"skipped {len(report.skipped)} · failed {len(report.failed)} · "
        f"removed {report.removed} · chunks +{report.chunks_added} -{report.chunks_removed} · "
        f"{report.duration_s:.2f} s"
    )


def print_report(console: Console, report: CollectReport) -> None:
    """The summary line, then each failed file (and the skipped ones) as ``path: reason``."""
    console.print(Text(report_line(report), style="bold"))
    print_issues(console, "failed", report.failed, style="red")
    print_issues(console, "skipped", report.skipped, style=DIM, limit=MAX_LISTED_ISSUES)


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


@contextmanager
def collect_progress(
    console: Console | None,
) -> Iterator[Callable[[CollectProgress], None] | None]:
    """A progress bar (files, MB, ETA) fed by ``CollectProgress`` events; None: no bar."""
    if console is None:
        yield None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[current]}", style=DIM),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("collecting", total=None, unit="files", current="")

        def update(event: CollectProgress) -> None:
            if event.status == "indexing":  # after the files: the search indexes catch up
                progress.update(
                    task,
                    description="indexing",
                    total=event.total,
                    completed=event.done,
                    unit="items",
                    current="",
                )
                return
            megabytes = f"{event.bytes_done / 1e6:.1f}/{event.bytes_total / 1e6:.1f} MB"
            name = os.path.basename(event.path)
            progress.update(
                task,
                description="collecting",
                total=event.total,
                completed=event.done,
                unit=f"files · {megabytes}",
                current=name if len(name) <= 40 else name[:39] + "…",
            )

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
    rows = [
        ("data folder", f"{where}" + (f"  ({origin})" if origin else "")),
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
    for name, value in rows:
        console.print(Text.assemble((f"{name:<16} ", DIM), value))
    if status.consistent:
        state = "consistent" + (" (repaired)" if status.repaired else "")
        console.print(Text.assemble((f"{'status':<16} ", DIM), (state, "green")))
        return
    console.print(Text.assemble((f"{'status':<16} ", DIM), ("inconsistent", "bold red")))
    for problem in status.problems:
        console.print(Text(f"  - {problem}", style="red"))


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
