"""``search --files``: one line per path, as many paths as asked for, when several
knowledge bases hold the same files."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from files import write

from knowledge_agent.cli import cli
from knowledge_agent.cli_formats import distinct_paths


def test_files_are_distinct_and_as_many_as_asked_when_two_kbs_hold_the_same_pages(
    tmp_path: Path,
) -> None:
    for number in range(5):  # the lower the number, the better the page matches
        text = " ".join(["tide"] * (6 - number) + ["table", str(number)] + ["filler"] * number)
        write(tmp_path / "docs" / f"page{number}.md", f"# Page {number}\n\n{text}.\n")
    runner = CliRunner()
    base = ["--data-dir", str(tmp_path / "data")]
    for kb in ("first", "second"):
        assert runner.invoke(cli, [*base, "add", str(tmp_path / "docs"), "--kb", kb]).exit_code == 0

    every = runner.invoke(cli, [*base, "search", "tide table", "--all", "--json"])
    shown = runner.invoke(cli, [*base, "search", "tide table", "--files", "-n", "3"])

    assert every.output.count('"path"') >= 10  # each page found in both knowledge bases
    lines = shown.output.splitlines()
    assert len(lines) == len(set(lines)) == 3
    assert [Path(line).name for line in lines] == ["page0.md", "page1.md", "page2.md"]


def test_distinct_paths_asks_for_more_only_while_paths_repeat() -> None:
    class Item:
        def __init__(self, path: str) -> None:
            self.source_uri, self.title, self.id = path, "", path

    class Result:
        def __init__(self, path: str) -> None:
            self.item = Item(path)

    ranked = [Result(path) for path in "aabbbbbbbbcdd"]
    asked: list[int] = []

    def search(limit: int) -> list[Result]:
        asked.append(limit)
        return ranked[:limit]

    found = distinct_paths(search, 3)  # type: ignore[arg-type]
    assert [result.item.source_uri for result in found] == ["a", "b", "c"] and asked == [3, 12]
    asked.clear()
    assert len(distinct_paths(search, 9)) == 4 and asked == [9, 36]  # it ran out: 4 paths
