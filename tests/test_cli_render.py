"""The CLI's formatting helpers: locations, highlights, progress, plain output off a terminal."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

import pytest
from rich.console import Console

from knowledge_agent import cli_render as render
from knowledge_agent.cli import _parse_date, _stderr_console_if_tty
from knowledge_agent.errors import QueryError
from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue


def test_location_lines_pages_and_nothing() -> None:
    assert render.location("a.md", {"start_line": 3, "end_line": 9}) == "a.md:3-9"
    assert render.location("a.md", {"start_line": 4, "end_line": 4}) == "a.md:4"
    assert render.location("r.pdf", {"page": 3, "page_end": 3, "start_line": 1}) == "r.pdf p.3"
    assert render.location("r.pdf", {"page": 2, "page_end": 4}) == "r.pdf p.2-4"
    assert render.location("x", {}) == "x"


def test_display_path_is_relative_below_the_base_only() -> None:
    assert render.display_path("/base/docs/a.md", "/base") == "docs/a.md"
    assert render.display_path("/based/a.md", "/base") == "/based/a.md"
    assert render.display_path("https://example.org/a", "/base") == "https://example.org/a"
    assert render.display_path(None) == ""


def test_marked_text_turns_markers_into_bold_spans() -> None:
    text = render.marked_text("roll **back** the **deploy** now")
    assert text.plain == "roll back the deploy now"
    bold = [text.plain[span.start : span.end] for span in text.spans]
    assert bold == ["back", "deploy"]


def test_console_off_a_terminal_neither_colours_nor_wraps() -> None:
    stream = io.StringIO()
    console = render.make_console(stream)
    long_line = "word " * 60
    console.print(render.marked_text(f"**{long_line}**"))
    assert stream.getvalue() == long_line + "\n"


def test_report_output_lists_failures_as_path_reason() -> None:
    report = CollectReport(kb="default", processed=2, unchanged=1, chunks_added=7)
    report.failed.append(FileIssue("/docs/bad.pdf", "corrupt or truncated PDF"))
    report.skipped.extend(FileIssue(f"/docs/{n}.bin", "binary file") for n in range(12))
    stream = io.StringIO()
    render.print_report(render.make_console(stream), report)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("processed 2 · unchanged 1 · skipped 12 · failed 1 · removed 0")
    assert "chunks +7 -0" in lines[0]
    assert lines[1:3] == ["failed:", "  /docs/bad.pdf: corrupt or truncated PDF"]
    assert lines[-1] == "  … and 2 more"


def test_progress_bar_shows_files_and_megabytes_on_a_terminal() -> None:
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=120)
    with render.collect_progress(console) as update:
        assert update is not None
        for done in (1, 2):
            update(
                CollectProgress(f"/d/{done}.md", "processed", done, 2, done * 1_500_000, 3_000_000)
            )
    shown = stream.getvalue()
    assert "2/2" in shown and "3.0/3.0 MB" in shown


def test_progress_bar_then_counts_items_while_indexing() -> None:
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=120)
    with render.collect_progress(console) as update:
        assert update is not None
        update(CollectProgress("/d/1.md", "processed", 1, 1, 10, 10))
        update(CollectProgress("", "indexing", 500, 700, 0, 0))
    shown = stream.getvalue()
    assert "indexing" in shown and "500/700" in shown and "items" in shown


def test_no_progress_when_stderr_is_no_terminal_or_json_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with render.collect_progress(None) as update:
        assert update is None
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert _stderr_console_if_tty(as_json=False) is None

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Tty())
    assert _stderr_console_if_tty(as_json=True) is None
    assert _stderr_console_if_tty(as_json=False) is not None


def test_dates() -> None:
    assert _parse_date(None, "--since", end_of_day=False) is None
    since = _parse_date("2024-05-01", "--since", end_of_day=False)
    assert since is not None and since.tzinfo is not None  # local time, made explicit
    assert since.replace(tzinfo=None) == datetime(2024, 5, 1)
    until = _parse_date("2024-05-01", "--until", end_of_day=True)
    assert until is not None and until.date().isoformat() == "2024-05-01"
    assert (until.hour, until.minute) == (23, 59) and until.tzinfo is not None
    zulu = _parse_date("2024-05-01T10:00:00Z", "--since", end_of_day=False)
    assert zulu == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    offset = _parse_date("2024-05-01T10:00+02:00", "--until", end_of_day=True)
    assert offset is not None and offset.utcoffset() == timedelta(hours=2)
    with pytest.raises(QueryError, match="--since: not a date: '05/01/2024'"):
        _parse_date("05/01/2024", "--since", end_of_day=False)
