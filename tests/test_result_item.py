"""A search result's item is the item (003 R6): every field of KnowledgeItem, its text read
from the storage on first use — on every backend."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_models import items

from knowledge_agent.errors import NotFoundError, StorageError
from knowledge_agent.models import ItemSummary, KnowledgeItem, ResultItem, SearchResult
from knowledge_agent.models.result_view import result_view


class Reader:
    """A storage's ``get_item`` over a dict, counting its calls."""

    def __init__(self, *stored: KnowledgeItem) -> None:
        self.items = {item.id: item for item in stored}
        self.calls = 0

    def __call__(self, item_id: str) -> KnowledgeItem | None:
        self.calls += 1
        return self.items.get(item_id)


def lazy(item: KnowledgeItem, reader: Reader | None = None) -> ResultItem:
    return ResultItem.lazy(ItemSummary.of(item), reader or Reader(item))


@settings(max_examples=100)
@given(item=items)
def test_a_result_item_is_the_item_it_names(item: KnowledgeItem) -> None:
    reader = Reader(item)
    found = lazy(item, reader)
    assert isinstance(found, KnowledgeItem)
    assert found == item and item == found and (found != item) is False
    assert found.content_chars == len(item.content)
    repr(found)
    assert reader.calls == 0 and not found.content_loaded  # none of that read the text
    for spec in dataclasses.fields(KnowledgeItem):
        assert getattr(found, spec.name) == getattr(item, spec.name)
    assert found.content_loaded and reader.calls == 1
    assert found.content == item.content and reader.calls == 1  # read once, then kept
    assert found.to_dict() == item.to_dict()
    assert dataclasses.asdict(found) == dataclasses.asdict(item)


@settings(max_examples=100)
@given(item=items, title=st.text(), text=st.text())
def test_equality_compares_the_text_by_hash_and_length(
    item: KnowledgeItem, title: str, text: str
) -> None:
    found = lazy(item)
    retitled = dataclasses.replace(item, title=title)
    assert (found == retitled) == (title == item.title)
    rewritten = dataclasses.replace(item, content=text, content_hash="")
    assert (found == rewritten) == (rewritten.content_hash == item.content_hash)


def test_replace_gives_a_whole_item() -> None:
    item = KnowledgeItem(title="Deploys", content="Roll back with deploy --undo.")
    changed = dataclasses.replace(lazy(item), title="Rollbacks")
    assert isinstance(changed, ResultItem) and changed.content_loaded
    assert changed.title == "Rollbacks" and changed.content == item.content


def test_copies_read_from_the_same_storage_and_a_pickle_carries_the_text() -> None:
    item = KnowledgeItem(title="Runbook", content="Restart the queue.", metadata={"k": [1]})
    reader = Reader(item)
    found = lazy(item, reader)
    shallow, deep = copy.copy(found), copy.deepcopy(found)
    assert reader.calls == 0 and not shallow.content_loaded and not deep.content_loaded
    deep.metadata["k"].append(2)
    assert found.metadata == {"k": [1]}  # a deep copy shares nothing but the storage
    assert shallow.content == deep.content == item.content and reader.calls == 2

    pickled = pickle.dumps(SearchResult(item=lazy(item, reader), relevance_score=1.0))
    reader.items.clear()  # the storage is gone: the pickle needs none
    restored = pickle.loads(pickled).item
    assert isinstance(restored, ResultItem) and restored.content_loaded
    assert restored == item and restored.content == item.content


def test_a_result_item_that_cannot_read_its_text_says_which_and_why() -> None:
    item = KnowledgeItem(title="Runbook", content="Restart the queue.", source_uri="/kb/run.md")
    with pytest.raises(NotFoundError, match=f"{item.id}.*/kb/run.md.*deleted"):
        _ = lazy(item, Reader()).content
    edited = dataclasses.replace(item, content="Drain the queue.", content_hash="")
    with pytest.raises(NotFoundError, match=f"{item.id}.*changed"):
        _ = lazy(item, Reader(edited)).content
    rebuilt = SearchResult.from_dict(SearchResult(item=item, relevance_score=1.0).to_dict())
    assert rebuilt.item == item
    with pytest.raises(NotFoundError, match=f"{item.id}.*get_item"):
        _ = rebuilt.item.content

    def closed(item_id: str) -> KnowledgeItem | None:
        raise StorageError("get_item: the storage is closed")

    with pytest.raises(StorageError, match=f"{item.id}.*closed"):
        _ = ResultItem.lazy(ItemSummary.of(item), closed).content


# -- on every backend -------------------------------------------------------------------------

MANUAL = (
    "# Turbine manual\n\n"
    + "".join(
        f"## Section {n}\n\nRoutine inspection step {n} of the fan casing.\n\n" for n in range(30)
    )
    + "## Blades\n\nBlades are checked for cracks with an ultrasonic probe every 400 hours.\n"
)


def test_a_result_names_its_item_and_reads_its_text_when_asked(open_core: Any) -> None:
    core = open_core()
    stored = core.add_text(MANUAL, title="Turbine manual", source_uri="/kb/turbine.md")
    result = core.search("ultrasonic probe cracks")[0]
    view = result_view(result)  # what --json and the MCP tools show
    assert "content" not in view and view["content_chars"] == len(MANUAL)
    assert "content" not in result.to_dict()["item"]
    assert not result.item.content_loaded  # a search reads passages, not documents
    assert isinstance(result.item, KnowledgeItem) and result.item == core.get_item(stored.id)
    assert result.item.content_chars == len(MANUAL)
    for chunk in result.matched_chunks + result.context_chunks:
        assert result.item.content[chunk.start_position : chunk.end_position] == chunk.content
    assert result.item.content == MANUAL
    assert core.search("ultrasonic", level="item")[0].item.content == MANUAL


def test_an_item_deleted_changed_or_closed_since_the_search_fails_naming_it(
    open_core: Any,
) -> None:
    core = open_core()
    first = core.add_text(MANUAL, title="Turbine manual")
    second = core.add_text("Ultrasonic probes need gel.", title="Probe notes")
    found = {r.item.id: r.item for r in core.search("ultrasonic probe", limit=5)}
    core.delete_knowledge_item(second.id)
    with pytest.raises(NotFoundError, match=f"{second.id}.*deleted"):
        _ = found[second.id].content
    core.add_text(MANUAL + "\nA new section.\n", title="Turbine manual", item_id=first.id)
    with pytest.raises(NotFoundError, match=f"{first.id}.*changed"):
        _ = found[first.id].content
    late = core.search("new section")[0].item
    core.close()
    with pytest.raises(StorageError, match=f"{first.id}.*closed"):
        _ = late.content
