"""Doc sources crawled from the web and their pages, on every backend (SQLite: schema
version 3)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from knowledge_agent.errors import StorageError
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.models.knowledge_item import utc_now
from knowledge_agent.protocols import Storage
from knowledge_agent.storage import SQLiteStorageManager
from knowledge_agent.storage.doc_sources import DocPage, DocSource

SITE = "https://docs.example.com/"


@pytest.fixture
def storage(backend_storage: Storage) -> Storage:
    """A storage of each backend in turn, with a doc source for SITE saved in it."""
    storage = backend_storage
    storage.doc_sources.save_doc_source(
        DocSource("docs", SITE, name="Example", options={"max_depth": 2})
    )
    return storage


def add_page(storage: Storage, path: str, **fields: object) -> KnowledgeItem:
    url = SITE + path
    item = KnowledgeItem(title=path, content=f"text of {path}", kb="docs", source_uri=url)
    chunk = KnowledgeChunk(content=item.content, end_position=len(item.content))
    page = DocPage("docs", url, SITE, url, "indexed", item_id=item.id, **fields)  # type: ignore[arg-type]
    storage.doc_sources.save_doc_page_item(page, item, [chunk])
    return item


def test_a_doc_source_round_trips_and_counts_its_indexed_pages(storage) -> None:
    add_page(storage, "a", etag='"1"', links=(SITE + "b",))
    storage.doc_sources.save_doc_page(
        DocPage("docs", SITE + "b", SITE, SITE + "b", "failed", error="HTTP 500")
    )
    [source] = storage.doc_sources.get_doc_sources()
    assert (source.kb, source.url, source.name, source.options) == (
        "docs",
        SITE,
        "Example",
        {"max_depth": 2},
    )
    assert source.pages == 1  # the failed page is tracked but not counted
    assert storage.sources.kb_names() == ["docs"]  # saving a source creates its knowledge base
    page = storage.doc_sources.get_doc_pages("docs", SITE)[SITE + "a"]
    assert page.etag == '"1"' and page.links == (SITE + "b",) and page.item_id is not None


def test_a_page_round_trips_every_field(storage) -> None:
    failed = DocPage(
        "docs",
        SITE + "gone",
        SITE,
        SITE + "gone?x=1",
        "failed",
        etag='"e"',
        last_modified="Wed, 01 May 2024 12:00:00 GMT",
        content_hash="h",
        links=(SITE + "a", SITE + "b"),
        http_status=404,
        error="HTTP 404",
        fetched_at=utc_now().replace(microsecond=0) - timedelta(days=1),
    )
    storage.doc_sources.save_doc_page(failed)
    assert storage.doc_sources.get_doc_page("docs", SITE + "gone") == failed
    assert storage.doc_sources.get_doc_pages("docs", SITE) == {SITE + "gone": failed}
    not_modified = replace(failed, status="skipped", http_status=304, error="")
    storage.doc_sources.save_doc_page(not_modified)
    assert storage.doc_sources.get_doc_page("docs", SITE + "gone") == not_modified


def test_saving_a_source_again_keeps_when_it_was_added(storage) -> None:
    first = storage.doc_sources.get_doc_source("docs", SITE)
    assert first is not None
    later = replace(first, name="Renamed", added_at=first.added_at + timedelta(days=3), tags=("x",))
    storage.doc_sources.save_doc_source(later)
    again = storage.doc_sources.get_doc_source("docs", SITE)
    assert again is not None
    assert again.name == "Renamed" and again.tags == ("x",) and again.added_at == first.added_at


def test_a_source_is_due_when_never_crawled_or_its_interval_passed() -> None:
    now = utc_now()
    assert DocSource("k", SITE).due(now)
    crawled = DocSource("k", SITE, crawled_at=now - timedelta(hours=2), refresh_interval=3600)
    assert crawled.due(now)
    assert not replace(crawled, refresh_interval=3 * 3600).due(now)
    assert not replace(crawled, refresh_interval=0).due(now)  # only on request
    assert not replace(crawled, enabled=False).due(now)


def test_deleting_a_source_deletes_its_pages_and_their_items(storage) -> None:
    items = [add_page(storage, name) for name in ("a", "b")]
    removed = storage.doc_sources.delete_doc_source("docs", SITE)
    assert sorted(removed) == sorted(item.id for item in items)
    assert storage.get_items(item.id for item in items) == {}
    assert storage.doc_sources.get_doc_pages("docs") == {}
    if isinstance(storage, SQLiteStorageManager):
        assert [op for _, _, op in storage.journal_since(0)][-2:] == ["delete", "delete"]


def test_deleting_a_page_deletes_its_item_and_deleting_the_item_forgets_the_page(storage) -> None:
    first = add_page(storage, "a")
    second = add_page(storage, "b")
    assert storage.doc_sources.delete_doc_page("docs", SITE + "a") == first.id
    assert storage.get_item(first.id) is None
    assert storage.doc_sources.delete_doc_page("docs", SITE + "a") is None
    storage.delete_item(second.id)
    assert storage.doc_sources.get_doc_pages("docs") == {}


def test_a_page_with_an_unknown_status_is_refused(storage) -> None:
    with pytest.raises(StorageError, match="status"):
        storage.doc_sources.save_doc_page(DocPage("docs", SITE + "x", SITE, SITE + "x", "maybe"))
