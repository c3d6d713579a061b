"""The shape of every tool's answer, published as the tool's MCP output schema.

A client that reads structured content checks each answer against these (the SDK's client
does); the tests call every tool through it. Keys a tool adds only sometimes are optional
(``total=False``); values whose shape depends on the data (metadata, explanations) are left
open.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from typing_extensions import Required, TypedDict

__all__ = ["OUTPUT_TYPES", "output_schema"]


class PassageView(TypedDict):
    text: str
    start_position: int
    end_position: int
    start_line: int | None
    end_line: int | None
    page: int | None
    heading_path: list[str]
    link: str
    evidence_ref: str


class ChunkView(TypedDict, total=False):
    chunk_id: Required[str]
    evidence_ref: str
    score: float
    location: str
    heading: str
    heading_path: list[str]
    link: str
    chunk_index: int
    start_position: int
    end_position: int
    start_line: int | None
    end_line: int | None
    page: int
    page_end: int
    url: str
    symbol: str
    symbol_type: str
    signature: str
    passage: PassageView | None
    content: str
    content_truncated: bool
    explanation: dict[str, Any]


class ItemView(TypedDict):
    item_id: str
    title: str
    path: str | None
    kb: str
    source_type: str
    doc_type: str
    language: str
    content_chars: int


class ResultView(ItemView, total=False):
    score: float
    confidence: float
    search_mode: str
    matched_fields: list[str]
    matched_chunks: list[ChunkView]
    context_chunks: list[ChunkView]
    snippets: list[str]
    explanation: dict[str, Any]


class SearchAnswer(TypedDict, total=False):
    results: Required[list[ResultView]]
    count: Required[int]
    truncated: Required[bool]
    note: str
    hint: str


class KnowledgeBaseEntry(TypedDict, total=False):
    name: Required[str]
    intro: str
    has_intro: bool
    items: int
    chunks: int
    sources: int
    roots: list[str]
    last_indexed_at: str | None


class KnowledgeListAnswer(TypedDict, total=False):
    ok: Required[bool]
    count: Required[int]
    truncated: Required[bool]
    items: Required[list[KnowledgeBaseEntry]]
    note: str


class TextLine(TypedDict, total=False):
    source: str
    link: str
    line: int
    text: Required[str]


class TextSearchAnswer(TypedDict):
    ok: bool
    knowledge_base: str
    keyword: str
    count: int
    truncated: bool
    items: list[TextLine]


class Passage(TypedDict, total=False):
    source: Required[str]
    text: Required[str]
    relevance: Required[float]
    rerank_score: float
    chunk_id: str


class SemanticSearchAnswer(TypedDict, total=False):
    ok: Required[bool]
    knowledge_base: Required[str]
    query: Required[str]
    count: Required[int]
    truncated: Required[bool]
    reranked: Required[bool]
    items: Required[list[Passage]]
    note: str


class ListedItem(ItemView):
    updated_at: str
    chunks: int


class ListItemsAnswer(TypedDict, total=False):
    count: Required[int]
    offset: Required[int]
    total: int
    more: Required[bool]
    next_offset: int
    items: Required[list[ListedItem]]
    hint: str


class Citation(TypedDict, total=False):
    ref: Required[str]
    status: Required[str]
    current_ref: str


class ReadChunkAnswer(TypedDict, total=False):
    chunk: ChunkView
    item: ItemView
    before: list[ChunkView]
    after: list[ChunkView]
    citation: Citation


class ItemAnswer(ItemView, total=False):
    tags: Required[list[str]]
    metadata: Required[dict[str, Any]]
    created_at: Required[str]
    updated_at: Required[str]
    offset: Required[int]
    content: Required[str]
    truncated: Required[bool]
    next_offset: int


class FileIssue(TypedDict):
    path: str
    reason: str


class CollectAnswer(TypedDict):
    kb: str
    processed: int
    unchanged: int
    skipped: list[FileIssue]
    skipped_summary: dict[str, Any]
    failed: list[FileIssue]
    removed: int
    chunks_added: int
    chunks_removed: int
    bytes_processed: int
    duration_s: float
    item_ids: list[str]
    stopped_by: list[str]
    notes: list[str]


class DeleteAnswer(ItemView, total=False):
    deleted: Required[bool]
    note: str


class IndexCounts(TypedDict):
    items: int
    chunks: int


class DamagedFile(TypedDict):
    index: str
    file: str
    problem: str


class StatusAnswer(TypedDict):
    data_dir: str | None
    knowledge_bases: int
    items: int
    chunks: int
    sources: int
    roots: int
    keyword_index: IndexCounts
    semantic_index: IndexCounts
    pending_changes: int
    last_indexed_at: str | None
    sizes: dict[str, int]
    consistent: bool
    problems: list[str]
    damaged: list[DamagedFile]
    repaired: bool


OUTPUT_TYPES: dict[str, type] = {
    "search_knowledge": SearchAnswer,
    "search_code": SearchAnswer,
    "search_docs": SearchAnswer,
    "knowledge_list": KnowledgeListAnswer,
    "knowledge_text_search": TextSearchAnswer,
    "knowledge_semantic_search": SemanticSearchAnswer,
    "list_items": ListItemsAnswer,
    "read_chunk": ReadChunkAnswer,
    "get_knowledge_item": ItemAnswer,
    "add_knowledge": CollectAnswer,
    "delete_knowledge": DeleteAnswer,
    "index_status": StatusAnswer,
}
"""Each tool's answer type, by tool name."""


def output_schema(tool_name: str) -> dict[str, Any]:
    """The JSON schema of a tool's answer."""
    return TypeAdapter(OUTPUT_TYPES[tool_name]).json_schema()
