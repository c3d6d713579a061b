"""A folder in a git work tree: commit, branch and commit dates recorded; a sync reads only
the files git lists as changed, and walks the folder when git cannot tell.

Every repository here is a real one made with the ``git`` executable (``git_work_tree.py``),
its commits dated with GIT_AUTHOR_DATE and GIT_COMMITTER_DATE.
"""

from __future__ import annotations

import json
import logging
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from files import bump_mtime
from git_work_tree import WorkTree, requires_git
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_agent import KnowledgeAgentCore, KnowledgeItem, SearchResult
from knowledge_agent.cli import cli
from knowledge_agent.errors import IngestError
from knowledge_agent.ingest import collector

pytestmark = requires_git

OLD = datetime(2020, 1, 1, 12, 0, tzinfo=timezone.utc)
NEW = datetime(2021, 6, 1, 12, 0, tzinfo=timezone.utc)
MIDDLE = datetime(2020, 12, 1, tzinfo=timezone.utc)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KnowledgeAgentCore]:
    """A core on a data folder, then on a PostgreSQL database (files read in this process)."""
    if request.param == "sqlite":
        with KnowledgeAgentCore(tmp_path / "data", workers=1) as core:
            yield core
    else:
        url = request.getfixturevalue("postgres_url")
        with KnowledgeAgentCore(backend=url, workers=1) as core:
            yield core


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the collector reads from now on, in order."""
    seen: list[str] = []
    extract = collector._extract

    def counted(job: collector._Job) -> collector._Outcome:
        seen.append(Path(job.path).name)
        return extract(job)

    monkeypatch.setattr(collector, "_extract", counted)
    return seen


def items_by_name(core: KnowledgeAgentCore, kb: str = "docs") -> dict[str, KnowledgeItem]:
    return {Path(item.source_uri or "").name: item for item in core.list_items(kb=kb, limit=500)}


def git_state(core: KnowledgeAgentCore, kb: str = "docs") -> dict[str, object]:
    [root] = core.storage.sources.get_roots(kb)
    state = root.options["git"]
    assert isinstance(state, dict)
    return state


def names(results: list[SearchResult]) -> set[str]:
    return {Path(result.item.source_uri or "").name for result in results}


def test_add_records_commit_and_branch_and_dates_each_file_by_its_last_commit(
    tmp_path: Path, any_core: KnowledgeAgentCore
) -> None:
    tree = WorkTree(tmp_path / "repo", branch="handbook")
    tree.write("guide.md", "# Guide\n\nThe tide ferry leaves at noon.\n")
    tree.write("deploy.md", "# Deploy\n\nAt low tide, roll back with the revert script.\n")
    first = tree.commit("first", OLD)
    tree.write("deploy.md", "# Deploy\n\nAt low tide, roll back, then page the on-call.\n")
    second = tree.commit("second", NEW)
    tree.write("draft.md", "# Draft\n\nAn untracked note on the tide tables.\n")

    any_core.collect_knowledge(tree.path, kb="docs")

    state = git_state(any_core)
    assert (state["commit"], state["branch"], state["differing"]) == (
        second,
        "handbook",
        ["draft.md"],
    )
    items = items_by_name(any_core)
    guide, deploy, draft = items["guide.md"], items["deploy.md"], items["draft.md"]
    assert guide.updated_at == OLD and guide.metadata["git_commit"] == first
    assert deploy.updated_at == NEW and deploy.metadata["git_commit"] == second
    assert deploy.metadata["git_committed_at"] == NEW.isoformat()
    # Not committed: dated when collected, as a file of a plain folder.
    assert "git_commit" not in draft.metadata and draft.updated_at > NEW
    # The date filters select by the commit dates.
    assert names(any_core.search("tide", updated_before=MIDDLE)) == {"guide.md"}
    assert names(
        any_core.search("tide", updated_after=MIDDLE, updated_before=NEW + timedelta(days=1))
    ) == {"deploy.md"}


def test_a_sync_reads_exactly_the_files_git_lists_as_changed(
    tmp_path: Path, any_core: KnowledgeAgentCore, reads: list[str]
) -> None:
    tree = WorkTree(tmp_path / "repo")
    for name in ("keep", "edit", "move", "gone", "dirty"):
        tree.write(f"{name}.md", f"# {name.title()}\n\nThe {name} page of the handbook.\n")
    tree.commit("first", OLD)
    any_core.collect_knowledge(tree.path, kb="docs")
    reads.clear()

    tree.write("edit.md", "# Edit\n\nThe edited page names the quokka.\n")
    tree.git("mv", "move.md", "moved.md")
    tree.git("rm", "-q", "gone.md")
    second = tree.commit("second", NEW)
    tree.write("dirty.md", "# Dirty\n\nAn edit not committed names the wombat.\n")
    tree.write("fresh.md", "# Fresh\n\nAn untracked page names the numbat.\n")
    bump_mtime(tree.path / "keep.md")  # a walk would read it again; git knows it is the same

    report = any_core.sync(kb="docs")

    assert sorted(reads) == ["dirty.md", "edit.md", "fresh.md", "moved.md"]
    assert (report.processed, report.removed, report.unchanged) == (4, 2, 0)
    items = items_by_name(any_core)
    assert set(items) == {"keep.md", "edit.md", "moved.md", "dirty.md", "fresh.md"}
    assert items["edit.md"].metadata["git_commit"] == second
    assert items["moved.md"].updated_at == NEW and items["keep.md"].updated_at == OLD
    assert "git_commit" not in items["dirty.md"].metadata
    for word, name in (("quokka", "edit.md"), ("wombat", "dirty.md"), ("numbat", "fresh.md")):
        assert names(any_core.search(word, limit=1)) == {name}
    state = git_state(any_core)
    assert state["commit"] == second and state["differing"] == ["dirty.md", "fresh.md"]

    reads.clear()
    again = any_core.sync(kb="docs")
    # What differed last time is looked at again (it may have been undone): the same size
    # and time, so not read.
    assert reads == [] and again.unchanged == 2 and again.processed == 0


def test_an_edit_undone_is_read_again_and_then_left_alone(
    tmp_path: Path, core: KnowledgeAgentCore, reads: list[str]
) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write("note.md", "# Note\n\nThe original text names the heron.\n")
    tree.write("other.md", "# Other\n\nAnother page.\n")
    tree.commit("first", OLD)
    core.collect_knowledge(tree.path, kb="docs")
    tree.write("note.md", "# Note\n\nA passing edit names the egret.\n")
    core.sync()
    assert names(core.search("egret", limit=1)) == {"note.md"}
    reads.clear()

    tree.git("checkout", "--", "note.md")  # neither `git diff` nor `git status` lists it now
    core.sync()

    assert reads == ["note.md"]
    assert names(core.search("heron", limit=1)) == {"note.md"} and not core.search("egret")
    assert items_by_name(core)["note.md"].updated_at == OLD
    reads.clear()
    core.sync()
    assert reads == []


def test_a_commit_gone_after_a_rebase_makes_the_sync_walk_the_folder(
    tmp_path: Path,
    core: KnowledgeAgentCore,
    reads: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write("a.md", "# A\n\nFirst text.\n")
    tree.write("b.md", "# B\n\nUntouched text.\n")
    old = tree.commit("first", OLD)
    core.collect_knowledge(tree.path, kb="docs")
    tree.write("a.md", "# A\n\nRewritten history names the ibis.\n")
    tree.git("commit", "-q", "-a", "--amend", "-m", "rewritten", date=NEW)
    tree.git("reflog", "expire", "--expire=now", "--all")
    tree.git("gc", "-q", "--prune=now")
    with pytest.raises(subprocess.CalledProcessError):  # the recorded commit is gone
        tree.git("cat-file", "-e", f"{old}^{{commit}}")
    bump_mtime(tree.path / "b.md")
    reads.clear()

    with caplog.at_level(logging.INFO, logger="knowledge_agent.ingest.git_sync"):
        report = core.sync()

    assert f"the commit of the last run, {old[:12]}, is gone" in caplog.text
    assert sorted(reads) == ["a.md", "b.md"]  # walked: b.md's new time makes it read again
    assert (report.processed, report.unchanged) == (1, 1)
    assert names(core.search("ibis", limit=1)) == {"a.md"}
    assert git_state(core)["commit"] == tree.head()
    assert items_by_name(core)["a.md"].updated_at == NEW


def test_without_git_the_folder_is_walked_and_that_is_logged(
    tmp_path: Path,
    core: KnowledgeAgentCore,
    monkeypatch: pytest.MonkeyPatch,
    reads: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write("a.md", "# A\n\nThe kestrel page.\n")
    tree.write("b.md", "# B\n\nThe merlin page.\n")
    tree.commit("first", OLD)
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))

    with caplog.at_level(logging.WARNING, logger="knowledge_agent.ingest.git_sync"):
        core.collect_knowledge(tree.path, kb="docs")
        bump_mtime(tree.path / "b.md")
        reads.clear()
        core.sync()

    assert "is in a git work tree but git is not installed: walking it" in caplog.text
    [root] = core.storage.sources.get_roots("docs")
    assert "git" not in root.options
    assert reads == ["b.md"]  # the walk compares times: b.md's changed
    assert all("git_commit" not in item.metadata for item in core.list_items())


def test_the_walks_rules_apply_to_what_git_lists_and_a_gitignore_change_walks(
    tmp_path: Path,
    core: KnowledgeAgentCore,
    reads: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write("docs/guide.md", "# Guide\n\nThe guide.\n")
    tree.write("docs/notes.md", "# Notes\n\nThe notes.\n")
    tree.write("build/out.md", "# Out\n\nBuild output.\n")  # a default exclude
    tree.write(".hidden.md", "# Hidden\n\nA dot-file.\n")
    tree.commit("first", OLD)
    core.collect_knowledge(tree.path, kb="docs")
    assert set(items_by_name(core)) == {"guide.md", "notes.md"}

    tree.write("build/out.md", "# Out\n\nNew build output.\n")
    tree.write(".hidden.md", "# Hidden\n\nStill a dot-file.\n")
    tree.commit("second", NEW)
    reads.clear()
    core.sync()
    assert reads == [] and set(items_by_name(core)) == {"guide.md", "notes.md"}

    tree.write(".gitignore", "notes.md\n")
    tree.commit("ignore the notes", NEW + timedelta(days=1))
    with caplog.at_level(logging.INFO, logger="knowledge_agent.ingest.git_sync"):
        report = core.sync()
    assert "a .gitignore changed; walking the folder" in caplog.text
    assert report.removed == 1 and set(items_by_name(core)) == {"guide.md"}


def test_a_file_that_failed_is_tried_again_by_the_next_sync(
    tmp_path: Path,
    core: KnowledgeAgentCore,
    reads: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write("guide.md", "# Guide\n\nThe guide names the osprey.\n")
    tree.write("other.md", "# Other\n\nAnother page.\n")
    tree.commit("first", OLD)
    process = collector.process_bytes

    def passing_failure(data: bytes, path: str, config: object) -> object:
        if path.endswith("guide.md"):
            raise IngestError(path, "the disk hiccuped")
        return process(data, path, config)  # type: ignore[arg-type]

    monkeypatch.setattr(collector, "process_bytes", passing_failure)
    assert core.collect_knowledge(tree.path, kb="docs").failed
    monkeypatch.setattr(collector, "process_bytes", process)
    reads.clear()

    report = core.sync()

    assert reads == ["guide.md"] and report.processed == 1
    assert names(core.search("osprey", limit=1)) == {"guide.md"}


def test_new_walk_options_walk_the_folder(tmp_path: Path, core: KnowledgeAgentCore) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write("guide.md", "# Guide\n\nThe guide.\n")
    tree.write("drafts/idea.md", "# Idea\n\nA draft.\n")
    tree.commit("first", OLD)
    core.collect_knowledge(tree.path, kb="docs")

    report = core.collect_knowledge(tree.path, kb="docs", exclude=["drafts/"])

    assert report.removed == 1 and set(items_by_name(core)) == {"guide.md"}
    assert git_state(core)["commit"] == tree.head()


def test_a_folder_below_the_top_sees_changes_to_files_ignored_above_it(
    tmp_path: Path, core: KnowledgeAgentCore, reads: list[str]
) -> None:
    tree = WorkTree(tmp_path / "repo")
    tree.write(".gitignore", "*.log\n")
    tree.write("docs/guide.md", "# Guide\n\nThe guide.\n")
    tree.commit("first", OLD)
    log = tree.write("docs/run.log", "started the pump\n")
    # The walk reads the .gitignore files in the folder collected, not those above it.
    core.collect_knowledge(tree.path / "docs", kb="docs")
    assert set(items_by_name(core)) == {"guide.md", "run.log"}
    reads.clear()

    log.write_text("started the pump\nstopped the pump\n", encoding="utf-8")
    core.sync()

    assert reads == ["run.log"]
    assert names(core.search("stopped", limit=1)) == {"run.log"}


def test_sources_shows_the_branch_and_commit_of_a_folder_in_a_work_tree(tmp_path: Path) -> None:
    tree = WorkTree(tmp_path / "repo", branch="docs")
    tree.write("guide.md", "# Guide\n\nThe guide.\n")
    commit = tree.commit("first", OLD)
    runner = CliRunner()
    base = ["--data-dir", str(tmp_path / "data")]
    assert runner.invoke(cli, [*base, "add", str(tree.path)]).exit_code == 0

    listed = json.loads(runner.invoke(cli, [*base, "sources", "--json"]).output)
    table = runner.invoke(cli, [*base, "sources"]).output

    assert listed["folders"][0]["git"] == {"branch": "docs", "commit": commit}
    assert f"git docs@{commit[:8]}" in table


# -- the invariant: asking git indexes what a walk would ------------------------------------

_FILES = ("a.md", "b.md", "sub/c.md", "sub/d.md")
_OPERATIONS = st.sampled_from(["edit", "delete", "rename", "untracked", "commit", "revert", "sync"])


def _apply(tree: WorkTree, operation: str, number: int, step: int) -> None:
    name = _FILES[number % len(_FILES)]
    path = tree.path / name
    if operation == "edit":
        tree.write(name, f"# Page\n\nVersion {step} of {name}.\n")
    elif operation == "delete" and path.exists():
        path.unlink()
    elif operation == "rename" and path.exists():
        path.rename(path.with_name(f"renamed{step}.md"))
    elif operation == "untracked":
        tree.write(f"new{step}.md", f"# New\n\nUntracked page {step}.\n")
    elif operation == "commit":
        tree.git("add", "-A")
        tree.git(
            "commit", "-q", "--allow-empty", "-m", f"step {step}", date=OLD + timedelta(days=step)
        )
    elif operation == "revert":
        tree.git("checkout", "--", ".")


def _contents(core: KnowledgeAgentCore) -> set[tuple[str | None, str]]:
    return {(item.source_uri, item.content) for item in core.list_items(limit=500)}


@settings(
    max_examples=15,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(st.tuples(_OPERATIONS, st.integers(0, 3)), min_size=1, max_size=8))
def test_syncing_through_git_indexes_what_a_walk_of_the_folder_would(
    steps: list[tuple[str, int]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        tree = WorkTree(Path(folder) / "repo")
        for name in _FILES:
            tree.write(name, f"# Page\n\nFirst version of {name}.\n")
        tree.commit("first", OLD)
        with KnowledgeAgentCore(workers=1) as synced:
            synced.collect_knowledge(tree.path)
            for step, (operation, number) in enumerate(steps, start=1):
                if operation == "sync":
                    synced.sync()
                else:
                    _apply(tree, operation, number, step)
            synced.sync()
            with KnowledgeAgentCore(workers=1) as walked:
                walked.collect_knowledge(tree.path)  # nothing recorded yet: a walk
                assert _contents(synced) == _contents(walked)
