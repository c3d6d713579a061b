"""The keyword indexes' documents for an analysed batch, as arrays for the bulk writer.

The same documents :func:`~knowledge_agent.backends.local.keyword.schema.chunk_documents` and
:func:`~knowledge_agent.backends.local.keyword.schema.item_document` describe field by field, built
from the batch's term ids instead of being analysed again:

* a chunk's ``content`` is its item's title unless the heading path starts with it, the
  heading path and the code symbol ``HEADING_WEIGHT`` times each, then the body
  (:func:`~knowledge_agent.search.documents.chunk_search_text`); ``heading`` the heading
  path;
* an item's ``title`` is its title, its ``content`` the title then its item-level text
  (:class:`~knowledge_agent.search.analysed_batch.AnalysedBatch`: the chunks' bodies, an
  overlap counted once);
* the filter fields, ``item_id`` and ``path`` are one term each, ``updated_at`` a column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from knowledge_agent.backends.local.keyword.bulk import DocumentBlock, FieldTerms
from knowledge_agent.backends.local.keyword.bulk_columns import StoredValues
from knowledge_agent.backends.local.keyword.schema import FILTER_FIELDS, safe_text
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch
from knowledge_agent.search.documents import HEADING_WEIGHT
from knowledge_agent.search.filters import to_epoch

__all__ = ["chunk_block", "item_block"]

_ID_FIELDS: dict[str, str] = {  # field → the item attribute it holds
    "item_id": "id",
    **{name: name for name in FILTER_FIELDS},
    "path": "source_uri",
}


def _encoded(values: list[Any]) -> list[bytes]:
    """Each value as its term: UTF-8 of ``safe_text(value)`` (the usual case without it)."""
    try:
        return [value.encode("utf-8") for value in values]
    except (AttributeError, UnicodeEncodeError):  # None, or undecodable file names
        return [safe_text(value).encode("utf-8") for value in values]


def _text(batch: AnalysedBatch, ids: np.ndarray, row: np.ndarray) -> FieldTerms:
    terms, rank = batch.vocab_bytes()
    return FieldTerms(terms, row.astype(np.int64), ids.astype(np.int64), rank=rank)


def _id_fields(items: Sequence[KnowledgeItem], doc_item: np.ndarray) -> dict[str, FieldTerms]:
    """The one-term fields of each document, from its item (``doc_item``)."""
    found = {}
    for name, attribute in _ID_FIELDS.items():
        values = _encoded([getattr(item, attribute) for item in items])
        distinct = list(dict.fromkeys(values))
        index = dict(zip(distinct, range(len(distinct)), strict=True))
        per_item = np.fromiter(map(index.__getitem__, values), np.int64, len(values))
        found[name] = FieldTerms(distinct, np.arange(doc_item.size), per_item[doc_item])
    return found


def _updated(items: Sequence[KnowledgeItem], doc_item: np.ndarray) -> np.ndarray:
    return np.array([to_epoch(item.updated_at) for item in items], np.float64)[doc_item]


def chunk_block(batch: AnalysedBatch) -> DocumentBlock:
    """Every chunk of the batch as a chunk-index document, in batch order."""
    items = [item for item, _ in batch.pairs]
    owner = batch.chunk_items()
    n = owner.size
    title = batch.title[owner]
    no_title = batch.title_in_heading
    title_end = np.where(no_title, title[:, 0], title[:, 1])
    parts = [(title[:, 0], title_end)]
    parts += [(batch.heading[:, 0], batch.heading[:, 1])] * HEADING_WEIGHT
    parts += [(batch.symbol[:, 0], batch.symbol[:, 1])] * HEADING_WEIGHT
    parts.append((batch.body[:, 0], batch.body[:, 1]))
    fields = _id_fields(items, owner)
    fields["content"] = _text(batch, *batch.rows(parts))
    fields["heading"] = _text(batch, *batch.rows([(batch.heading[:, 0], batch.heading[:, 1])]))
    stored = [
        {"chunk_id": chunk.id, "chunk_index": int(chunk.chunk_index), "item_id": item.id}
        for item, chunks in batch.pairs
        for chunk in chunks
    ]
    return DocumentBlock(
        n, fields, StoredValues.encode(stored), {"updated_at": _updated(items, owner)}
    )


def item_block(batch: AnalysedBatch) -> DocumentBlock:
    """Every item of the batch as an item-index document, in batch order."""
    items = [item for item, _ in batch.pairs]
    every = np.arange(len(items))
    fields = _id_fields(items, every)
    fields["title"] = _text(batch, *batch.rows([(batch.title[:, 0], batch.title[:, 1])]))
    fields["content"] = _text(batch, *batch.item_rows(every))
    stored = [{"item_id": item.id} for item in items]
    return DocumentBlock(
        len(items), fields, StoredValues.encode(stored), {"updated_at": _updated(items, every)}
    )
