"""The CLI's formatting helpers: locations, highlights, progress, plain output off a terminal."""

from __future__ import annotations

import io
import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from made_results import chunk, passage, result
from rich.console import Console

from knowledge_agent import cli_render as render
from knowledge_agent.cli import _parse_date, _progress_console, _stderr_console_if_tty
from knowledge_agent.errors import QueryError
from knowledge_agent.ingest import report as report_module
from knowledge_agent.ingest.report import CollectProgress, CollectReport, FileIssue
from knowledge_agent.models import SearchResult


def test_location_lines_pages_and_nothing() -> None:
    assert render.location("a.md", {"start_line": 3, "end_line": 9}) == "a.md:3-9"
    assert render.location("a.md", {"start_line": 4, "end_line": 4}) == "a.md:4"
    assert render.location("r.pdf", {"page": 3, "page_end": 3, "start_line": 1}) == "r.pdf p.3"
    assert render.location("r.pdf", {"page": 2, "page_end": 4}) == "r.pdf p.2-4"
    assert render.location("x", {}) == "x"
    page = {"url": "https://d.org/a#setup", "start_line": 3, "end_line": 9}
    assert render.location("https://d.org/a", page) == "https://d.org/a#setup"
    top = {"url": "https://d.org/a", "start_line": 1, "end_line": 2}  # before any heading
    assert render.location("https://d.org/a", top) == "https://d.org/a"  # never url:1-2


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


def report_text(report: CollectReport, *, verbose: bool = False, base: str | None = None) -> str:
    stream = io.StringIO()
    render.print_report(render.make_console(stream), report, verbose=verbose, base=base)
    return stream.getvalue()


def test_report_output_lists_failures_one_by_one_and_counts_skipped_files() -> None:
    report = CollectReport(kb="default", processed=2, unchanged=1, chunks_added=7)
    report.failed.extend(
        FileIssue(f"/docs/bad{n}.pdf", "corrupt or truncated PDF") for n in range(12)
    )
    report.skipped.extend(FileIssue(f"/docs/{n}.bin", "binary file") for n in range(12))
    lines = report_text(report).splitlines()
    assert lines[0].startswith("processed 2 · unchanged 1 · skipped 12 · failed 12 · removed 0")
    assert "chunks +7 -0" in lines[0]
    assert lines[1:3] == ["failed:", "  /docs/bad0.pdf: corrupt or truncated PDF"]
    assert len([line for line in lines if line.endswith("corrupt or truncated PDF")]) == 12
    assert lines[-2:] == ["skipped 12 (--verbose lists them):", "  12 binary files (bin)"]


def mixed_report() -> CollectReport:
    """A run over /docs that skipped files of every sort."""
    report = CollectReport(kb="default", processed=5)
    for n in range(120):
        report.not_text.add(f"/docs/img/shot{n:03}.png", "image")
    for n in range(67):
        report.not_text.add(f"/docs/img/photo{n:02}.jpg", "image")
    report.not_text.add("/docs/img/logo.svg", "image")
    report.not_text.add("/docs/fonts/inter.woff2", "font")
    report.not_text.add("/docs/fonts/mono.ttf", "font")
    report.not_text.add("/docs/package-lock.json", "lock file")
    report.skipped.append(
        FileIssue("/docs/data/dump.sql", "25.3 MB is over the 20.0 MB limit", "too large")
    )
    report.skipped.append(FileIssue("/docs/empty.md", "empty file"))
    report.skipped.append(FileIssue("/docs/old.txt", "unrecognised text encoding: NUL bytes"))
    report.skipped.extend(
        FileIssue(f"/docs/bin/tool{n}.{ext}", "binary file") for n, ext in enumerate("abcdef")
    )
    return report


def test_skipped_files_are_one_line_per_kind_by_default() -> None:
    lines = report_text(mixed_report(), base="/docs").splitlines()
    assert lines[0].startswith("processed 5 · unchanged 0 · skipped 200 · failed 0")
    assert lines[1:] == [
        "skipped 200 (--verbose lists them):",
        "  188 images (png, jpg, svg)",
        "    6 binary files (a, b, c, d, …)",
        "    2 fonts: fonts/inter.woff2, fonts/mono.ttf",
        "    1 empty file: empty.md",
        "    1 file in an unrecognised text encoding: old.txt",
        "    1 lock file: package-lock.json",
        "    1 file over the 20.0 MB limit: data/dump.sql",
    ]
    # Outside the base, paths are shown whole.
    assert "  1 empty file: /docs/empty.md" in report_text(mixed_report(), base="/elsewhere")


def test_verbose_lists_every_skipped_file_with_its_reason_then_the_counts() -> None:
    lines = report_text(mixed_report(), verbose=True, base="/docs").splitlines()
    assert lines[1] == "skipped:"
    listed = lines[2 : lines.index("skipped 200:")]
    assert len(listed) == 200 and listed == sorted(listed)
    assert "  /docs/img/shot000.png: not text (image)" in listed
    assert "  /docs/package-lock.json: not text (lock file)" in listed
    assert "  /docs/data/dump.sql: 25.3 MB is over the 20.0 MB limit" in listed
    assert "  /docs/old.txt: unrecognised text encoding: NUL bytes" in listed
    assert lines[-7] == "  188 images (png, jpg, svg)"


def test_verbose_says_how_many_not_text_paths_were_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report_module, "MAX_KEPT_PATHS", 50)
    monkeypatch.setattr(render, "MAX_KEPT_PATHS", 50)
    lines = report_text(mixed_report(), verbose=True).splitlines()
    assert "  … and 141 more not text, counted but not listed (a run keeps 50 paths)" in lines
    assert "  2 fonts (woff2, ttf)" not in lines  # paths not all kept: extensions instead
    assert "    2 fonts (ttf, woff2)" in lines


def test_nothing_skipped_prints_no_skipped_section() -> None:
    assert report_text(CollectReport(kb="default", processed=1)).count("\n") == 1


# -- progress --------------------------------------------------------------------------------


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def files(done: int, total: int, size: int = 50_000) -> CollectProgress:
    return CollectProgress(f"/d/{done}.md", "processed", done, total, done * size, total * size)


def indexing(done: int, total: int) -> CollectProgress:
    return CollectProgress("", "indexing", done, total, 0, 0)


def test_times_and_rates_read_well() -> None:
    assert render._clock_text(0) == "0:00:00"
    assert render._clock_text(0.2) == "0:00:01"  # never "0 s left" while work remains
    assert render._clock_text(22) == "0:00:22"
    assert render._clock_text(3725) == "1:02:05"
    assert render._rate_text(1234.5, "chunks") == "1,234 chunks/s"
    assert render._rate_text(35.4, "files") == "35 files/s"
    assert render._rate_text(2.44, "MB") == "2.4 MB/s"
    assert render._rate_text(0.04, "files") == "0.0 files/s"


def test_plain_progress_is_a_line_every_few_seconds_and_a_last_one() -> None:
    stream, clock = io.StringIO(), FakeClock()
    with render.collect_progress(render.make_console(stream), clock=clock, interval=5) as update:
        assert update is not None
        for done in range(1, 201):  # 200 files at 20 files/s: 10 seconds
            clock.now = done * 0.05
            update(files(done, 200))
    lines = stream.getvalue().splitlines()
    assert lines == [
        "collecting 100/200 files · 5.0/10.0 MB · 20 files/s · ETA 0:00:05",
        "collecting 200/200 files · 10.0/10.0 MB · 20 files/s",
        "collected 200 files · 10.0 MB in 0:00:10 (20 files/s)",
    ]


def test_plain_progress_says_nothing_for_a_short_run() -> None:
    stream, clock = io.StringIO(), FakeClock()
    with render.collect_progress(render.make_console(stream), clock=clock) as update:
        assert update is not None
        for done in range(1, 101):
            clock.now = done * 0.01
            update(files(done, 100))
        update(indexing(400, 400))
    assert stream.getvalue() == ""


def test_indexing_counts_chunks_with_a_rate_and_an_eta_once_collecting_is_over() -> None:
    state = render._ProgressState(FakeClock())
    clock = state.clock
    assert isinstance(clock, FakeClock)
    state.update(files(1, 10))
    state.update(indexing(100, 150))  # written in a batch while files are still read
    clock.now = 2.0
    state.update(files(5, 10))
    state.update(indexing(300, 400))
    assert state.line() == (
        "collecting 5/10 files · 0.2/0.5 MB · 2.0 files/s · ETA 0:00:03"
        " | indexing 300/400 chunks · 100 chunks/s"  # no ETA: the total still grows
    )
    clock.now = 4.0
    state.update(files(10, 10))
    state.update(indexing(500, 1_000))
    assert state.line() == "indexing 500/1,000 chunks · 100 chunks/s · ETA 0:00:05"
    clock.now = 9.0
    state.update(indexing(1_000, 1_000))
    assert state.line() == "indexing 1,000/1,000 chunks · 100 chunks/s"
    assert state.final_line() == (
        "collected 10 files · 0.5 MB in 0:00:04 (2.5 files/s)"
        " | indexed 1,000 chunks (100 chunks/s)"  # the first event's 100 came before it
    )


def test_big_files_are_measured_in_megabytes_per_second() -> None:
    clock = FakeClock()
    state = render._ProgressState(clock)
    for done in range(1, 5):
        clock.now = done * 2.0
        state.update(files(done, 10, size=3_000_000))
    assert state.line() == "collecting 4/10 files · 12.0/30.0 MB · 1.5 MB/s · ETA 0:00:12"


def test_rates_follow_the_recent_pace_not_the_whole_run() -> None:
    clock = FakeClock()
    state = render._ProgressState(clock)
    for done in range(1, 101):  # 10 files/s for 10 s, then 1 file/s for 30 s
        clock.now = done * 0.1
        state.update(files(done, 200))
    for done in range(101, 131):
        clock.now += 1.0
        state.update(files(done, 200))
    assert "· 1.0 files/s · ETA 0:01:10" in state.line()


def test_counts_add_up_over_several_paths_of_one_command() -> None:
    clock = FakeClock()
    state = render._ProgressState(clock)
    for done in range(1, 11):
        state.update(files(done, 10))
    state.update(files(1, 5))  # the second PATH starts counting from 1 again
    assert state.collecting.counts() == "11/15 files · 0.6/0.8 MB"
    state.update(indexing(0, 0))  # nothing to index: shown nowhere
    assert state.indexing.started is None
    # Indexes written in batches: each batch counts its own chunks up to its total.
    for event in (indexing(700, 7_444), indexing(7_444, 7_444), indexing(3, 3)):
        state.update(event)
    state.update(indexing(4_810, 4_810))  # a batch done at once, more than the last one
    assert state.indexing.counts() == "12,257/12,257 chunks"


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


def test_progress_bar_then_counts_chunks_while_indexing() -> None:
    stream, clock = io.StringIO(), FakeClock()
    console = Console(file=stream, force_terminal=True, width=160)
    with render.collect_progress(console, clock=clock) as update:
        assert update is not None
        update(CollectProgress("/d/1.md", "processed", 1, 1, 10, 10))
        update(indexing(500, 1_700))
        clock.now = 2.0
        update(indexing(1_500, 1_700))
    shown = stream.getvalue()
    assert "collecting" in shown and "indexing" in shown
    assert "1,500/1,700 chunks · 500 chunks/s · ETA 0:00:01" in shown


def test_no_progress_with_json_and_plain_lines_off_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with render.collect_progress(None) as update:
        assert update is None
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert _stderr_console_if_tty(as_json=False) is None  # the rebuild spinner: terminals only
    plain = _progress_console(as_json=False)
    assert plain is not None and not plain.is_terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Tty())
    assert _stderr_console_if_tty(as_json=True) is None
    assert _stderr_console_if_tty(as_json=False) is not None
    assert _progress_console(as_json=True) is None


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


# -- search results ------------------------------------------------------------------------

GUIDE = """# Guide

Read this first: the installer needs Python.

## Installing

Run the installer.
Then restart the service:

```bash
systemctl daemon-reload
systemctl restart app
journalctl -u app
systemctl status app
systemctl enable app
```

## Usage

Call the tool with --help to restart nothing.
"""
PAGE = "https://docs.example.org/guide"
BOLD_YELLOW = "\x1b[1;33m"


def shown(results: list[SearchResult], query: str = "restart", *, full: bool = False) -> list[str]:
    """The search output's lines off a terminal, as `search` prints them to a pipe."""
    stream = io.StringIO()
    render.print_results(render.make_console(stream), results, query=query, full=full)
    return stream.getvalue().split("\n")[:-1]


def coloured(results: list[SearchResult], query: str, width: int = 100) -> str:
    stream = io.StringIO()
    console = Console(
        file=stream, force_terminal=True, color_system="standard", width=width, markup=False
    )
    render.print_results(console, results, query=query)
    return stream.getvalue()


def guide_lines(first: int, last: int) -> list[str]:
    return GUIDE.split("\n")[first - 1 : last]


def test_the_best_passage_shows_its_lines_located_with_its_section() -> None:
    found = passage(GUIDE, 7, 8, heading_path=("Guide", "Installing"))
    lines = shown([result("docs/guide.md", [chunk(GUIDE, 5, 16, found=found)])])

    assert lines[0] == "1. Guide  0.8000 · confidence 0.60"
    assert lines[1] == "   docs/guide.md:7-8  § Guide > Installing"
    assert lines[2:] == ["   " + line for line in guide_lines(7, 8)]


def test_the_terms_are_marked_in_the_passage_lines() -> None:
    found = passage(GUIDE, 7, 8, heading_path=("Guide", "Installing"))
    output = coloured([result("docs/guide.md", [chunk(GUIDE, 5, 16, found=found)])], "restart")

    assert f"Then {BOLD_YELLOW}restart\x1b[0m the service:" in output
    assert f"{BOLD_YELLOW}installer" not in output  # not asked for


def test_without_a_passage_the_highlight_is_shown_as_before() -> None:
    best = chunk(GUIDE, 5, 8, heading="Guide > Installing")
    snippet = "Run the installer.\nThen **restart** the service:"
    lines = shown([result("docs/guide.md", [best], highlights=[snippet])])

    assert lines[1] == "   docs/guide.md:5-8  § Guide > Installing"
    assert lines[2:] == ["   Run the installer.", "   Then restart the service:"]


def test_a_crawled_page_passage_is_shown_at_its_link() -> None:
    found = passage(GUIDE, 7, 8, heading_path=("Guide", "Installing"), link=PAGE + "#installing")
    best = chunk(GUIDE, 5, 16, found=found, url=PAGE + "#installing")
    lines = shown([result(PAGE, [best])])

    assert lines[1] == f"   {PAGE}#installing  § Guide > Installing"


def test_text_before_a_page_first_heading_is_at_the_bare_page_url_under_its_title() -> None:
    found = passage(GUIDE, 3, 3, heading_path=("Guide",))
    best = chunk(GUIDE, 1, 3, found=found, url=PAGE, anchor="")
    lines = shown([result(PAGE, [best])], query="installer")

    assert lines[1] == f"   {PAGE}  § Guide"
    assert lines[2] == "   " + guide_lines(3, 3)[0]


def test_a_pdf_passage_is_shown_at_its_page() -> None:
    found = passage(GUIDE, 7, 8, path="r.pdf", heading_path=("Installing",), page=3)
    best = chunk(GUIDE, 5, 16, found=found, page=2, page_end=4)
    lines = shown([result("r.pdf", [best])])

    assert lines[1] == "   r.pdf p.3  § Installing"


def test_a_matching_code_block_is_shown_whole() -> None:
    found = passage(GUIDE, 10, 16, heading_path=("Guide", "Installing"))  # 5 lines + fences
    lines = shown([result("docs/guide.md", [chunk(GUIDE, 5, 16, found=found)])])

    assert lines[2:] == ["   " + line for line in guide_lines(10, 16)]


def long_code_block(count: int) -> str:
    body = [f"step_{n}()  # restart part {n}" for n in range(count)]
    return "\n".join(["# Script", "", "```python", *body, "```", ""])


def test_a_long_code_block_is_cut_after_thirty_lines_and_full_shows_it_all() -> None:
    script = long_code_block(200)
    found = passage(script, 3, 204, heading_path=("Script",))
    results = [result("run.md", [chunk(script, 1, 204, found=found)])]
    stored = script.split("\n")

    cut = shown(results)
    whole = shown(results, full=True)

    assert cut[2:] == ["   " + line for line in stored[2 : 2 + render.CODE_LINES]] + ["   …"]
    assert whole[2:] == ["   " + line for line in stored[2:204]]


def test_a_long_block_shows_the_lines_that_match() -> None:
    body = [f"value_{n} = {n}" for n in range(100)]
    body[70] = "restart_service()"
    script = "\n".join(["```python", *body, "```"])
    found = passage(script, 1, 102)
    lines = shown([result("run.md", [chunk(script, 1, 102, found=found)])])

    shown_code = [line.removeprefix("   ") for line in lines[2:]]
    assert shown_code[0] == shown_code[-1] == "…"
    assert "restart_service()" in shown_code
    assert len(shown_code) == render.CODE_LINES + 2


def test_a_long_prose_passage_is_cut_to_its_lines_with_the_most_matches() -> None:
    prose = [f"Sentence {n} of the introduction." for n in range(20)]
    prose[15] = "Restart the service after every upgrade."
    text = "\n".join(prose)
    found = passage(text, 1, 20)
    lines = shown([result("a.md", [chunk(text, 1, 20, found=found)])])

    body = [line.removeprefix("   ") for line in lines[2:]]
    assert body[0] == "…" and prose[15] in body
    assert len([line for line in body if line != "…"]) == render.PASSAGE_LINES


def test_a_very_long_line_is_cut_around_its_match() -> None:
    line = " ".join(["filler"] * 300 + ["restart"] + ["filler"] * 300)
    found = passage(line, 1, 1)
    lines = shown([result("a.md", [chunk(line, 1, 1, found=found)])])

    [body] = lines[2:]
    assert body.startswith("   …") and body.endswith("…") and "restart" in body
    assert len(body) <= render.LINE_CHARS + 5


def test_the_other_matched_passages_are_one_line_each_with_their_location() -> None:
    best = chunk(GUIDE, 5, 16, found=passage(GUIDE, 7, 8, heading_path=("Guide", "Installing")))
    usage = passage(GUIDE, 20, 20, heading_path=("Guide", "Usage"))
    others = [
        chunk(GUIDE, 18, 20, index=1, found=usage),
        chunk(GUIDE, 1, 3, index=2, heading="Guide"),  # no passage: the chunk's text
    ]
    lines = shown([result("docs/guide.md", [best, *others])])

    assert lines[4:] == [
        "   also docs/guide.md:20  § Guide > Usage  Call the tool with --help to restart nothing.",
        "   also docs/guide.md:1-3  § Guide  # Guide Read this first: the installer needs Python.",
    ]


def test_another_passage_line_fits_the_terminal_width() -> None:
    best = chunk(GUIDE, 5, 16, found=passage(GUIDE, 7, 8))
    words = " ".join(f"word{n}" for n in range(200)) + " restart " + "tail " * 50
    other = chunk(words, 1, 1, index=1, found=passage(words, 1, 1))

    output = coloured([result("a.md", [best, other])], "restart", width=80)

    [also] = [line for line in output.split("\n") if "also" in line]
    plain = re.sub("\x1b\\[[0-9;]*m", "", also)
    assert len(plain) <= 80 and "restart" in plain and "…" in plain


stored_lines = st.lists(
    st.one_of(
        st.text(
            st.characters(
                codec="utf-8",
                exclude_categories=("Cc", "Cs", "Zl", "Zp", "Co", "Cn"),
                exclude_characters="…\t",
            ),
            max_size=500,
        ),
        st.sampled_from(["```", "```python", "~~~", "", "restart the app"]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(lines=stored_lines, data=st.data(), full=st.booleans())
def test_the_passage_shown_is_lines_of_the_stored_text_in_order(
    lines: list[str], data: st.DataObject, full: bool
) -> None:
    text = "\n".join(lines)
    first = data.draw(st.integers(1, len(lines)), label="first")
    last = data.draw(st.integers(first, len(lines)), label="last")
    query = data.draw(st.sampled_from(["restart", "app", " ".join(lines)[:40] or "x"]))
    found = passage(text, first, last)

    output = shown([result("a.md", [chunk(text, 1, len(lines), found=found)])], query, full=full)

    body = [line[3:] for line in output[2:]]
    passage_lines = _trimmed([line.rstrip() for line in lines[first - 1 : last]])
    if full:
        assert body == passage_lines
    else:
        code = any(line.lstrip(" ").startswith(("```", "~~~")) for line in passage_lines)
        limit = render.CODE_LINES if code else render.PASSAGE_LINES
        assert len([line for line in body if line != "…"]) == min(limit, len(passage_lines))
    position = 0  # each line shown is a later line of the passage, or part of one
    for line in body:
        if line == "…":
            continue
        piece = line.removeprefix("…").removesuffix("…")
        while position < len(passage_lines) and piece not in passage_lines[position]:
            position += 1
        assert position < len(passage_lines), (line, passage_lines)
        if piece == line:
            assert line == passage_lines[position]
        position += 1


def _trimmed(lines: list[str]) -> list[str]:
    """The lines without blank ones at either end."""
    while lines and not lines[-1]:
        lines = lines[:-1]
    while lines and not lines[0].strip():
        lines = lines[1:]
    return lines
