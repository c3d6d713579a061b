"""knowledge-agent watch: first pass, one line per update, a clean stop on Ctrl-C."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from knowledge_agent import cli as cli_module
from knowledge_agent.ingest.report import CollectReport

TIMEOUT = 20.0  # generous: a loaded CI machine may be slow to deliver file events


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("KNOWLEDGE_AGENT_HOME", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


def run_watch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Path], None],
    *extra: str,
) -> tuple[str, str, int]:
    """Run ``watch`` on a folder; after the first pass apply ``change``, wait for its
    update, then press Ctrl-C. Returns (stdout, stderr, exit code)."""
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe first note mentions lighthouses.\n")
    reports: list[CollectReport] = []
    updated = threading.Event()
    real_printer = cli_module._watch_printer

    def printer(as_json: bool) -> Callable[[CollectReport], None]:
        show = real_printer(as_json)

        def record(report: CollectReport) -> None:
            show(report)
            reports.append(report)
            if len(reports) >= 2:  # the first pass, then the update we caused
                updated.set()

        return record

    def interrupt_after_change() -> None:
        change(folder)
        assert updated.wait(TIMEOUT), "no update reported"
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "_watch_printer", printer)
    monkeypatch.setattr(cli_module, "_wait_for_interrupt", interrupt_after_change)
    data = tmp_path / "data"
    args = ["--data-dir", str(data), "watch", str(folder), "--debounce", "0.05", *extra]
    result = CliRunner().invoke(cli_module.cli, args, catch_exceptions=False)
    return result.stdout, result.stderr, result.exit_code


def test_watch_prints_a_line_per_update_and_stops_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def add_note(folder: Path) -> None:
        (folder / "b.md").write_text("# Beta\n\nThe second note is about harbours.\n")

    stdout, stderr, code = run_watch(tmp_path, monkeypatch, add_note)
    assert code == 0
    lines = stdout.splitlines()
    assert "processed 1 · unchanged 0" in lines[0]  # the first pass
    assert any("processed 1 · unchanged 0" in line for line in lines[1:])
    assert "Watching 1 path(s) into 'default'; Ctrl-C to stop." in stderr
    assert "Stopped watching." in stderr
    # The update is searchable once the command has returned (and the watcher stopped).
    search = CliRunner().invoke(
        cli_module.cli, ["--data-dir", str(tmp_path / "data"), "search", "harbours", "--json"]
    )
    titles = [r["title"] for r in json.loads(search.stdout)["results"]]
    assert titles == ["Beta"]


def test_watch_json_lines_report_deletions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def delete_note(folder: Path) -> None:
        (folder / "a.md").unlink()

    stdout, stderr, code = run_watch(tmp_path, monkeypatch, delete_note, "--json", "--kb", "w")
    assert code == 0 and stderr == ""
    reports = [json.loads(line) for line in stdout.splitlines()]
    assert reports[0]["processed"] == 1 and reports[0]["kb"] == "w"
    assert any(report["removed"] == 1 for report in reports[1:])


def test_watch_missing_path_exits_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_module.cli, ["--data-dir", str(tmp_path / "data"), "watch", str(tmp_path / "nope")]
    )
    assert result.exit_code == 1
    assert "no such file or directory" in result.stderr
