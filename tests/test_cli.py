"""The knowledge-agent command: every command in human and --json form, errors, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from files import write
from web_site import SECTIONED_PAGE, SiteServer

from knowledge_agent import KnowledgeAgentCore, KnowledgeChunk
from knowledge_agent import cli_render as render
from knowledge_agent.backends.local.folder_lock import FolderLock
from knowledge_agent.cli import _watch_printer, cli, watch
from knowledge_agent.core.text_search import TextMatch, linked
from knowledge_agent.ingest.report import CollectReport, FileIssue

DEPLOY = """# Deploying the service

This guide covers a production deployment of the web service on one Linux host
behind a reverse proxy, from installing a release to rolling it back again.

## Installing a release

Create a dedicated system user, then install the release into its own virtual
environment under /srv/app/releases and point the current symlink at it.

## Rolling back a failed release

If the health check fails after a release, roll back before you debug. Point the
current symlink at the previous release directory and restart the service with
systemctl restart app. The rollback takes seconds because nothing is rebuilt.

## Monitoring

Watch the error rate and the p99 latency for fifteen minutes after every release,
and keep the previous release directory until the next one has been stable for a day.
"""

BACKOFF = '''"""Helpers for calling flaky services."""

import random


def compute_backoff_delay(attempt: int, base: float = 0.5, cap: float = 30.0) -> float:
    """The wait before retry number ``attempt``: exponential, capped, with full jitter."""
    bound = min(cap, base * 2**attempt)
    return random.uniform(0, bound)


def call_with_retries(call, attempts: int = 4):
    """Call ``call`` until it succeeds, sleeping a growing delay between attempts."""
    for attempt in range(attempts):
        try:
            return call()
        except TimeoutError:
            if attempt == attempts - 1:
                raise
'''

RUNBOOK = """# Restoring the database

Stop the application, then restore last night's dump with pg_restore into a fresh
database and run the migration check before pointing the service at it again.
"""

FAQ_ZH = """# 账户常见问题

## 如何重置密码

在登录页面点击“忘记密码”，输入注册时使用的邮箱地址。系统会在五分钟内发送一封包含重置链接的邮件。

## 账户被锁定怎么办

连续输错密码五次后，账户会被锁定十五分钟。十五分钟后账户会自动解锁。
"""

ANSI = "\x1b["
ADD_KEYS = {
    "kb",
    "processed",
    "unchanged",
    "skipped",
    "skipped_summary",
    "failed",
    "removed",
    "chunks_added",
    "chunks_removed",
    "bytes_processed",
    "duration_s",
    "item_ids",
    "stopped_by",
    "notes",
}


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line containing ``needle``."""
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


def invoke(data_dir: Path | None, *args: str, input: str | None = None) -> Result:
    """Run the command in-process; an unexpected exception fails the test with its traceback."""
    prefix = ["--data-dir", str(data_dir)] if data_dir is not None else []
    result = CliRunner().invoke(cli, [*prefix, *args], input=input, catch_exceptions=False)
    assert ANSI not in result.output  # not a terminal: plain text only
    return result


def as_json(result: Result) -> dict:
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No project file, home variable or real user folder can leak into a test."""
    monkeypatch.chdir(tmp_path)
    for name in ("KNOWLEDGE_AGENT_HOME", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("platformdirs.user_data_dir", lambda *a, **k: str(tmp_path / "user-data"))


def make_docs(root: Path) -> Path:
    write(root / "deploy.md", DEPLOY)
    write(root / "src" / "backoff.py", BACKOFF)
    write(root / "runbooks" / "restore.md", RUNBOOK)
    write(root / "faq-zh.md", FAQ_ZH)
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(docs folder, data dir) collected once; tests that use it only read."""
    base = tmp_path_factory.mktemp("corpus")
    docs = make_docs(base / "docs")
    data = base / "data"
    result = CliRunner().invoke(
        cli, ["--data-dir", str(data), "add", str(docs), "--kb", "handbook"]
    )
    assert result.exit_code == 0, result.output
    yield docs, data


# -- help, version, errors ------------------------------------------------------------------


def walk_commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk_commands(command, (*path, name))


def test_every_command_and_subcommand_has_help() -> None:
    commands = list(walk_commands(cli))
    names = {" ".join(path) for path, _ in commands}
    assert {"add", "search", "grep", "get", "list", "stats", "serve", "demo", "kb create"} <= names
    for path, command in commands:
        assert command.help and command.help.strip(), f"{' '.join(path)} has no help"
        result = invoke(None, *path, "--help")
        assert result.exit_code == 0
        assert "Usage: " in result.output
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{' '.join(path)} {param.opts[0]} has no help"


def test_help_and_version_do_not_open_a_knowledge_base(data_dir: Path) -> None:
    assert invoke(data_dir, "--help").exit_code == 0
    assert invoke(data_dir, "search", "--help").exit_code == 0
    version = invoke(data_dir, "--version")
    assert version.exit_code == 0 and "knowledge-agent" in version.output
    assert not data_dir.exists()


def test_usage_errors_exit_2(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    assert invoke(data, "search", "x", "--mode", "fuzzy").exit_code == 2
    assert invoke(data, "search", "x", "--limit", "0").exit_code == 2
    assert invoke(data, "no-such-command").exit_code == 2
    assert invoke(data, "get").exit_code == 2


def test_debug_shows_a_traceback_and_the_default_does_not(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    plain = invoke(data, "get", "no-such-item")
    assert plain.exit_code == 1
    assert plain.stderr.strip() == "Error: no item or collected file 'no-such-item'"
    debug = CliRunner().invoke(cli, ["--data-dir", str(data), "--debug", "get", "no-such-item"])
    assert debug.exit_code == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "NotFoundError" in debug.stderr
    assert debug.stderr.rstrip().endswith("Error: no item or collected file 'no-such-item'")


@pytest.mark.parametrize(
    ("option", "typo", "hint"),
    [
        ("--type", "pdff", "did you mean 'pdf'?"),
        ("--lang", "xx", "valid: en, ja, ko"),
        ("--doc-type", "runbok", "did you mean 'runbook'?"),
        ("--kb", "handbok", "did you mean 'handbook'?"),
    ],
)
def test_a_mistyped_filter_value_is_an_error_naming_the_valid_ones(
    corpus: tuple[Path, Path], option: str, typo: str, hint: str
) -> None:
    _, data = corpus
    result = invoke(data, "search", "deploy", option, typo)
    assert result.exit_code == 2
    assert option in result.stderr and repr(typo) in result.stderr and hint in result.stderr


def test_a_read_only_command_on_a_missing_data_dir_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "kb-typo"
    for command in (["search", "x"], ["list"], ["stats"], ["get", "x"], ["kb", "list"]):
        result = CliRunner().invoke(cli, ["--data-dir", str(typo), *command])
        assert result.exit_code == 1, command
        assert "no knowledge base in" in result.stderr
    assert not typo.exists()


def test_unexpected_exceptions_are_one_line_too(
    corpus: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, data = corpus

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(KnowledgeAgentCore, "list_kbs", broken)
    result = invoke(data, "kb", "list")
    assert result.exit_code == 1
    assert "Error: unexpected RuntimeError: boom" in result.stderr
    assert "Traceback" not in result.output


# -- add and sync ------------------------------------------------------------------------


def test_add_prints_a_summary_and_json_has_the_report_shape(tmp_path: Path, data_dir: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    first = invoke(data_dir, "add", str(docs))
    assert first.exit_code == 0
    assert re.search(r"processed 4 · unchanged 0 · skipped 0 · failed 0 · removed 0", first.stdout)
    again = as_json(invoke(data_dir, "add", str(docs), "--json"))
    assert set(again) == ADD_KEYS
    assert (again["processed"], again["unchanged"], again["kb"]) == (0, 4, "default")
    full = as_json(invoke(data_dir, "add", str(docs), "--full", "--json"))
    assert full["processed"] == 4


def test_add_reports_failed_files_but_exits_0(tmp_path: Path, data_dir: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    write(docs / "broken.pdf", b"%PDF-1.4 not really a pdf")
    write(docs / "blob.bin", b"\x00\x01\x02binary\x00")
    result = invoke(data_dir, "add", str(docs))
    assert result.exit_code == 0
    assert "failed 1" in result.stdout and "skipped 1" in result.stdout
    assert f"{docs / 'broken.pdf'}: corrupt or truncated PDF" in result.stdout
    assert "  1 binary file: docs/blob.bin" in result.stdout.splitlines()


def test_add_counts_skipped_files_by_kind_and_verbose_lists_each(
    tmp_path: Path, data_dir: Path
) -> None:
    docs = make_docs(tmp_path / "docs")
    for number in range(5):
        write(docs / "img" / f"screen{number}.png", b"\x89PNG\r\n\x1a\n")
    write(docs / "img" / "diagram.svg", "<svg/>")
    write(docs / "assets" / "inter.woff2", b"wOF2")
    write(docs / "assets" / "inter.ttf", b"\0\1\0\0")
    write(docs / "empty.md", "")
    with open(docs / "dump.log", "wb") as handle:
        handle.truncate(21 * 1024 * 1024)  # sparse: over the 20 MB limit, never read

    result = invoke(data_dir, "add", str(docs))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "skipped 10 · failed 0" in lines[0]
    start = lines.index("skipped 10 (--verbose lists them):")
    assert lines[start + 1 :] == [
        "  6 images (png, svg)",
        "  2 fonts: docs/assets/inter.ttf, docs/assets/inter.woff2",
        "  1 empty file: docs/empty.md",
        "  1 file over the 20.0 MB limit: docs/dump.log",
    ]
    assert str(docs / "img") not in result.stdout  # counted, not listed

    verbose = invoke(data_dir, "add", str(docs), "--verbose")
    lines = verbose.stdout.splitlines()
    assert "skipped 9 · failed 0" in lines[0]  # the empty file is unchanged now
    listed = lines[lines.index("skipped:") + 1 : lines.index("skipped 9:")]
    assert listed == [
        f"  {docs / 'assets' / 'inter.ttf'}: not text (font)",
        f"  {docs / 'assets' / 'inter.woff2'}: not text (font)",
        f"  {docs / 'dump.log'}: 21.0 MB is over the 20.0 MB limit",
        f"  {docs / 'img' / 'diagram.svg'}: not text (image)",
        *(f"  {docs / 'img' / f'screen{n}.png'}: not text (image)" for n in range(5)),
    ]

    synced = invoke(data_dir, "sync", "--verbose").stdout
    assert f"  {docs / 'img' / 'screen0.png'}: not text (image)" in synced
    assert "  6 images (png, svg)" in synced

    summary = as_json(invoke(data_dir, "add", str(docs), "--json"))["skipped_summary"]
    assert summary["total"] == 9
    assert summary["groups"][0] == {
        "kind": "image",
        "reason": "not text",
        "count": 6,
        "extensions": {"png": 5, "svg": 1},
    }
    assert [group["kind"] for group in summary["groups"]] == ["image", "font", "too large"]

    svg = invoke(data_dir, "add", str(docs), "--include", "*.svg", "--include", "*.md")
    lines = svg.stdout.splitlines()
    assert "processed 1 · unchanged 4 · skipped 0 ·" in lines[0]  # the SVG, asked for
    assert len(lines) == 1  # no skipped section


def test_progress_off_a_terminal_is_plain_lines_on_stderr(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = make_docs(tmp_path / "docs")
    monkeypatch.setattr(render, "PLAIN_PROGRESS_INTERVAL", 0.0)  # a line for every event
    result = invoke(data_dir, "add", str(docs))
    assert result.exit_code == 0
    assert result.stdout.startswith("processed 4 ·")  # stdout has the report only
    lines = result.stderr.splitlines()
    assert lines[0].startswith("collecting 1/4 files · ")
    assert any(line.startswith("indexing ") and " chunks" in line for line in lines)
    assert lines[-1].startswith("collected 4 files · ")
    assert re.search(r" \| indexed \d+ chunks", lines[-1])
    assert as_json(invoke(data_dir, "add", str(docs), "--full", "--json"))["processed"] == 4


def test_watch_updates_count_skipped_files_and_verbose_lists_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = CollectReport(kb="default", processed=1)
    report.skipped.append(FileIssue("/w/blob.bin", "binary file"))
    for verbose in (False, True):
        with click.Context(watch, info_name="watch") as ctx:
            ctx.params["verbose"] = verbose
            _watch_printer(False)(report)
        lines = capsys.readouterr().out.splitlines()
        assert "processed 1 · unchanged 0 · skipped 1 ·" in lines[0]
        assert lines[-1] == "  1 binary file: /w/blob.bin"
        assert ("  /w/blob.bin: binary file" in lines) is verbose


def test_add_missing_path_exits_1_before_collecting_anything(
    tmp_path: Path, data_dir: Path
) -> None:
    docs = make_docs(tmp_path / "docs")
    result = invoke(data_dir, "add", str(docs), str(tmp_path / "missing"))
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: {tmp_path / 'missing'}: no such file or directory"
    assert "Traceback" not in result.output
    assert invoke(data_dir, "list", "--json").exit_code == 1  # nothing was created
    assert not (data_dir / "knowledge.sqlite3").exists()


def test_add_a_word_that_is_no_path_is_not_stored_as_text(data_dir: Path) -> None:
    assert invoke(data_dir, "add", "notes").exit_code == 1


def test_add_with_include_exclude_and_kb(tmp_path: Path, data_dir: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    only_md = as_json(
        invoke(data_dir, "add", str(docs), "--kb", "md", "--include", "*.md", "--json")
    )
    assert (only_md["processed"], only_md["kb"]) == (3, "md")
    no_runbooks = as_json(
        invoke(data_dir, "add", str(docs), "--kb", "other", "--exclude", "runbooks/", "--json")
    )
    assert no_runbooks["processed"] == 3
    types = {
        i["source_type"] for i in as_json(invoke(data_dir, "list", "--kb", "md", "--json"))["items"]
    }
    assert types == {"markdown"}


def test_add_reads_text_from_stdin(data_dir: Path) -> None:
    text = "Deploys freeze on Fridays after noon, and on public holidays."
    report = as_json(
        invoke(data_dir, "add", "-", "--title", "Release policy", "--json", input=text)
    )
    assert report["processed"] == 1 and report["chunks_added"] == 1
    item = as_json(invoke(data_dir, "get", report["item_ids"][0], "--json"))["items"][0]
    assert (item["title"], item["content"]) == ("Release policy", text)
    assert invoke(data_dir, "add", "-", input="  \n").exit_code == 1


def test_sync_picks_up_changes_and_deletions(tmp_path: Path, data_dir: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    invoke(data_dir, "add", str(docs), "--kb", "handbook")
    (docs / "faq-zh.md").unlink()
    write(docs / "new.md", "# Feature flags\n\nFlags are read at startup from flags.yaml.\n")
    report = as_json(invoke(data_dir, "sync", "--json"))
    assert set(report) == ADD_KEYS
    assert (report["processed"], report["removed"], report["unchanged"]) == (1, 1, 3)
    human = invoke(data_dir, "sync", "--kb", "handbook")
    assert human.exit_code == 0 and "unchanged 4" in human.stdout
    unknown = invoke(data_dir, "sync", "--kb", "nope")
    assert unknown.exit_code == 1 and "no knowledge base named 'nope'" in unknown.stderr


# -- search ----------------------------------------------------------------------------------


def test_search_finds_the_section_with_its_line_range(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus
    query = "how do I roll back a failed release"
    found = as_json(invoke(data, "search", query, "--json"))
    assert set(found) == {"query", "mode", "results"} and found["query"] == query
    top = found["results"][0]
    assert set(top) >= {"item_id", "score", "confidence", "matched_chunks", "context_chunks"}
    assert top["path"] == str(docs / "deploy.md")
    best = top["matched_chunks"][0]
    start, end = best["start_line"], best["end_line"]
    assert best["location"] == f"{docs / 'deploy.md'}:{start}-{end}"
    assert best["evidence_ref"].startswith(f"kb:{best['chunk_id']}:")
    # Data for programs: the passages; explanations and neighbours when asked for.
    assert "explanation" not in best and top["context_chunks"] == []
    asked = as_json(invoke(data, "search", query, "--json", "--explain", "--context", "1"))
    explained = asked["results"][0]
    assert explained["matched_chunks"][0]["explanation"]["matched_terms"]
    matched = {c["chunk_index"] for c in explained["matched_chunks"]}
    context = {c["chunk_index"] for c in explained["context_chunks"]}
    assert context and all({i - 1, i + 1} & matched for i in context) and not context & matched
    assert start == line_of(DEPLOY, "## Rolling back a failed release")
    assert end >= line_of(DEPLOY, "systemctl restart app")
    human = invoke(data, "search", query)
    assert human.exit_code == 0
    lines = human.stdout.splitlines()
    assert lines[0].startswith("1. Deploying the service")
    assert f"{docs / 'deploy.md'}:{start}-{end}" in lines[1]
    assert "Rolling back a failed release" in lines[1]  # the heading of the best chunk
    assert "┆" in human.stdout  # context chunks
    assert "**" not in human.stdout  # highlight markers are rendered, not printed


def test_search_finds_a_code_function_by_name(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus
    found = as_json(invoke(data, "search", "compute_backoff_delay", "--json"))
    top = found["results"][0]
    assert top["path"] == str(docs / "src" / "backoff.py")
    best = top["matched_chunks"][0]
    assert best["start_line"] == line_of(BACKOFF, "def compute_backoff_delay")
    human = invoke(data, "search", "compute_backoff_delay", "-n", "1", "--context", "0")
    first = line_of(BACKOFF, "def compute_backoff_delay")
    assert f"{docs / 'src' / 'backoff.py'}:{first}-" in human.stdout
    assert "┆" not in human.stdout


def test_search_chinese(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    human = invoke(data, "search", "如何重置密码", "-n", "1")
    assert human.exit_code == 0
    assert human.stdout.startswith("1. 账户常见问题")
    assert "如何重置密码" in human.stdout


def test_search_explain_shows_the_score_breakdown(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    result = invoke(data, "search", "roll back release", "--explain", "-n", "1")
    assert re.search(r"keyword [\d.]+ \(rank \d+\) · semantic [\d.]+", result.stdout)
    assert "fused" in result.stdout and "terms: " in result.stdout
    assert re.search(r"roll ×\d", result.stdout)


def test_search_filters(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus

    def sources(*args: str) -> set[str]:
        found = as_json(invoke(data, "search", "release restore retry", *args, "--json"))
        return {Path(r["path"]).name for r in found["results"]}

    assert sources("--type", "code") == {"backoff.py"}
    assert sources("--doc-type", "runbook") == {"restore.md"}
    assert sources("--scope", str(docs / "src")) == {"backoff.py"}
    assert sources("--kb", "handbook") >= {"deploy.md", "restore.md"}
    assert sources("--since", "2999-01-01") == set()
    assert sources("--until", "2000-01-01T00:00:00Z") == set()
    # A date alone in --until includes that whole day.
    assert "deploy.md" in sources("--until", date.today().isoformat())
    # --min-score cuts on the confidence, a 0-1 scale.
    found = as_json(invoke(data, "search", "release restore retry", "--json"))["results"]
    cut = sorted(result["confidence"] for result in found)[-1]
    kept = as_json(
        invoke(data, "search", "release restore retry", "--min-score", str(cut), "--json")
    )["results"]
    assert 0 < len(kept) < len(found) and all(r["confidence"] >= cut for r in kept)
    assert invoke(data, "search", "release", "--min-score", "2").exit_code == 2
    assert as_json(invoke(data, "search", "密码", "--lang", "zh", "--json"))["results"]


def test_search_relative_scope_is_made_absolute(
    corpus: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, data = corpus
    monkeypatch.chdir(docs)
    found = as_json(invoke(data, "search", "restore database", "--scope", "runbooks", "--json"))
    assert [Path(r["path"]).name for r in found["results"]] == ["restore.md"]
    human = invoke(data, "search", "restore database", "--scope", "runbooks")
    assert "runbooks/restore.md:" in human.stdout  # shown relative to the working folder


def test_search_errors_exit_1(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    bad_date = invoke(data, "search", "x", "--since", "last tuesday")
    assert bad_date.exit_code == 1
    assert "--since: not a date: 'last tuesday'" in bad_date.stderr
    unknown = invoke(data, "search", "x", "--kb", "handbook", "--kb", "nope")
    assert unknown.exit_code == 2 and "unknown 'nope'" in unknown.stderr


def test_search_with_no_results(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    assert invoke(data, "search", "zzyzx").stdout.strip() == "No results."
    assert as_json(invoke(data, "search", "zzyzx", "--json"))["results"] == []


# -- grep --------------------------------------------------------------------------------------


def test_grep_prints_path_line_text(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus
    result = invoke(data, "grep", "current symlink")
    expected = [
        f"{docs / 'deploy.md'}:{n}: {DEPLOY.splitlines()[n - 1]}"
        for n, line in enumerate(DEPLOY.splitlines(), start=1)
        if "current symlink" in line
    ]
    assert result.stdout.splitlines() == expected
    found = as_json(invoke(data, "grep", r"def \w+_delay", "--regex", "--json"))
    assert set(found) == {"pattern", "regex", "case_sensitive", "matches"}
    match = found["matches"][0]
    assert set(match) == {"item_id", "kb", "title", "source_uri", "line_number", "line", "link"}
    assert match["line_number"] == line_of(BACKOFF, "def compute_backoff_delay")
    assert match["link"] == ""  # a file has none: path:line says where


def test_grep_on_a_crawled_page_prints_the_link_of_the_line_section(
    server: SiteServer, data_dir: Path
) -> None:
    server.set_page("/guide.html", SECTIONED_PAGE)
    page = server.url("/guide.html")
    assert invoke(data_dir, "add", page, "--depth", "0").exit_code == 0

    def grep(word: str) -> str:
        result = invoke(data_dir, "grep", word)
        assert result.exit_code == 0, result.output
        return result.stdout

    assert grep("zebra") == f"{page}#install: Run the zebra installer now.\n"
    assert grep("walrus") == f"{page}#usage: Then the walrus command.\n"
    assert grep("yak").startswith(f"{page}#install: …")  # a section without an id
    assert grep("tapir") == f"{page}: Intro text about the guide, the tapir line.\n"
    [match] = as_json(invoke(data_dir, "grep", "zebra", "--json"))["matches"]
    assert match["link"] == f"{page}#install" and match["source_uri"] == page
    assert match["line"] == "Run the zebra installer now." and match["line_number"] > 1


def test_a_line_is_linked_to_the_nearest_anchored_heading_inside_its_chunk() -> None:
    content = "Intro\n# One\nfirst body\n# Two\nsecond body\n# Three\nthird body"
    page = "https://d.org/p"
    whole = KnowledgeChunk(
        item_id="i",
        content=content,
        start_position=0,
        end_position=len(content),
        metadata={
            "start_line": 1,
            "end_line": 7,
            "url": page,
            "anchors": [[content.index("# One"), "one"], [content.index("# Two"), "two"]],
        },
    )
    matches = [
        TextMatch("i", "kb", "P", page, number, line, "")
        for number, line in enumerate(content.split("\n"), start=1)
    ]

    found = linked(matches, lambda item_id: [whole])

    assert [match.link for match in found] == [
        page, f"{page}#one", f"{page}#one", f"{page}#two", f"{page}#two", f"{page}#two",
        f"{page}#two",
    ]  # fmt: skip
    files = [TextMatch("f", "kb", "F", "/docs/a.md", 1, "x")]
    assert linked(files, lambda item_id: pytest.fail("a file's chunks are never read")) == files


def test_grep_options(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    assert invoke(data, "grep", "ROLLBACK").stdout
    assert invoke(data, "grep", "ROLLBACK", "--case-sensitive").stdout == ""
    assert len(invoke(data, "grep", "e", "-n", "2").stdout.splitlines()) == 2
    only = as_json(invoke(data, "grep", "release", "--source", "restore", "--json"))
    assert {Path(m["source_uri"]).name for m in only["matches"]} <= {"restore.md"}


def test_grep_invalid_regex_exits_1(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    result = invoke(data, "grep", "(unclosed", "--regex")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: invalid regular expression '(unclosed'")


# -- get, list, stats ----------------------------------------------------------------------------


def test_get_by_id_and_by_path(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus
    path = str(docs / "deploy.md")
    by_path = as_json(invoke(data, "get", path, "--json"))
    assert set(by_path) == {"items"}
    item = by_path["items"][0]
    assert item["content"] == DEPLOY and item["title"] == "Deploying the service"
    human = invoke(data, "get", item["id"])
    assert human.stdout.startswith("Deploying the service\n")
    assert f"id        {item['id']}" in human.stdout
    assert "## Rolling back a failed release" in human.stdout
    missing = invoke(data, "get", "nothing-here")
    assert missing.exit_code == 1 and "no item or collected file 'nothing-here'" in missing.stderr


def test_get_a_chunk_with_its_neighbours(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    found = as_json(invoke(data, "search", "roll back a failed release", "--json"))
    chunk = found["results"][0]["matched_chunks"][0]
    context = as_json(invoke(data, "get", "--chunk", chunk["chunk_id"], "--json"))
    assert set(context) == {"chunk", "item", "before", "after"}
    assert context["chunk"]["content"] == chunk["content"]
    assert len(context["before"]) == 1 and len(context["after"]) == 1
    human = invoke(data, "get", "--chunk", chunk["chunk_id"], "--neighbors", "0")
    assert "systemctl restart app" in human.stdout and "┆" not in human.stdout
    assert invoke(data, "get", "--chunk", "nope").exit_code == 1


def test_list_items(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus
    listed = as_json(invoke(data, "list", "--json"))
    assert set(listed) == {"count", "items"} and listed["count"] == 4
    assert all("content" not in item for item in listed["items"])
    code = as_json(invoke(data, "list", "--type", "code", "--json"))
    assert [item["title"] for item in code["items"]] == ["backoff.py"]
    human = invoke(data, "list", "-n", "2")
    assert len(human.stdout.splitlines()) == 2
    assert str(docs) in human.stdout
    assert invoke(data, "list", "--kb", "nope").exit_code == 2
    assert invoke(data, "list", "--type", "cod").exit_code == 2


def test_stats(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    stats = as_json(invoke(data, "stats", "--json"))
    assert set(stats) == {"status", "knowledge_bases", "config_file", "usage"}
    assert stats["status"]["items"] == 4 and stats["status"]["consistent"]
    assert [kb["name"] for kb in stats["knowledge_bases"]] == ["handbook"]
    human = invoke(data, "stats")
    assert re.search(r"items\s+4\b", human.stdout)
    assert re.search(r"keyword index\s+4 items", human.stdout)
    assert "handbook" in human.stdout and f"{data}" in human.stdout


# -- knowledge bases -----------------------------------------------------------------------------


def test_kb_commands(data_dir: Path) -> None:
    created = as_json(invoke(data_dir, "kb", "create", "faq", "--description", "FAQ", "--json"))
    assert created["knowledge_base"]["name"] == "faq"
    assert created["knowledge_base"]["description"] == "FAQ"
    assert invoke(data_dir, "kb", "create", "faq").exit_code == 1  # taken
    assert invoke(data_dir, "kb", "create", "bad name!").exit_code == 1
    described = invoke(data_dir, "kb", "describe", "faq", "Questions users ask")
    assert "Questions users ask" in described.stdout
    shown = as_json(invoke(data_dir, "kb", "describe", "faq", "--json"))
    assert shown["knowledge_base"]["description"] == "Questions users ask"
    listed = as_json(invoke(data_dir, "kb", "list", "--json"))
    assert [kb["name"] for kb in listed["knowledge_bases"]] == ["faq"]
    assert "faq" in invoke(data_dir, "kb", "list").stdout
    refused = invoke(data_dir, "kb", "remove", "faq", input="n\n")
    assert refused.exit_code == 1  # aborted at the prompt
    assert "faq" in invoke(data_dir, "kb", "list").stdout
    removed = invoke(data_dir, "kb", "remove", "faq", input="y\n")
    assert removed.exit_code == 0 and "Removed knowledge base 'faq'" in removed.stdout
    assert invoke(data_dir, "kb", "remove", "faq", "--yes").exit_code == 1  # gone
    assert invoke(data_dir, "kb", "describe", "faq").exit_code == 1
    created_human = invoke(data_dir, "kb", "create", "tmp")
    assert created_human.stdout.startswith("Created knowledge base 'tmp'.\ntmp\n")
    assert as_json(invoke(data_dir, "kb", "remove", "tmp", "--yes", "--json")) == {
        "name": "tmp",
        "items_removed": 0,
    }


# -- remove, rebuild, check ----------------------------------------------------------------------


def test_remove_by_id_by_path_and_unknown(tmp_path: Path, data_dir: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    report = as_json(invoke(data_dir, "add", str(docs), "--json"))
    by_id = as_json(invoke(data_dir, "remove", report["item_ids"][0], "--json"))
    assert by_id == {"target": report["item_ids"][0], "kind": "item", "removed": 1}
    by_path = invoke(data_dir, "remove", str(docs / "runbooks" / "restore.md"))
    assert by_path.exit_code == 0 and "Removed 1 item" in by_path.stdout
    folder = as_json(invoke(data_dir, "remove", str(docs), "--json"))
    assert folder["kind"] == "path" and folder["removed"] == 2
    unknown = invoke(data_dir, "remove", "nothing")
    assert unknown.exit_code == 1
    assert "no item or collected path 'nothing'" in unknown.stderr


def test_rebuild(tmp_path: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    data = tmp_path / "data"
    invoke(data, "add", str(docs))
    chunks = as_json(invoke(data, "stats", "--json"))["status"]["chunks"]
    assert as_json(invoke(data, "rebuild", "--json")) == {"chunks_indexed": chunks}
    assert invoke(data, "rebuild").stdout.strip() == f"Indexed {chunks} chunks."


def test_check_reports_and_repairs_an_inconsistent_index(tmp_path: Path, data_dir: Path) -> None:
    docs = make_docs(tmp_path / "docs")
    report = as_json(invoke(data_dir, "add", str(docs), "--json"))
    good = invoke(data_dir, "check")
    assert good.exit_code == 0 and "consistent" in good.stdout
    with KnowledgeAgentCore(data_dir) as core:  # drop one item from the keyword index only
        core.keyword_index.update([], [report["item_ids"][0]])
    writer = FolderLock(data_dir)  # another process writing: opening cannot repair
    writer.acquire()
    try:
        bad = invoke(data_dir, "check")
        assert bad.exit_code == 1
        assert "inconsistent" in bad.stdout and "the keyword index holds 3 items" in bad.stdout
        status = json.loads(invoke(data_dir, "check", "--json").stdout)
        assert status["consistent"] is False and status["problems"]
    finally:
        writer.release()
    repaired = invoke(data_dir, "check", "--repair", "--json")
    assert repaired.exit_code == 0
    assert json.loads(repaired.stdout)["consistent"] is True  # opening found and replayed it
    assert invoke(data_dir, "check").exit_code == 0


# -- links leaving a collected folder ------------------------------------------------------------


def docs_with_outside_links(tmp_path: Path) -> Path:
    """A docs folder holding two links to a private folder outside it."""
    docs = make_docs(tmp_path / "docs")
    write(tmp_path / "private" / "diary.md", "# Diary\n\nThe okapi password is hunter2.\n")
    write(tmp_path / "private" / "ssh" / "config", "Host okapi-bastion\n")
    try:
        (docs / "diary.md").symlink_to(tmp_path / "private" / "diary.md")
        (docs / "ssh").symlink_to(tmp_path / "private" / "ssh", target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available")
    return docs


def test_add_counts_links_leaving_the_folder_and_follows_them_only_when_asked(
    tmp_path: Path,
) -> None:
    docs = docs_with_outside_links(tmp_path)
    data = tmp_path / "data"
    plain = invoke(data, "add", "docs")
    assert plain.exit_code == 0
    assert re.search(r"2 links leaving the folder: .*diary\.md.*ssh", plain.stdout)
    verbose = invoke(data, "add", "docs", "--verbose")
    assert f"{docs / 'diary.md'}: link leaving the folder" in verbose.stdout
    assert f"{docs / 'ssh'}: link leaving the folder" in verbose.stdout
    assert "hunter2" not in invoke(data, "grep", "hunter2").stdout

    followed = as_json(invoke(data, "add", "docs", "--follow-symlinks", "--json"))
    assert followed["processed"] == 2 and followed["skipped_summary"]["total"] == 0
    assert "hunter2" in invoke(data, "grep", "hunter2").stdout
    # The choice is stored with the folder: sync keeps following them.
    write(tmp_path / "private" / "later.md", "# Later\n\nThe narwhal arrived.\n")
    (docs / "later.md").symlink_to(tmp_path / "private" / "later.md")
    synced = as_json(invoke(data, "sync", "--json"))
    assert synced["processed"] == 1 and synced["skipped_summary"]["total"] == 0


def test_follow_symlinks_applies_only_to_folders(tmp_path: Path) -> None:
    result = invoke(tmp_path / "data", "add", "https://example.com/", "--follow-symlinks")
    assert result.exit_code == 2 and "--follow-symlinks applies only to a folder" in result.stderr


@pytest.mark.parametrize("follow", [False, True])
def test_watch_takes_follow_symlinks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, follow: bool
) -> None:
    docs_with_outside_links(tmp_path)

    def stop() -> None:
        raise KeyboardInterrupt  # right after the first pass

    monkeypatch.setattr("knowledge_agent.cli._wait_for_interrupt", stop)
    extra = ["--follow-symlinks"] if follow else []
    result = invoke(tmp_path / "data", "watch", "docs", "--json", *extra)
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout.splitlines()[0])
    links = [g for g in first["skipped_summary"]["groups"] if g["kind"] == "link outside"]
    if follow:
        assert first["processed"] == 6 and links == []
    else:
        assert first["processed"] == 4 and links[0]["count"] == 2


# -- init, serve ---------------------------------------------------------------------------------


def test_init_writes_a_project_file_once(tmp_path: Path) -> None:
    first = invoke(None, "init")
    assert first.exit_code == 0
    assert (tmp_path / ".knowledge-agent.toml").is_file()
    again = invoke(None, "init")
    assert again.exit_code == 1 and "already exists" in again.stderr
    assert invoke(None, "init", "--force").exit_code == 0
    empty = invoke(None, "stats", "--json")  # nothing added yet: says where it looked
    assert empty.exit_code == 1 and str(tmp_path / ".knowledge-agent") in empty.stderr
    write(tmp_path / "notes.md", "# Notes\n\nSomething to find.\n")
    assert invoke(None, "add", "notes.md").exit_code == 0
    stats = as_json(invoke(None, "stats", "--json"))
    assert stats["status"]["data_dir"] == str(tmp_path / ".knowledge-agent")
    assert stats["config_file"] == str(tmp_path / ".knowledge-agent.toml")


def test_project_chunk_sizes_change_the_chunking(tmp_path: Path) -> None:
    text = "# Notes\n\n" + "\n\n".join(
        f"Paragraph {n} talks about topic number {n} in a few plain words." for n in range(30)
    )
    write(tmp_path / "notes" / "notes.md", text)
    default = as_json(invoke(tmp_path / "default-data", "add", "notes", "--json"))
    write(
        tmp_path / ".knowledge-agent.toml",
        "[chunking]\nmin_chunk_size = 50\nmax_chunk_size = 200\n",
    )
    small = as_json(invoke(None, "add", "notes", "--json"))
    assert small["chunks_added"] > default["chunks_added"]
    found = as_json(invoke(None, "search", "topic number", "--json"))
    chunks = [c for r in found["results"] for c in r["matched_chunks"] + r["context_chunks"]]
    assert chunks and all(len(chunk["content"]) <= 200 for chunk in chunks)


def test_project_default_kb_is_where_add_writes(tmp_path: Path) -> None:
    make_docs(tmp_path / "docs")
    write(tmp_path / ".knowledge-agent.toml", 'default_kb = "notes"\n')
    assert as_json(invoke(None, "add", "docs", "--json"))["kb"] == "notes"
    assert as_json(invoke(None, "add", "docs", "--kb", "other", "--json"))["kb"] == "other"


def test_a_bad_project_file_is_one_line_naming_file_and_key(tmp_path: Path) -> None:
    write(tmp_path / ".knowledge-agent.toml", "[search]\nfusion = 'magic'\n")
    result = invoke(None, "stats")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(tmp_path / ".knowledge-agent.toml") in lines[0] and "search.fusion" in lines[0]
    assert invoke(None, "search", "--help").exit_code == 0  # help never reads the file


def test_sync_collects_the_project_scan_paths(tmp_path: Path) -> None:
    make_docs(tmp_path / "docs")
    write(
        tmp_path / ".knowledge-agent.toml",
        '[[scan]]\npath = "docs"\nkb = "project"\nexclude = ["src/"]\n',
    )
    first = as_json(invoke(None, "sync", "--json"))
    assert first["processed"] == 3
    kbs = as_json(invoke(None, "kb", "list", "--json"))["knowledge_bases"]
    assert [(kb["name"], kb["roots"]) for kb in kbs] == [("project", [str(tmp_path / "docs")])]
    second = as_json(invoke(None, "sync", "--kb", "project", "--json"))
    assert (second["processed"], second["unchanged"]) == (0, 3)


def test_serve_without_the_mcp_extra(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    for name in [
        n for n in sys.modules if n == "mcp" or n.startswith(("mcp.", "knowledge_agent.server"))
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # "import mcp" now fails
    result = invoke(data_dir, "serve")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: the MCP server needs the [mcp] extra, which is not installed: "
        'pip install "knowledge-agent[mcp]" (or, in a checkout of knowledge_agent: '
        'pip install ".[mcp]")'
    )
    assert result.stdout == ""


def test_serve_hands_a_core_opener_roots_and_url_prefixes_to_the_server(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    import knowledge_agent.server as server

    seen: dict[str, object] = {}

    def fake_run_stdio(open_core, *, roots, allow_urls, text_content):  # type: ignore[no-untyped-def]
        with open_core() as core:
            seen["data_dir"] = core.data_dir
        seen["roots"] = roots
        seen["allow_urls"] = allow_urls
        seen["text_content"] = text_content

    monkeypatch.setattr(server, "run_stdio", fake_run_stdio)
    result = invoke(
        data_dir, "serve", "--root", str(tmp_path), "--allow-url", "https://docs.python.org/3/"
    )
    assert result.exit_code == 0
    assert result.stdout == ""  # stdout belongs to the protocol
    assert seen == {
        "data_dir": data_dir,
        "roots": [tmp_path.resolve()],
        "allow_urls": ("https://docs.python.org/3/",),
        "text_content": True,
    }
    assert invoke(data_dir, "serve", "--structured-only").exit_code == 0
    assert seen["text_content"] is False
    assert invoke(data_dir, "serve", "--root", str(tmp_path / "missing")).exit_code == 2


def test_the_command_and_the_package_start_without_the_engines() -> None:
    code = (
        "import sys\n"
        "import knowledge_agent, knowledge_agent.cli\n"
        "from knowledge_agent import ChunkConfig, ContentChunker, KnowledgeItem, errors\n"
        "heavy = ('scipy', 'sklearn', 'whoosh', 'numpy', 'httpx', 'bs4')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "from knowledge_agent import KnowledgeAgentCore\n"
        "print(KnowledgeAgentCore.__name__, 'whoosh' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[]", "KnowledgeAgentCore True"]
    version = subprocess.run(
        [sys.executable, "-m", "knowledge_agent.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "version" in version.stdout


def test_the_package_runs_as_a_module_and_knows_its_version() -> None:
    from importlib import metadata

    import knowledge_agent

    assert knowledge_agent.__version__ == metadata.version("knowledge-agent")
    shown = subprocess.run(
        [sys.executable, "-m", "knowledge_agent", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert knowledge_agent.__version__ in shown.stdout
    root = Path(__file__).resolve().parents[1]
    assert "MIT License" in (root / "LICENSE").read_text(encoding="utf-8")
    project = (root / "pyproject.toml").read_text(encoding="utf-8")
    assert 'license-files = ["LICENSE"]' in project and '"setuptools>=77"' in project


def test_search_json_carries_passages_not_whole_documents(tmp_path: Path) -> None:
    notes = "\n\n".join(
        f"## Release {n}\n\nFixed bug number {n} in the parser." for n in range(3000)
    )
    write(tmp_path / "docs" / "release-notes.md", "# Release notes\n\n" + notes)
    write(tmp_path / "docs" / "guide.md", "# Guide\n\nThe parser reads every release file.\n")
    data = tmp_path / "data"
    assert invoke(data, "add", str(tmp_path / "docs")).exit_code == 0
    compact = invoke(data, "search", "parser release", "-n", "10", "--json")
    assert len(compact.stdout) < 50_000 and len(notes) > 100_000
    results = as_json(compact)["results"]
    assert all("content" not in r and r["content_chars"] > 0 for r in results)
    full = as_json(invoke(data, "search", "parser release", "-n", "10", "--json", "--full"))
    assert any(len(r["content"]) == r["content_chars"] > 100_000 for r in full["results"])


def test_get_a_line_range_of_a_collected_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    write(path, "# Notes\n\nfirst line\nsecond line\nthird line\n")
    data = tmp_path / "data"
    assert invoke(data, "add", str(path)).exit_code == 0
    shown = invoke(data, "get", f"{path}:3-4")
    assert shown.exit_code == 0 and shown.stdout == "3  first line\n4  second line\n"
    as_data = as_json(invoke(data, "get", f"{path}:5-9", "--json"))
    assert as_data["start"] == 5 and as_data["lines"][0] == "third line"
    assert invoke(data, "get", f"{path}:4-2").exit_code == 2
    assert invoke(data, "get", f"{tmp_path / 'other.md'}:1-2").exit_code == 1


def test_search_writes_ndjson_csv_markdown_and_paths(corpus: tuple[Path, Path]) -> None:
    import csv
    import io

    docs, data = corpus
    lines = invoke(data, "search", "deploy rollback", "--format", "ndjson").stdout.splitlines()
    assert lines and all(json.loads(line)["title"] for line in lines)
    table = list(
        csv.DictReader(io.StringIO(invoke(data, "search", "deploy", "--format", "csv").stdout))
    )
    assert table[0]["rank"] == "1" and table[0]["evidence_ref"].startswith("kb:")
    markdown = invoke(data, "search", "deploy", "--format", "md").stdout
    assert markdown.startswith("1. **") and "`" in markdown
    paths = invoke(data, "search", "deploy", "--files").stdout.splitlines()
    assert paths and all(path.startswith(str(docs)) for path in paths)
    assert len(paths) == len(set(paths))
    few = invoke(data, "search", "deploy retry backoff", "-n", "1", "--files").stdout.splitlines()
    every = invoke(data, "search", "deploy retry backoff", "-n", "1", "--all", "--files")
    every = every.stdout.splitlines()
    assert len(few) == 1 and len(every) > 1


def test_ids_are_shown_short_and_taken_by_unique_prefix(corpus: tuple[Path, Path]) -> None:
    _, data = corpus
    listed = invoke(data, "list").stdout.splitlines()
    short = listed[0].split()[0]
    assert 8 <= len(short) < 36
    shown = invoke(data, "get", short, "--json")
    assert as_json(shown)["items"][0]["id"].startswith(short)
    chunk = as_json(invoke(data, "search", "deploy", "--json"))["results"][0]["matched_chunks"][0]
    assert invoke(data, "explain", chunk["chunk_id"][:10]).exit_code == 0
    assert invoke(data, "get", "--chunk", chunk["chunk_id"][:10], "--json").exit_code == 0
    assert invoke(data, "get", short[:4]).exit_code == 1  # too short to be taken as an id


def test_multi_get_shows_every_item_a_glob_matches(corpus: tuple[Path, Path]) -> None:
    docs, data = corpus
    paths = invoke(data, "multi-get", "*.md", "--files").stdout.splitlines()
    assert paths and all(path.endswith(".md") and path.startswith(str(docs)) for path in paths)
    as_data = as_json(invoke(data, "multi-get", "*.py", "--json"))
    assert as_data["count"] == 1 and as_data["items"][0]["content"]
    assert invoke(data, "multi-get", "*.md", "-n", "1").exit_code == 0
    assert invoke(data, "multi-get", "*.nothing").exit_code == 1
