"""The installed ``knowledge-agent`` command, run as a user runs it: the console script of this
environment in a child process (the other CLI tests use click's runner in-process)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from files import write

SCRIPT = Path(sys.executable).with_name(
    "knowledge-agent.exe" if sys.platform == "win32" else "knowledge-agent"
)

GUIDE = """# Deploy guide

## Rolling back a release

Run `deploy rollback --to previous` and watch the health checks turn green.
"""


def run(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


@pytest.fixture(scope="module")
def knowledge(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A data dir holding a small guide and one very long release-notes file."""
    assert SCRIPT.exists(), f"the package's console script is not installed at {SCRIPT}"
    root = tmp_path_factory.mktemp("installed")
    docs = root / "docs"
    write(docs / "guide.md", GUIDE)
    notes = "\n\n".join(f"## Release {n}\n\nFixed rollback bug {n}." for n in range(4000))
    write(docs / "release-notes.md", "# Release notes\n\n" + notes)
    added = run("add", str(docs), data=root / "data")
    assert added.returncode == 0, added.stderr
    return docs, root / "data"


def test_search_answers_in_every_format_and_stays_small(knowledge: tuple[Path, Path]) -> None:
    docs, data = knowledge
    found = run("search", "roll back a release", "--json", "-n", "10", data=data)
    assert found.returncode == 0, found.stderr
    # Passages and item summaries: a 100 KB document does not make the answer 100 KB.
    assert len(found.stdout.encode()) < 50_000
    top = json.loads(found.stdout)["results"][0]
    assert top["path"] == str(docs / "guide.md") and "content" not in top
    best = top["matched_chunks"][0]
    assert best["location"] == f"{docs / 'guide.md'}:{best['start_line']}-{best['end_line']}"
    table = list(
        csv.DictReader(io.StringIO(run("search", "rollback", "--format", "csv", data=data).stdout))
    )
    assert table and table[0]["evidence_ref"].startswith("kb:")
    paths = run("search", "rollback", "--files", "--all", data=data).stdout.splitlines()
    assert sorted(paths) == [str(docs / "guide.md"), str(docs / "release-notes.md")]


def test_reading_lines_and_refs_of_a_collected_file(knowledge: tuple[Path, Path]) -> None:
    docs, data = knowledge
    lines = run("get", f"{docs / 'guide.md'}:3-5", data=data)
    assert lines.returncode == 0 and lines.stdout.splitlines()[0] == "3  ## Rolling back a release"
    found = json.loads(run("search", "health checks", "--json", "-n", "1", data=data).stdout)
    ref = found["results"][0]["matched_chunks"][0]["evidence_ref"]
    cited = run("get", ref, "--json", data=data)
    assert cited.returncode == 0 and json.loads(cited.stdout)["status"] == "unchanged"


def test_mistakes_are_errors_with_the_valid_values(
    knowledge: tuple[Path, Path], tmp_path: Path
) -> None:
    _, data = knowledge
    typo = run("search", "rollback", "--type", "markdwn", data=data)
    assert typo.returncode == 2 and "markdown" in typo.stderr and typo.stdout == ""
    missing = tmp_path / "no-such-kb"
    unknown_dir = run("search", "rollback", data=missing)
    assert unknown_dir.returncode == 1 and not missing.exists()
    module = subprocess.run(
        [sys.executable, "-m", "knowledge_agent", "--version"], capture_output=True, text=True
    )
    assert module.returncode == 0 and module.stdout == run("--version", data=data).stdout
