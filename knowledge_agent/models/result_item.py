"""ResultItem: the document a search result names — a KnowledgeItem whose text is read when
first used.

A result carries the passages that matched, not its document's text: one hit in a 700 KB file
must not make every answer 700 KB. Yet ``result.item`` is the item (003 R6): every field of
:class:`KnowledgeItem` is there, ``content`` included, read from the storage the first time it
is asked for and kept.

How it behaves where a ``KnowledgeItem`` is expected:

* ``isinstance(result.item, KnowledgeItem)`` holds; every field reads as usual.
* Equality compares every field, the text by its ``content_hash`` and length: comparing
  never reads the text, and a result item equals the stored ``KnowledgeItem`` it names.
* ``to_dict()``, ``dataclasses.asdict`` and ``dataclasses.replace`` read the text (they
  give, or build, a whole item); ``repr`` never does.
* ``copy.copy`` and ``copy.deepcopy`` keep reading from the same storage when needed; a
  pickle carries the text (read then), since it may be opened where that storage is not.
* Reading the text fails clearly, naming the item: :class:`NotFoundError` when the item
  was deleted or its text changed since the search (the result's positions point into the
  text it was found in), or when the result was rebuilt from a dict without the text;
  :class:`StorageError` when the storage is closed (read ``content`` before closing the
  knowledge base, or ``get_item`` it again).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from knowledge_agent.errors import KnowledgeAgentError, NotFoundError, StorageError
from knowledge_agent.models.item_summary import SUMMARY_FIELDS, ItemSummary
from knowledge_agent.models.knowledge_item import KnowledgeItem

__all__ = ["ItemReader", "ResultItem", "content_chars"]

ItemReader = Callable[[str], "KnowledgeItem | None"]
"""Reads a stored item by id (a storage's ``get_item``)."""


class ResultItem(KnowledgeItem):
    """A :class:`KnowledgeItem` whose ``content`` is read from the storage on first access.

    Built by the search engine with :meth:`lazy` (a summary and the storage's ``get_item``)
    or :meth:`of_item` (a whole item). ``content_chars`` is the text's length, known without
    reading it; ``content_loaded`` says whether it was read.
    """

    _content: str | None = None
    _chars: int = 0
    _read: ItemReader | None = None

    @classmethod
    def lazy(cls, summary: ItemSummary, read: ItemReader | None) -> ResultItem:
        """The item ``summary`` describes, its text read with ``read(item_id)`` when first
        used (``None``: the text is not available)."""
        item = cls.__new__(cls)
        for name in SUMMARY_FIELDS:
            setattr(item, name, getattr(summary, name))
        item._chars = summary.content_chars
        item._read = read
        return item

    @classmethod
    def of_item(cls, item: KnowledgeItem) -> ResultItem:
        """A whole item as a result item (its text already there)."""
        return cls(**{spec.name: getattr(item, spec.name) for spec in dataclasses.fields(item)})

    @property
    def content(self) -> str:
        """The item's whole text, read from the storage the first time."""
        text = self._content
        if text is None:
            text = self._content = self._load()
        return text

    @content.setter
    def content(self, value: str) -> None:
        self._content = value

    @property
    def content_chars(self) -> int:
        """The text's length in characters (without reading it)."""
        return self._chars if self._content is None else len(self._content)

    @property
    def content_loaded(self) -> bool:
        """Whether the text is here (read, or given)."""
        return self._content is not None

    def _label(self) -> str:
        where = self.source_uri or self.title
        return f"item {self.id}" + (f" ({where})" if where else "")

    def _load(self) -> str:
        if self._read is None:
            raise NotFoundError(
                f"the text of {self._label()} is not in this result (it was rebuilt without "
                "it); get_item(id) reads it"
            )
        try:
            stored = self._read(self.id)
        except NotFoundError:
            raise
        except KnowledgeAgentError as exc:
            raise StorageError(f"cannot read the text of {self._label()}: {exc}") from exc
        if stored is None:
            raise NotFoundError(
                f"{self._label()} was deleted after the search that found it: its text is gone"
            )
        if self.content_hash and stored.content_hash != self.content_hash:
            raise NotFoundError(
                f"the text of {self._label()} changed after the search that found it: "
                "search again, or get_item(id) for the new text"
            )
        return stored.content

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KnowledgeItem):
            return NotImplemented
        return content_chars(self) == content_chars(other) and all(
            getattr(self, name) == getattr(other, name) for name in SUMMARY_FIELDS
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like KnowledgeItem

    def __repr__(self) -> str:
        text = repr(self._content) if self._content is not None else f"<{self._chars} chars>"
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in SUMMARY_FIELDS)
        return f"ResultItem({shown}, content={text})"

    def __copy__(self) -> ResultItem:
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __deepcopy__(self, memo: dict[int, Any]) -> ResultItem:
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        for name, value in self.__dict__.items():
            # The reader is the storage's: shared, never copied.
            twin.__dict__[name] = value if name == "_read" else copy.deepcopy(value, memo)
        return twin

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_content"] = self.content
        state.pop("_read", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def content_chars(item: KnowledgeItem | ItemSummary) -> int:
    """How long an item's text is, without reading a result item's text."""
    if isinstance(item, (ResultItem, ItemSummary)):
        return item.content_chars
    return len(item.content)
