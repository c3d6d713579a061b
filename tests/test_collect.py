"""collect_knowledge, sync and knowledge bases: folders in, reports out, nothing lost."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from files import bump_mtime, write

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.errors import ConfigError, IngestError, NotFoundError
from knowledge_agent.ingest import CollectProgress, CollectReport, FileIssue, WalkOptions
from knowledge_agent.ingest import report as report_module
from knowledge_agent.ingest.report import skip_kind

DEPLOY = """# Deploy guide

## Rolling restart

Drain each node with the drain-node script before restarting the service. Wait for the
health check to report green, then move on to the next node in the pool.

## Rollback

Re-point the release symlink at the previous build and restart the workers.
"""

DISK = """# Disk full on the database host

Find the largest tables with pg_total_relation_size and vacuum the bloated ones. If the
write-ahead log volume is full, archive old segments before anything else.
"""

CODE = '''"""Billing helpers."""


def compute_invoice_total(lines, tax_rate):
    """Sum the invoice lines and add tax."""
    subtotal = sum(line.amount for line in lines)
    return subtotal * (1 + tax_rate)
'''


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root / "guides" / "deploy.md", DEPLOY)
    write(root / "runbooks" / "disk-full.md", DISK)
    write(root / "src" / "billing.py", CODE)
    write(root / "notes.txt", "Quarterly planning notes: hire two SREs and retire the VPN.\n")
    return root


def titles(results) -> list[str]:
    return [result.item.title for result in results]


def test_folder_ingest_indexes_every_file_with_structure(core: KnowledgeAgentCore, tree: Path):
    report = core.collect_knowledge(tree, kb="ops")
    assert (report.processed, report.unchanged, report.removed) == (4, 0, 0)
    assert report.failed == [] and report.skipped == []
    assert report.chunks_added == core.storage.count_chunks(kb="ops") > 4
    assert report.bytes_processed == sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())

    top = core.search("drain node before restart", kb="ops")[0]
    assert top.item.title == "Deploy guide"
    assert top.item.source_uri == str(tree / "guides" / "deploy.md")
    assert top.item.doc_type == "guide"
    assert top.item.metadata["relative_path"] == "guides/deploy.md"
    assert top.matched_chunks[0].heading == "Deploy guide > Rolling restart"

    runbook = core.search("write-ahead log volume full", kb="ops")[0]
    assert runbook.item.doc_type == "runbook"
    assert core.search("vacuum bloated tables", doc_type="guide") == []

    code = core.search("compute_invoice_total", kb="ops")[0]
    assert code.item.source_type == "code" and code.item.language == "python"
    assert "def compute_invoice_total" in code.matched_chunks[0].content


def test_rerun_processes_nothing_and_changes_are_incremental(core, tree):
    first = core.collect_knowledge(tree)
    again = core.collect_knowledge(tree)
    assert (again.processed, again.unchanged, again.removed) == (0, 4, 0)
    assert again.chunks_added == again.chunks_removed == 0

    deploy = tree / "guides" / "deploy.md"
    old_id = core.search("drain node")[0].item.id
    write(deploy, DEPLOY.replace("drain-node script", "cordon-and-drain tool"))
    bump_mtime(deploy)
    changed = core.collect_knowledge(tree)
    assert (changed.processed, changed.unchanged) == (1, 3)
    assert changed.chunks_removed > 0 and changed.chunks_added > 0
    hit = core.search("cordon-and-drain tool")[0]
    assert hit.item.id == old_id  # the item keeps its id across edits
    stale = core.search("drain-node script")
    assert all("drain-node script" not in c.content for r in stale for c in r.matched_chunks)

    (tree / "notes.txt").unlink()
    removed = core.collect_knowledge(tree)
    assert (removed.processed, removed.removed) == (0, 1)
    assert core.search("quarterly planning retire VPN") == []
    assert core.storage.count_items() == first.processed - 1


def test_touched_but_identical_file_is_not_reprocessed(core, tree):
    core.collect_knowledge(tree)
    bump_mtime(tree / "notes.txt")
    report = core.collect_knowledge(tree)
    assert (report.processed, report.unchanged) == (0, 4)
    # The new mtime was recorded: the next run does not even hash the file.
    record = core.storage.sources.get_source("default", str(tree / "notes.txt"))
    assert record is not None and record.mtime_ns == (tree / "notes.txt").stat().st_mtime_ns


def test_full_rerun_reprocesses_everything(core, tree):
    core.collect_knowledge(tree)
    assert core.collect_knowledge(tree, full=True).processed == 4


def test_bad_files_are_reported_and_the_rest_is_indexed(core, tree):
    write(tree / "logo.dat", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    write(tree / "photo.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)  # never walked
    write(tree / "empty.md", b"")
    write(tree / "latin1.txt", "Caf\xe9 cr\xe8me recipe with espresso".encode("latin-1"))
    write(tree / "broken.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog")
    write(tree / "huge.log", "x" * 3000)
    options = WalkOptions(max_file_size=2000)
    report = core.collect_knowledge(tree, walk_options=options)

    assert report.processed == 5  # the four good files and the latin-1 text
    skipped = {Path(issue.path).name: issue.reason for issue in report.skipped}
    assert set(skipped) == {"logo.dat", "empty.md", "huge.log"}
    assert "binary" in skipped["logo.dat"]
    assert "empty" in skipped["empty.md"]
    assert skipped["huge.log"] == "2.9 KB is over the 2.0 KB limit"
    assert [Path(issue.path).name for issue in report.failed] == ["broken.pdf"]
    assert "PDF" in report.failed[0].reason
    assert core.search("espresso recipe")[0].item.source_uri == str(tree / "latin1.txt")

    # Unchanged bad files are not retried as new work; a failed one is retried.
    again = core.collect_knowledge(tree, walk_options=options)
    assert again.processed == 0
    assert [Path(issue.path).name for issue in again.failed] == ["broken.pdf"]


def test_skipped_files_are_summarised_by_kind_and_reason(core, tree):
    for index in range(3):
        write(tree / "img" / f"shot{index}.png", b"\x89PNG\r\n\x1a\n")
    write(tree / "img" / "logo.svg", "<svg/>")
    write(tree / "fonts" / "inter.woff2", b"wOF2")
    write(tree / "blob.dat", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    write(tree / "empty.md", b"")
    write(tree / "huge.log", "x" * 3000)
    write(tree / "bigger.log", "x" * 4000)
    report = core.collect_knowledge(tree, walk_options=WalkOptions(max_file_size=2000))

    assert report.processed == 4
    assert len(report.skipped) == 4 and report.not_text.count == 5
    assert report.skipped_count == 9
    assert sorted(Path(path).name for path, _ in report.not_text.paths) == [
        "inter.woff2", "logo.svg", "shot0.png", "shot1.png", "shot2.png"
    ]  # fmt: skip
    summary = {(g.kind, g.reason): (g.count, dict(g.extensions)) for g in report.skip_summary()}
    assert summary == {
        ("image", "not text"): (4, {"png": 3, "svg": 1}),
        ("font", "not text"): (1, {"woff2": 1}),
        ("too large", "over the 2.0 KB limit"): (2, {"log": 2}),
        ("binary", "binary file"): (1, {"dat": 1}),
        ("empty", "empty file"): (1, {"md": 1}),
    }
    groups = report.skip_summary()
    assert [group.kind for group in groups][:2] == ["image", "too large"]  # biggest first
    assert {Path(path).name for path in groups[1].paths} == {"huge.log", "bigger.log"}

    data = report.to_dict()
    assert data["skipped_summary"]["total"] == 9
    assert data["skipped_summary"]["groups"][0] == {
        "kind": "image",
        "reason": "not text",
        "count": 4,
        "extensions": {"png": 3, "svg": 1},
    }
    assert len(data["skipped"]) == 4  # the files the collector read, one by one

    # Not-text and oversized files are reported on every run; the files read are unchanged.
    again = core.collect_knowledge(tree, walk_options=WalkOptions(max_file_size=2000))
    assert (again.unchanged, len(again.skipped), again.not_text.count) == (6, 2, 5)
    assert core.collect_knowledge(tree, include=["*.md"]).not_text.count == 0


def test_not_text_counts_stay_complete_while_their_paths_are_bounded(monkeypatch):
    monkeypatch.setattr(report_module, "MAX_KEPT_PATHS", 3)
    monkeypatch.setattr(report_module, "MAX_EXTENSIONS", 2)
    first, second = CollectReport(kb="a"), CollectReport(kb="a")
    for index in range(4):
        first.not_text.add(f"/r/img/{index}.png", "image")
    first.not_text.add("/r/img/x.gif", "image")
    first.not_text.add("/r/img/y.tif", "image")  # a third extension: counted under ""
    second.not_text.add("/s/font.ttf", "font")
    second.skipped.append(FileIssue("/s/blob.bin", "binary file"))
    first.merge(second)

    assert first.not_text.count == 7 and len(first.not_text.paths) == 3
    assert first.not_text.dropped == 4 and first.skipped_count == 8
    groups = {group.kind: group for group in first.skip_summary()}
    assert dict(groups["image"].extensions) == {"png": 4, "gif": 1, "": 1}
    assert groups["image"].count == 6 and groups["font"].count == 1
    assert groups["image"].paths == ()  # not all kept: no partial list poses as complete
    assert groups["binary"].paths == ("/s/blob.bin",)


def test_skip_kinds_come_from_the_reasons():
    assert skip_kind("binary file") == "binary"
    assert skip_kind("empty file") == "empty"
    assert skip_kind("unrecognised text encoding: NUL bytes") == "encoding"
    assert skip_kind("no extractable text (scanned PDF?)") == "no text"
    assert skip_kind("2.9 KB is over the 2.0 KB limit") == "too large"
    assert skip_kind("something new") == "other"
    assert FileIssue("/a", "whatever", "too large").kind == "too large"


def test_a_file_that_becomes_binary_loses_its_item(core, tree):
    core.collect_knowledge(tree)
    notes = tree / "notes.txt"
    write(notes, b"\x00\x01\x02" * 100)
    bump_mtime(notes)
    report = core.collect_knowledge(tree)
    assert [Path(issue.path).name for issue in report.skipped] == ["notes.txt"]
    assert report.chunks_removed == 1
    assert core.search("quarterly planning") == []


def test_gitignore_and_excludes_keep_files_out(core, tree):
    write(tree / ".gitignore", "drafts/\n*.tmp\n")
    write(tree / "drafts" / "idea.md", "# Idea\n\nA secret zeppelin plan.\n")
    write(tree / "scratch.tmp", "zeppelin scratch\n")
    write(tree / "node_modules" / "lib" / "readme.md", "zeppelin vendored\n")
    write(tree / "archive" / "old.md", "# Old\n\nzeppelin archive\n")
    report = core.collect_knowledge(tree, exclude=["archive/"])
    assert report.processed == 4
    assert core.search("zeppelin") == []


def test_include_globs_limit_the_walk(core, tree):
    report = core.collect_knowledge(tree, include=["*.md"])
    assert report.processed == 2
    assert {r.item.source_type for r in core.search("the", limit=10)} <= {"markdown"}


def test_knowledge_bases_scope_search_and_can_be_removed(core, tree, tmp_path):
    other = tmp_path / "hr"
    write(other / "leave.md", "# Leave policy\n\nRequest parental leave through the HR portal.\n")
    core.collect_knowledge(tree, kb="ops")
    core.collect_knowledge(other, kb="hr")
    core.describe_kb("hr", "People policies")

    assert titles(core.search("leave portal", kb="hr")) == ["Leave policy"]
    assert core.search("leave portal", kb="ops") == []
    assert len(core.search("leave drain", kb=["ops", "hr"], limit=10)) >= 2

    kbs = {info.name: info for info in core.list_kbs()}
    assert set(kbs) == {"ops", "hr"}
    assert kbs["hr"].description == "People policies"
    assert (kbs["ops"].items, kbs["ops"].sources) == (4, 4)
    assert kbs["ops"].roots == [str(tree)]
    assert kbs["ops"].chunks == core.storage.count_chunks(kb="ops")

    assert core.remove_kb("ops") == 4
    assert core.search("drain node") == []
    assert [info.name for info in core.list_kbs()] == ["hr"]
    with pytest.raises(NotFoundError):
        core.remove_kb("ops")


def test_create_kb_validates_and_refuses_duplicates(core):
    info = core.create_kb("team-a", "Team A's notes")
    assert (info.name, info.description, info.items) == ("team-a", "Team A's notes", 0)
    with pytest.raises(ConfigError, match="already exists"):
        core.create_kb("team-a")
    for bad in ("", "a/b", "../x", " x", "x" * 65, 3):
        with pytest.raises(ConfigError):
            core.create_kb(bad)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        core.get_kb("nope")


def test_sync_rescans_every_root(core, tree, tmp_path):
    single = write(tmp_path / "standalone.md", "# Standalone\n\nA lone page about gardening.\n")
    core.collect_knowledge(tree)
    core.collect_knowledge(single)
    write(tree / "new.md", "# New\n\nFresh page about kayaking.\n")
    single.unlink()

    report = core.sync()
    assert (report.processed, report.removed, report.unchanged) == (1, 1, 4)
    assert titles(core.search("kayaking")) == ["New"]
    assert core.search("gardening") == []
    assert [root.root for root in core.storage.sources.get_roots()] == [str(tree)]

    moved = tmp_path / "moved"
    tree.rename(moved)
    report = core.sync()
    assert [issue.path for issue in report.failed] == [str(tree)]
    assert core.search("kayaking") != []  # an unmounted folder does not empty the kb
    with pytest.raises(NotFoundError):
        core.sync(kb="nope")


def test_sources_and_roots_survive_reopening(data_dir, tree):
    with KnowledgeAgentCore(data_dir, workers=1) as core:
        core.collect_knowledge(tree, kb="ops", exclude=["src/"])
    with KnowledgeAgentCore(data_dir, workers=1) as core:
        report = core.sync()
        assert (report.processed, report.unchanged) == (0, 3)
        assert titles(core.search("drain node"))[0] == "Deploy guide"


def test_text_and_missing_paths(core, tmp_path):
    report = core.collect_knowledge("Remember to rotate the API keys every quarter.")
    assert report.processed == 1 and report.item_ids
    assert core.get_item(report.item_ids[0]).content.startswith("Remember")
    with pytest.raises(IngestError, match="no such file"):
        core.collect_knowledge(tmp_path / "absent")
    with pytest.raises(IngestError, match="no such file"):
        core.collect_knowledge("docs/absent.md")


def test_progress_reports_every_file(core, tree):
    events: list[CollectProgress] = []
    core.collect_knowledge(tree, progress=events.append)
    files = [event for event in events if event.status != "indexing"]
    assert [event.done for event in files] == [1, 2, 3, 4]
    assert {event.total for event in files} == {4}
    assert files[-1].bytes_done == files[-1].bytes_total > 0
    assert {event.status for event in files} == {"processed"}
    chunks = core.storage.count_chunks()
    assert [(e.status, e.done, e.total) for e in events[4:]] == [("indexing", chunks, chunks)]
    events.clear()
    core.collect_knowledge(tree, progress=events.append)
    assert {event.status for event in events} == {"unchanged"}


def test_worker_processes_give_the_same_result(tmp_path):
    root = tmp_path / "many"
    for index in range(40):
        write(
            root / f"page{index:02}.md",
            f"# Page {index}\n\nTopic number {index} is walrus{index}.\n",
        )
    with KnowledgeAgentCore(workers=2) as parallel, KnowledgeAgentCore(workers=1) as serial:
        a = parallel.collect_knowledge(root)
        b = serial.collect_knowledge(root)
        assert a.processed == b.processed == 40
        found = titles(parallel.search("walrus17"))
        assert found == titles(serial.search("walrus17"))
        assert found[0] == "Page 17"


@pytest.mark.parametrize("backend", ["polling", "watchdog"])
def test_watch_makes_new_files_searchable(core, tree, backend):
    updated = threading.Event()
    reports = []

    def on_report(report):
        reports.append(report)
        updated.set()

    watcher = core.watch([tree], debounce=0.2, backend=backend, on_report=on_report)
    try:
        assert core.storage.count_items() == 4  # collected before watching
        write(tree / "incident.md", "# Incident\n\nThe flux capacitor overheated at noon.\n")
        assert updated.wait(15)
        assert titles(core.search("flux capacitor")) == ["Incident"]

        updated.clear()
        (tree / "notes.txt").unlink()
        assert updated.wait(15)
        assert core.search("quarterly planning retire VPN") == []
        assert sum(report.removed for report in reports) == 1
    finally:
        watcher.stop()


def test_watch_refuses_missing_paths(core, tree):
    with pytest.raises(IngestError, match="no such file"):
        core.watch([tree / "absent"])
    assert core.storage.count_items() == 0


def test_a_knowledge_base_inside_the_folder_does_not_index_itself(tree):
    with KnowledgeAgentCore(tree / "kb-data", workers=1) as core:
        first = core.collect_knowledge(tree)
        assert first.processed == 4 and not first.skipped
        assert core.sync().processed == 0
        assert all("kb-data" not in (item.source_uri or "") for item in core.list_items())


def test_a_file_collected_again_on_its_own_keeps_one_item(core, tree):
    core.collect_knowledge(tree)
    deploy = tree / "guides" / "deploy.md"
    again = core.collect_knowledge(deploy)
    assert (again.processed, again.unchanged) == (0, 1)
    assert len(core.items_at(deploy)) == 1
    assert core.storage.count_items() == 4


def test_remove_source_forgets_a_root_a_subfolder_or_a_file(core, tree):
    core.collect_knowledge(tree)
    assert core.remove_source(tree / "guides" / "deploy.md") == 1
    assert core.remove_source(tree / "runbooks") == 1  # a folder inside the root
    assert core.storage.count_items() == 2
    with pytest.raises(NotFoundError):
        core.remove_source(tree / "absent.md")
    assert core.sync().processed == 2  # still under the root: sync brings them back
    assert core.remove_source(tree) == 4  # the root itself: forgotten for good
    assert core.storage.sources.get_roots() == [] and core.storage.count_items() == 0
    assert core.sync().processed == 0


# -- intro.md: the knowledge base's description ------------------------------------------------

INTRO = "Runbooks and guides of the platform team (codename osprey)."


def test_intro_md_at_the_root_is_the_description_and_not_a_document(core, tree):
    write(tree / "intro.md", f"\ufeff{INTRO}\n\n")

    report = core.collect_knowledge(tree, kb="ops")

    assert core.get_kb("ops").description == INTRO
    # Counted as processed (it was read and applied), but it is no item.
    assert (report.processed, len(report.item_ids)) == (5, 4)
    assert report.chunks_added == core.storage.count_chunks(kb="ops")
    assert core.items_at(tree / "intro.md") == [] and core.storage.count_items() == 4
    assert core.text_search("osprey", kb="ops") == []
    assert core.get_kb("ops").sources == 5  # tracked like any file
    assert report.to_dict()["processed"] == 5


def test_a_changed_intro_md_updates_the_description_and_a_removed_one_clears_it(core, tree):
    intro = write(tree / "intro.md", INTRO)
    core.collect_knowledge(tree, kb="ops")

    again = core.collect_knowledge(tree, kb="ops")
    assert (again.processed, again.unchanged) == (0, 5)
    bump_mtime(intro)  # touched, not changed
    touched = core.collect_knowledge(tree, kb="ops")
    assert (touched.processed, touched.unchanged) == (0, 5)

    write(intro, "Only the deploy guide matters now.")
    bump_mtime(intro)
    changed = core.collect_knowledge(tree, kb="ops")
    assert (changed.processed, changed.unchanged) == (1, 4)
    assert core.get_kb("ops").description == "Only the deploy guide matters now."

    intro.unlink()
    removed = core.collect_knowledge(tree, kb="ops")
    assert (removed.processed, removed.removed, removed.chunks_removed) == (0, 1, 0)
    assert core.get_kb("ops").description == ""
    assert core.storage.count_items() == 4  # the documents stay


def test_a_description_set_by_hand_stays_without_an_intro_md(core, tree):
    core.collect_knowledge(tree, kb="ops")
    core.describe_kb("ops", "Set by hand.")
    core.collect_knowledge(tree, kb="ops")
    assert core.get_kb("ops").description == "Set by hand."


def test_intro_md_below_the_root_is_an_ordinary_document(core, tree):
    write(tree / "guides" / "intro.md", "# Guides\n\nHow the guides are written (osprey).\n")
    report = core.collect_knowledge(tree, kb="ops")
    assert (report.processed, len(report.item_ids)) == (5, 5)
    assert core.get_kb("ops").description == ""
    assert len(core.text_search("osprey", kb="ops")) == 1


def test_an_intro_md_indexed_as_a_document_before_becomes_the_intro(core, tree):
    # Collecting the parent first tracks tree/intro.md as a document of that root.
    write(tree / "intro.md", INTRO)
    core.collect_knowledge(tree.parent, kb="ops")
    assert len(core.items_at(tree / "intro.md")) == 1

    report = core.collect_knowledge(tree, kb="ops")

    assert core.get_kb("ops").description == INTRO
    assert core.items_at(tree / "intro.md") == [] and core.text_search("osprey") == []
    assert report.processed == 1 and report.chunks_removed > 0


def test_the_watcher_path_applies_intro_md_changes(core, tree):
    core.collect_knowledge(tree, kb="ops")
    root = str(tree)
    options = WalkOptions()
    intro = write(tree / "intro.md", INTRO)

    with core.batch():
        added = core.collector.apply_changes("ops", root, options, [intro], [])
    assert added.processed == 1 and added.item_ids == []
    assert core.get_kb("ops").description == INTRO

    intro.unlink()
    with core.batch():
        gone = core.collector.apply_changes("ops", root, options, [], [intro])
    assert gone.removed == 1 and core.get_kb("ops").description == ""


def test_progress_counts_intro_md(core, tree):
    write(tree / "intro.md", INTRO)
    events: list[CollectProgress] = []
    core.collect_knowledge(tree, progress=events.append)
    files = [event for event in events if event.status != "indexing"]
    assert len(files) == 5 and files[-1].done == files[-1].total == 5
    assert (files[0].path, files[0].status) == (str(tree / "intro.md"), "processed")


def test_a_table_of_contents_is_doc_type_index_wherever_it_is() -> None:
    from knowledge_agent.ingest.doc_types import doc_type_for

    assert doc_type_for("guides/INDEX.md") == "index"
    assert doc_type_for("adr/index.md", "docs") == "index"
    assert doc_type_for("guides/setup.md") == "guide"
    assert doc_type_for("notes/indexing.md") == ""


def test_common_documentation_folders_have_doc_types() -> None:
    from knowledge_agent.ingest.doc_types import doc_type_for

    assert doc_type_for("docs/tutorial/first-steps.md") == "guide"
    assert doc_type_for("docs/how-to/deploy.md") == "guide"
    assert doc_type_for("docs/reference/api.md") == "reference"
    assert doc_type_for("api/client.md") == "reference"
    assert doc_type_for("faq/billing.md") == "faq"
    assert doc_type_for("changelog/2026.md") == "changelog"


# -- links leaving the collected folder ------------------------------------------------------


def link_tree(tmp_path: Path, tree: Path) -> Path:
    """``tree`` with two links to a private folder outside it and one link inside it."""
    private = tmp_path / "private"
    write(private / "ssh" / "config", "Host bastion\n  IdentityFile walrus-key\n")
    write(private / "diary.md", "# Diary\n\nThe walrus password is hunter2.\n")
    try:
        (tree / "keys").symlink_to(private / "ssh", target_is_directory=True)
        (tree / "diary.md").symlink_to(private / "diary.md")
        (tree / "guides-again").symlink_to(tree / "guides", target_is_directory=True)
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available")
    return private


def test_links_leaving_the_folder_are_counted_and_never_read(core, tree, tmp_path):
    link_tree(tmp_path, tree)
    report = core.collect_knowledge(tree, kb="ops")
    assert report.processed == 4  # the inside link adds nothing: each real file once
    assert core.search("walrus password hunter2") == []
    assert core.search("bastion IdentityFile") == []
    groups = {(group.kind, group.reason): group for group in report.skip_summary()}
    links = groups[("link outside", "link leaving the folder")]
    assert links.count == 2
    assert sorted(links.paths) == [str(tree / "diary.md"), str(tree / "keys")]
    summary = report.to_dict()["skipped_summary"]
    assert summary["total"] == 2
    assert {key: value for key, value in summary["groups"][0].items() if key != "extensions"} == {
        "kind": "link outside",
        "reason": "link leaving the folder",
        "count": 2,
    }


def test_follow_outside_links_is_kept_with_the_root_for_sync(core, tree, tmp_path):
    link_tree(tmp_path, tree)
    options = WalkOptions(follow_outside_links=True)
    first = core.collect_knowledge(tree, kb="ops", walk_options=options)
    assert first.processed == 6 and first.skipped_count == 0
    assert titles(core.search("walrus password hunter2"))[0] == "Diary"
    [root] = core.storage.sources.get_roots("ops")
    assert root.options["follow_outside_links"] is True
    write(tmp_path / "private" / "later.md", "# Later\n\nA narwhal note written after.\n")
    (tree / "later.md").symlink_to(tmp_path / "private" / "later.md")
    again = core.sync()
    assert again.processed == 1 and titles(core.search("narwhal"))[0] == "Later"


def test_a_root_stored_before_the_outside_rule_syncs_without_leaving(core, tree, tmp_path):
    from knowledge_agent.storage.sources import SourceRoot

    link_tree(tmp_path, tree)
    old_options = {  # every field of WalkOptions then; follow_symlinks was always True
        "include": [],
        "exclude": [],
        "use_default_excludes": True,
        "respect_gitignore": True,
        "include_hidden": False,
        "max_file_size": 20 * 1024 * 1024,
        "follow_symlinks": True,
    }
    core.storage.sources.ensure_kb("ops")
    core.storage.sources.save_root(SourceRoot("ops", str(tree), options=old_options))
    report = core.sync()
    assert report.processed == 4 and report.skipped_count == 2
    assert core.search("walrus password hunter2") == []


def test_the_watcher_does_not_follow_a_link_leaving_the_folder(core, tree, tmp_path):
    private = link_tree(tmp_path, tree)
    updated = threading.Event()
    reports: list[CollectReport] = []

    def on_report(report: CollectReport) -> None:
        reports.append(report)
        updated.set()

    watcher = core.watch([tree], debounce=0.2, backend="polling", on_report=on_report)
    try:
        write(private / "ssh" / "new-key", "walrus-key-two\n")
        write(tree / "marker.md", "# Marker\n\nThe okapi arrived.\n")
        assert updated.wait(15)
        assert titles(core.search("okapi")) == ["Marker"]
        hits = core.search("walrus-key-two", limit=50)
        assert not [hit for hit in hits if "keys" in (hit.item.source_uri or "")]
        collected = core.storage.sources.get_sources("default", str(tree))
        assert str(tree / "marker.md") in collected
        assert not [path for path in collected if path.startswith(str(tree / "keys"))]
    finally:
        watcher.stop()


def test_a_folder_inside_a_collected_root_keeps_its_items_with_one_look_up(
    open_core, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Collecting a subfolder of a root already collected into the same knowledge base finds
    its files' rows under the other root (no second item each), in one look-up for all of
    them, not one per file; a change the watcher reports there keeps the item too."""
    core = open_core(workers=1)
    first = core.collect_knowledge(tree, kb="ops")
    items = {item.source_uri: item.id for item in core.storage.list_items(kb="ops")}
    sources = core.storage.sources
    asked: list[list[str]] = []
    real = sources.get_sources_by_path

    def by_path(kb: str, paths) -> dict:
        asked.append(list(paths))
        return real(kb, asked[-1])

    monkeypatch.setattr(sources, "get_sources_by_path", by_path)
    monkeypatch.setattr(sources, "get_source", lambda *_: pytest.fail("one look-up per file"))
    guides = tree / "guides"
    write(guides / "new.md", "# New\n\nA page about canary releases.\n")
    report = core.collect_knowledge(guides, kb="ops")
    assert (first.processed, report.processed, report.unchanged) == (4, 1, 1)
    assert [sorted(paths) for paths in asked] == [
        [str(guides / "deploy.md"), str(guides / "new.md")]
    ]
    after = {item.source_uri: item.id for item in core.storage.list_items(kb="ops")}
    assert after == {**items, str(guides / "new.md"): after[str(guides / "new.md")]}

    write(guides / "deploy.md", DEPLOY + "\n## Canary\n\nShip to one node first.\n")
    asked.clear()
    changed = core.collector.apply_changes(
        "ops", str(guides), WalkOptions(), [guides / "deploy.md"], []
    )
    assert (changed.processed, asked) == (1, [[str(guides / "deploy.md")]])
    assert (
        core.storage.items_with_source(str(guides / "deploy.md"), kb="ops")[0].id
        == (items[str(guides / "deploy.md")])
    )
