"""check_citation against a storage holding exactly the chunks each case needs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from knowledge_agent.core.citations import CitationCheck, check_citation
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem
from knowledge_agent.models.evidence import evidence_ref
from knowledge_agent.storage import SQLiteStorageManager

OLD = "Rotate the signing keys every quarter."
NEW = "Rotate the signing keys every month."
OTHER = "Keys live in the vault."


@pytest.fixture
def storage() -> Iterator[SQLiteStorageManager]:
    manager = SQLiteStorageManager(":memory:")
    yield manager
    manager.close()


def chunk(
    content: str, index: int = 0, lines: tuple[int, int] | None = None, **meta: object
) -> KnowledgeChunk:
    metadata: dict[str, object] = dict(meta)
    if lines is not None:
        metadata.update(start_line=lines[0], end_line=lines[1])
    return KnowledgeChunk(chunk_index=index, content=content, metadata=metadata)


def store(
    storage: SQLiteStorageManager,
    *chunks: KnowledgeChunk,
    source_uri: str | None = "docs/keys.md",
    title: str = "Key policy",
) -> KnowledgeItem:
    content = "\n".join(c.content for c in chunks)
    item = KnowledgeItem(title=title, content=content, source_uri=source_uri)
    storage.save_item_with_chunks(item, list(chunks))
    return item


def ref_to(c: KnowledgeChunk, path: str = "docs/keys.md", content: str | None = None) -> str:
    return evidence_ref(c.id, path, c.metadata, c.content if content is None else content)


def test_check_citation_reports_the_item_and_chunk_of_an_unchanged_citation(storage) -> None:
    cited = chunk(OLD, lines=(3, 4))
    item = store(storage, cited)
    ref = ref_to(cited)
    check = check_citation(storage, ref)
    assert (check.ref, check.status, check.current_ref) == (ref, "unchanged", ref)
    assert check.item is not None and check.item.id == item.id
    assert check.chunk is not None and check.chunk.id == cited.id
    assert check.to_dict() == {
        "ref": ref,
        "status": "unchanged",
        "current_ref": ref,
        "item_id": item.id,
        "title": "Key policy",
        "chunk": check.chunk.to_dict(),
    }


def test_a_citation_whose_chunk_now_holds_other_text_is_changed(storage) -> None:
    cited = chunk(NEW, lines=(3, 4))
    item = store(storage, cited)
    ref = ref_to(cited, content=OLD)
    check = check_citation(storage, ref)
    assert (check.ref, check.status) == (ref, "changed")
    assert check.current_ref == ref_to(cited) != ref
    assert check.item is not None and check.item.id == item.id


def test_the_current_ref_names_where_the_item_is_now_not_the_cited_path(storage) -> None:
    cited = chunk(OLD, lines=(3, 4))
    item = store(storage, cited)
    ref = ref_to(cited)
    item.source_uri = "docs/security/keys.md"
    storage.save_item(item)  # moved on disk; its chunks are kept
    check = check_citation(storage, ref)
    assert check.status == "unchanged"
    assert check.current_ref == ref_to(cited, path="docs/security/keys.md")


@pytest.mark.parametrize(
    ("source_uri", "title", "where"),
    [
        ("docs/keys.md", "Key policy", "docs/keys.md"),
        (None, "Key policy", "Key policy"),
        (None, "", ""),
    ],
)
def test_the_current_ref_names_the_path_else_the_title_else_the_item_id(
    storage, source_uri: str | None, title: str, where: str
) -> None:
    cited = chunk(OLD, lines=(3, 4))
    item = store(storage, cited, source_uri=source_uri, title=title)
    check = check_citation(storage, ref_to(cited, path="as cited"))
    assert check.current_ref == ref_to(cited, path=where or item.id)


def test_a_citation_whose_chunk_went_while_it_was_checked_keeps_the_cited_path() -> None:
    # The chunk is read, then its item deleted by another writer before the item is read.
    class DeletingStorage(SQLiteStorageManager):
        def get_chunk_by_id(self, chunk_id: str) -> KnowledgeChunk | None:
            found = super().get_chunk_by_id(chunk_id)
            if found is not None:
                self.delete_item(found.item_id)
            return found

    storage = DeletingStorage(":memory:")
    try:
        cited = chunk(OLD, lines=(3, 4))
        store(storage, cited)
        ref = ref_to(cited, path="docs/old-keys.md")
        check = check_citation(storage, ref)
        assert (check.status, check.item, check.current_ref) == ("unchanged", None, ref)
        assert check.to_dict()["item_id"] is None and check.to_dict()["title"] is None
    finally:
        storage.close()


def test_text_found_again_elsewhere_in_the_document_is_moved(storage) -> None:
    cited = chunk(OLD, lines=(3, 4))
    ref = ref_to(cited)
    now = chunk(OLD, index=1, lines=(9, 10))
    item = store(storage, chunk(OTHER, lines=(1, 2)), now)  # re-indexed: new chunk ids
    check = check_citation(storage, ref)
    assert (check.ref, check.status) == (ref, "moved")
    assert check.item is not None and check.item.id == item.id
    assert check.chunk is not None and check.chunk.id == now.id
    assert check.current_ref == ref_to(now)


# The cited lines are L10-L12; each case lists (lines of the chunks now) and which of them is
# the text at the cited lines (None: none is, the citation is gone).
@pytest.mark.parametrize(
    ("chunk_lines", "at"),
    [
        ([(1, 5), (10, 15)], 1),  # only one side overlaps: not there
        ([(13, 20), (11, 11)], 1),  # after the cited end: not there
        ([(1, 9), (12, 20)], 1),  # starts on the cited end line
        ([(1, 9), (11, 20)], 1),  # starts inside the cited lines
        ([(1, 9), (5, 10)], 1),  # ends on the cited start line
        ([(1, 9), (13, 20)], None),
    ],
)
def test_other_text_at_the_cited_lines_is_changed(
    storage, chunk_lines: list[tuple[int, int]], at: int | None
) -> None:
    cited = chunk(OLD, lines=(10, 12))
    ref = ref_to(cited)
    now = [chunk(f"{OTHER} {i}", index=i, lines=lines) for i, lines in enumerate(chunk_lines)]
    item = store(storage, *now)
    check = check_citation(storage, ref)
    if at is None:
        assert check == CitationCheck(ref, "gone")
        return
    assert (check.ref, check.status) == (ref, "changed")
    assert check.item is not None and check.item.id == item.id
    assert check.chunk is not None and check.chunk.id == now[at].id
    assert check.current_ref == ref_to(now[at])


def test_a_citation_without_lines_is_gone_when_its_text_is(storage) -> None:
    cited = chunk(OLD)  # a chunk with no line numbers is cited by path and hash alone
    ref = ref_to(cited)
    assert "#L" not in ref
    store(storage, chunk(NEW, lines=(1, 3)))
    assert check_citation(storage, ref) == CitationCheck(ref, "gone")


@pytest.mark.parametrize("meta", [{"start_line": 10}, {"end_line": 12}])
def test_a_chunk_with_half_its_line_numbers_is_not_placed_at_the_cited_lines(
    storage, meta: dict[str, int]
) -> None:
    ref = ref_to(chunk(OLD, lines=(10, 12)))
    store(storage, chunk(NEW, **meta))
    assert check_citation(storage, ref) == CitationCheck(ref, "gone")


def test_a_gone_citation_keeps_its_ref_and_says_so_in_its_dict(storage) -> None:
    ref = ref_to(chunk(OLD, lines=(3, 4)))
    check = check_citation(storage, ref)
    assert check == CitationCheck(ref, "gone")
    assert check.to_dict() == {
        "ref": ref,
        "status": "gone",
        "current_ref": "",
        "item_id": None,
        "title": None,
        "chunk": None,
    }
