"""Copying a knowledge base between backends' storages (knowledge_agent.backends.migrate): all of
it goes across, a second run changes nothing, and the copy answers as the original does."""

from __future__ import annotations

from pathlib import Path

from files import write
from web_site import SiteServer, make_doc_site

from knowledge_agent import KnowledgeAgentCore
from knowledge_agent.backends.migrate import copy_storage
from knowledge_agent.protocols import Storage
from knowledge_agent.storage import DATABASE_FILE, SQLiteStorageManager


def everything(storage: Storage) -> dict[str, object]:
    names = storage.sources.kb_names()
    items = {item.id: item for item in storage.iter_items()}
    return {
        "kbs": {name: storage.sources.kb_info(name).description for name in names},  # type: ignore[union-attr]
        "items": items,
        "chunks": {item_id: storage.get_chunks_for_item(item_id) for item_id in items},
        "roots": sorted(storage.sources.get_roots(), key=lambda root: (root.kb, root.root)),
        "sources": {name: storage.sources.get_sources(name) for name in names},
        "doc_sources": sorted(
            storage.doc_sources.get_doc_sources(), key=lambda doc: (doc.kb, doc.url)
        ),
        "pages": {name: storage.doc_sources.get_doc_pages(name) for name in names},
    }


def test_everything_goes_across_once_and_the_copy_answers_the_same(
    tmp_path: Path, server: SiteServer
) -> None:
    notes = tmp_path / "notes"
    write(notes / "deploy.md", "# Deploy\n\nRoll back a release with the revert script.\n")
    write(notes / "cache.md", "# Cache\n\nThe cache keeps pages for max-age seconds.\n")
    site = make_doc_site(server, 12)
    with KnowledgeAgentCore(tmp_path / "from", workers=1) as original:
        original.create_kb("handbook", description="How we work")
        original.collect_knowledge(notes, kb="handbook")
        original.collect_knowledge(site.start_url, kb="web", crawl={"max_depth": 2})
        original.add_text("A note kept by hand about the harbour ferry.", title="Ferry")
        before = everything(original.storage)
        queries = [
            "roll back a release",
            "max-age seconds",
            "harbour ferry",
            site.pages[sorted(site.pages)[3]].words[1],
        ]
        answers = {
            query: [(r.item.id, r.matched_chunks[0].chunk_id) for r in original.search(query)]
            for query in queries
        }
        target_dir = tmp_path / "to"
        target_dir.mkdir()
        progress: list[tuple[int, int]] = []
        with SQLiteStorageManager(target_dir / DATABASE_FILE) as target:
            report = copy_storage(
                original.storage,
                target,
                progress=lambda done, total: progress.append((done, total)),
            )
            assert everything(target) == before
            again = copy_storage(original.storage, target)
            assert everything(target) == before  # a second run replaces, never duplicates
    assert report == again
    counts = report.to_dict()
    assert counts["knowledge_bases"] == 3 and counts["items"] == len(before["items"])  # type: ignore[arg-type]
    assert counts["roots"] == 1 and counts["doc_sources"] == 1
    assert counts["sources"] == 2 and counts["doc_pages"] == len(site.within(2))
    assert progress[-1] == (counts["items"], counts["items"])
    with KnowledgeAgentCore(target_dir, workers=1) as copy:  # its indexes built from the copy
        for query, answer in answers.items():
            assert [(r.item.id, r.matched_chunks[0].chunk_id) for r in copy.search(query)] == answer
