"""The processor contract: bytes in, a ``ProcessedDocument`` (text + chunks) out.

A processor only *extracts* (:meth:`BaseDataSourceProcessor.extract`): the text, a title
and whatever structure it knows (sections, page offsets, code symbols). Chunking and
the metadata derived from positions (lines, pages, symbols) are done here, once, for
every format (R3.1); a failure there keeps the document as one chunk (R3.4).
"""

from __future__ import annotations

import bisect
import logging
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from knowledge_agent.chunking import ContentChunker, Section
from knowledge_agent.errors import UnsupportedSourceError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk

if TYPE_CHECKING:
    from knowledge_agent.processors.code_names import NameUse

__all__ = ["BaseDataSourceProcessor", "Extraction", "ProcessedDocument", "SymbolSpan"]

logger = logging.getLogger(__name__)


@dataclass
class ProcessedDocument:
    """One source turned into text and chunks, ready to become a ``KnowledgeItem``.

    Every chunk has ``item_id == ""``, ``chunk_index`` 0..n-1, and
    ``content == self.content[start_position:end_position]``; its metadata has 1-based
    ``start_line`` / ``end_line`` (lines of ``content``). Plain data only, so it pickles
    across worker processes.
    """

    title: str
    content: str
    chunks: list[KnowledgeChunk]
    source_type: str
    content_type: str
    language: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SymbolSpan:
    """Where a code symbol's own text lies in the content (for chunk ``symbols``).

    The spans of one document do not overlap: a nested symbol's text is not its parent's.
    """

    start: int
    end: int
    qualified_name: str


@dataclass
class Extraction:
    """What a processor found in a source, before chunking.

    ``sections``: spans to chunk with :meth:`ContentChunker.chunk_sections` (``code``
    makes the window break at line ends); ``None`` means the Markdown-aware
    :meth:`ContentChunker.chunk`. ``page_starts``: the offset where each page begins,
    for ``page`` / ``page_end`` chunk metadata. ``symbols``: code symbols, for a chunk's
    ``symbols`` list; ``names``: the names code uses and imports, by offset, for a
    chunk's ``references`` and ``imports``. ``content_type`` / ``source_type`` override
    the processor's.
    """

    content: str
    title: str
    sections: list[Section] | None = None
    code: bool = False
    page_starts: list[int] | None = None
    symbols: list[SymbolSpan] | None = None
    names: list[NameUse] | None = None
    language: str | None = None
    source_type: str | None = None
    content_type: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


class BaseDataSourceProcessor(ABC):
    """Turns the bytes of one kind of source into a :class:`ProcessedDocument`."""

    name: ClassVar[str]
    extensions: ClassVar[frozenset[str]]  # lower-case, with the dot
    source_type: ClassVar[str]
    content_type: ClassVar[str]

    def __init__(self, chunker: ContentChunker) -> None:
        self.chunker = chunker

    @abstractmethod
    def extract(self, data: bytes, path: str) -> Extraction:
        """Text, title and structure of ``data``; raises ``IngestError`` naming ``path``."""

    def process(self, data: bytes, path: str) -> ProcessedDocument:
        """Extract, chunk and annotate; raises ``IngestError`` / ``UnsupportedSourceError``."""
        extraction = self.extract(data, path)
        # A lone surrogate (a PDF's broken character map) cannot be stored as UTF-8;
        # one replacement character for one keeps every offset.
        extraction.content = _valid_text(extraction.content)
        extraction.title = _valid_text(extraction.title)
        if not extraction.content.strip():
            raise UnsupportedSourceError(path, "empty file")
        return ProcessedDocument(
            title=extraction.title,
            content=extraction.content,
            chunks=self._chunks(extraction, path),
            source_type=extraction.source_type or self.source_type,
            content_type=extraction.content_type or self.content_type,
            language=extraction.language,
            tags=extraction.tags,
            metadata=extraction.metadata,
        )

    def _chunks(self, extraction: Extraction, path: str) -> list[KnowledgeChunk]:
        content = extraction.content
        try:
            if extraction.sections is None:
                chunks = self.chunker.chunk(content, title=extraction.title)
            else:
                chunks = self.chunker.chunk_sections(
                    content, extraction.sections, code=extraction.code
                )
            annotate(chunks, extraction)
        except Exception:
            logger.exception("chunking %s failed; keeping it as one chunk", path)
            chunks = [whole_document_chunk(content, extraction.title)]
            if extraction.page_starts:
                chunks[0].metadata["page"] = 1
                chunks[0].metadata["page_end"] = len(extraction.page_starts)
        return chunks


def annotate(chunks: list[KnowledgeChunk], extraction: Extraction) -> None:
    """Add the metadata derived from positions: ``page`` / ``page_end`` (and
    ``page_starts``, offsets in the chunk, when it spans pages), ``symbols``."""
    pages = extraction.page_starts
    symbols = sorted(extraction.symbols or (), key=lambda symbol: symbol.start)
    symbol_ends = [symbol.end for symbol in symbols]  # increasing: the spans are disjoint
    name_offsets = [use.offset for use in extraction.names or ()]  # sorted by offset
    for chunk in chunks:
        start, end = chunk.start_position, chunk.end_position
        if pages:
            # bisect_right - 1 is the 0-based page holding an offset; +1 makes it 1-based.
            first = chunk.metadata["page"] = bisect.bisect_right(pages, start)
            last = chunk.metadata["page_end"] = bisect.bisect_right(pages, end - 1)
            if last > first:  # where each later page starts in the chunk
                chunk.metadata["page_starts"] = [p - start for p in pages[first:last]]
        if extraction.symbols is not None:
            names: dict[str, None] = {}
            index = bisect.bisect_right(symbol_ends, start)  # first span ending after start
            while index < len(symbols) and symbols[index].start < end:
                names[symbols[index].qualified_name] = None
                index += 1
            chunk.metadata["symbols"] = list(names)
        if extraction.names:
            _annotate_names(chunk, extraction.names, name_offsets)


def _annotate_names(chunk: KnowledgeChunk, uses: list[NameUse], offsets: list[int]) -> None:
    """``references`` / ``imports``: the distinct names used / imported inside the chunk."""
    first = bisect.bisect_left(offsets, chunk.start_position)
    last = bisect.bisect_left(offsets, chunk.end_position)
    found: dict[str, dict[str, None]] = {"reference": {}, "import": {}}
    for use in uses[first:last]:
        found[use.role][use.name] = None
    for role, key in (("reference", "references"), ("import", "imports")):
        if found[role]:
            chunk.metadata[key] = sorted(found[role])


def whole_document_chunk(content: str, heading: str) -> KnowledgeChunk:
    """The whole trimmed content as chunk 0 (the R3.4 fallback)."""
    start = len(content) - len(content.lstrip())
    end = len(content.rstrip())
    return KnowledgeChunk(
        chunk_index=0,
        content=content[start:end],
        heading=heading,
        start_position=start,
        end_position=end,
        metadata={
            "start_line": content.count("\n", 0, start) + 1,
            "end_line": content.count("\n", 0, max(end - 1, start)) + 1,
        },
    )


_SURROGATES = re.compile("[\ud800-\udfff]")


def _valid_text(text: str) -> str:
    if text.isascii():
        return text
    return _SURROGATES.sub("\ufffd", text)


def file_stem(path: str) -> str:
    """``docs/Install Guide.md`` → ``Install Guide`` (works for URLs and Windows paths)."""
    return readable_name(PurePath(path.replace("\\", "/").rstrip("/")).stem or path)


def file_name(path: str) -> str:
    """``docs/config.yaml`` → ``config.yaml``."""
    return readable_name(PurePath(path.replace("\\", "/").rstrip("/")).name or path)


def readable_name(name: str) -> str:
    """``name`` with the bytes that were not UTF-8 (lone surrogates) shown as ``U+FFFD``
    and their hex digits, the way stored paths show them: a title must be valid text."""
    if not any(0xD800 <= ord(char) <= 0xDFFF for char in name):
        return name
    return "".join(
        f"\ufffd{ord(char) - 0xDC00:02X}"
        if 0xDC80 <= ord(char) <= 0xDCFF
        else (f"\ufffdu{ord(char):04X}" if 0xD800 <= ord(char) <= 0xDFFF else char)
        for char in name
    )


def block_sections(
    content: str,
    heading: str,
    metadata: dict[str, Any] | None = None,
    *,
    max_size: int,
    offset: int = 0,
) -> list[Section]:
    """Sections of runs of non-blank lines, neighbours packed together up to ``max_size``.

    For text without structure of its own (module-level code, scripts): chunks end at
    blank lines and are as big as allowed. A single block longer than ``max_size`` stays
    one section, to be windowed by the chunker. Offsets are shifted by ``offset``.
    """
    sections: list[Section] = []
    for start, end in _blocks(content):
        if sections and end + offset - sections[-1].start <= max_size:
            sections[-1] = Section(sections[-1].start, end + offset, heading, metadata or {})
        else:
            sections.append(Section(start + offset, end + offset, heading, metadata or {}))
    return sections


def _blocks(content: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of non-blank lines."""
    blocks: list[tuple[int, int]] = []
    block_start = -1
    position = 0
    length = len(content)
    while True:
        newline = content.find("\n", position)
        line_end = length if newline < 0 else newline
        blank = not content[position:line_end].strip()
        if not blank and block_start < 0:
            block_start = position
        elif blank and block_start >= 0:
            blocks.append((block_start, position - 1))
            block_start = -1
        if newline < 0:
            break
        position = newline + 1
    if block_start >= 0:
        blocks.append((block_start, length))
    return blocks
