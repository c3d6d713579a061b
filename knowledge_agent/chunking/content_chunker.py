"""ContentChunker: split a document into chunks that keep headings and positions (R2).

Three levels, in order (R2.1):

1. sections, at Markdown headings (ATX ``#`` … ``######`` and setext underlines; a
   ``#`` inside a fenced code block is not a heading);
2. paragraphs, at blank lines (a fenced code block is one paragraph); paragraphs
   shorter than ``min_chunk_size`` are merged with their neighbours in the section;
3. a sliding window over any piece still longer than ``max_chunk_size``, breaking at
   a sentence end or whitespace when one is near, with ``overlap_ratio`` overlap.

:meth:`ContentChunker.chunk_sections` skips level 1 and 2 for callers that already know
the structure (code symbols, reStructuredText sections): each given :class:`Section` is
windowed on its own and small neighbours are merged.

That is the ``headings`` strategy, the default. :attr:`ChunkConfig.strategy` can pick
``lines`` or ``tokens`` instead (:mod:`.windows`): fixed windows of ``chunk_size``
non-blank lines or tokens, ``chunk_overlap`` of them shared by neighbours. Headings then
only name the chunks (the section a chunk starts in), and sections given to
:meth:`ContentChunker.chunk_sections` are still kept apart, each windowed on its own.

Every chunk is an exact slice of the input (``content[start:end]``, R2.5), trimmed of
surrounding whitespace, and carries its 1-based ``start_line`` / ``end_line``.
"""

from __future__ import annotations

import bisect
import copy
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from knowledge_agent.chunking.headings import clean_heading
from knowledge_agent.chunking.windows import Units, line_windows
from knowledge_agent.errors import ConfigError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk

__all__ = ["STRATEGIES", "ChunkConfig", "ContentChunker", "Section"]

STRATEGIES = ("headings", "lines", "tokens")
"""The chunking strategies :attr:`ChunkConfig.strategy` names."""

# chunk_size and chunk_overlap when not set: 002's lines (10, 2) and 000's chunkTokens (400, 80).
_WINDOW_DEFAULTS = {"lines": (10, 2), "tokens": (400, 80)}

logger = logging.getLogger(__name__)

_ATX = re.compile(r"[ ]{0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_SETEXT = re.compile(r"[ ]{0,3}(=+|-{2,})[ \t]*")
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")
# Lines that cannot be the text of a setext heading: list items, quotes, tables.
_NOT_SETEXT_TEXT = re.compile(r"[ ]{0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|\|)")
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？；]")
_CLAUSE_END = re.compile(r"[,;:](?=\s)|[，、：]")
_NEWLINE = re.compile(r"\n")
_FRONT_MATTER = re.compile(
    r"---[ \t]*\r?\n[\w-]+[ \t]*:.*?^(?:---|\.\.\.)[ \t]*\r?$", re.DOTALL | re.MULTILINE
)
_SPACE = re.compile(r"\s")


@dataclass(frozen=True)
class ChunkConfig:
    """How documents are cut into chunks (R2.2).

    ``strategy`` ``"headings"`` (the default) sizes chunks in characters: a document
    shorter than ``2 * min_chunk_size`` is a single chunk; no chunk is longer than
    ``max_chunk_size``; neighbouring window pieces share about
    ``overlap_ratio * max_chunk_size`` characters.

    ``"lines"`` and ``"tokens"`` cut fixed windows of ``chunk_size`` non-blank lines or
    tokens (default 10 lines / 400 tokens), neighbours sharing ``chunk_overlap`` of them
    (default 2 / 80); see :mod:`knowledge_agent.chunking.windows` for what a token is.
    Sections a processor finds (code symbols) smaller than a quarter of ``chunk_size``
    merge with small neighbours. ``chunk_size`` and ``chunk_overlap`` belong to these two
    strategies only.
    """

    min_chunk_size: int = 100
    max_chunk_size: int = 1500
    overlap_ratio: float = 0.2
    strategy: str = "headings"
    chunk_size: int | None = None
    chunk_overlap: int | None = None

    def __post_init__(self) -> None:
        for name in ("min_chunk_size", "max_chunk_size"):
            _check_count(name, getattr(self, name), minimum=1)
        if self.min_chunk_size > self.max_chunk_size:
            raise ConfigError(
                f"min_chunk_size ({self.min_chunk_size}) must not exceed "
                f"max_chunk_size ({self.max_chunk_size})"
            )
        ratio = self.overlap_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise ConfigError(f"overlap_ratio must be in [0, 1), got {ratio!r}")
        if self.strategy not in STRATEGIES:
            names = ", ".join(repr(name) for name in STRATEGIES)
            raise ConfigError(f"strategy must be one of {names}, got {self.strategy!r}")
        for name in ("chunk_size", "chunk_overlap"):
            value = getattr(self, name)
            if value is None:
                continue
            if self.strategy == "headings":
                raise ConfigError(
                    f"{name} applies to the 'lines' and 'tokens' strategies, not 'headings' "
                    "(which sizes chunks with min_chunk_size and max_chunk_size)"
                )
            _check_count(name, value, minimum=1 if name == "chunk_size" else 0)
        if self.strategy != "headings" and self.overlap >= self.size:
            raise ConfigError(
                f"chunk_overlap ({self.overlap}) must be less than chunk_size ({self.size})"
            )

    @property
    def size(self) -> int:
        """``chunk_size`` or its strategy's default (0 for ``headings``)."""
        if self.chunk_size is not None:
            return self.chunk_size
        return _WINDOW_DEFAULTS.get(self.strategy, (0, 0))[0]

    @property
    def overlap(self) -> int:
        """``chunk_overlap`` or its strategy's default (0 for ``headings``)."""
        if self.chunk_overlap is not None:
            return self.chunk_overlap
        return _WINDOW_DEFAULTS.get(self.strategy, (0, 0))[1]

    def to_dict(self) -> dict[str, Any]:
        """The settings in effect, JSON-ready: the strategy and its sizes, resolved."""
        if self.strategy == "headings":
            return {
                "strategy": self.strategy,
                "min_chunk_size": self.min_chunk_size,
                "max_chunk_size": self.max_chunk_size,
                "overlap_ratio": self.overlap_ratio,
            }
        return {"strategy": self.strategy, "chunk_size": self.size, "chunk_overlap": self.overlap}

    def fingerprint(self) -> str:
        """Every setting the chunks depend on, resolved: equal for configs that cut alike
        (code is packed by ``max_chunk_size`` under every strategy)."""
        settings = asdict(self) | {"chunk_size": self.size, "chunk_overlap": self.overlap}
        return json.dumps(settings, sort_keys=True)


def _check_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum else "an integer >= 0"
        raise ConfigError(f"{name} must be {kind}, got {value!r}")


@dataclass(frozen=True)
class Section:
    """A span ``[start, end)`` of a document that the caller wants chunked as a unit.

    Used by :meth:`ContentChunker.chunk_sections`: a code symbol, an rST section, … .
    ``metadata`` (JSON-ready) is copied into every chunk cut from the section.
    """

    start: int
    end: int
    heading: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass
class _Piece:
    """A trimmed span cut from one section, or several small sections merged."""

    start: int
    end: int
    sections: list[Section]
    small: bool  # every section in it was shorter than min_chunk_size


@dataclass
class _Block:
    """A span of the document: a heading line, a paragraph or a fenced code block."""

    start: int
    end: int
    kind: str  # "heading", "text" or "code"
    section: int  # index into the section headings


@dataclass(frozen=True)
class _Measure:
    """How one document's spans are sized and cut under the configured strategy.

    ``headings``: characters, ``max_chunk_size`` at most, ``min_chunk_size`` small, cut by
    the sliding window; ``lines`` / ``tokens``: units, ``chunk_size`` at most, under a
    quarter of it small, cut into fixed windows.
    """

    size: Callable[[int, int], int]
    limit: int
    small: int
    window: Callable[[int, int, bool], list[tuple[int, int]]]

    @classmethod
    def of(cls, content: str, config: ChunkConfig) -> _Measure:
        if config.strategy == "headings":
            return cls(
                size=lambda start, end: end - start,
                limit=config.max_chunk_size,
                small=config.min_chunk_size,
                window=lambda start, end, code: _window(content, start, end, config, code),
            )
        units = Units.of(content, config.strategy)
        size, overlap = config.size, config.overlap

        def window(start: int, end: int, code: bool) -> list[tuple[int, int]]:
            if code and config.strategy == "tokens":
                return line_windows(content, units, start, end, size, overlap)
            return units.windows(start, end, size, overlap)

        return cls(units.count, size, max(1, size // 4), window)


class ContentChunker:
    """Splits text into ``KnowledgeChunk`` objects; never raises on content (R2.7)."""

    def __init__(self, config: ChunkConfig | None = None) -> None:
        self.config = config or ChunkConfig()

    def chunk(self, content: str, title: str = "") -> list[KnowledgeChunk]:
        """Chunks of ``content`` in document order; ``[]`` when it is blank.

        ``title`` is the heading of the text before the first heading (R2.6).
        """
        start, end = _trim(content, 0, len(content))
        if start >= end:
            return []
        if self.config.strategy != "headings":
            return self._chunk_windows(content, start, end, title)
        try:
            blocks, headings = _parse_blocks(content, title)
            spans = self._spans(content, start, end, title, blocks, headings)
            starts = [(b.start, headings[b.section]) for b in blocks if b.kind == "heading"]
        except Exception:
            logger.exception("chunking failed; keeping the document as one chunk")
            spans, starts = [(start, end, title)], []
        chunks = _to_chunks(content, spans)
        _mark_sections(chunks, starts)
        return chunks

    def _chunk_windows(
        self, content: str, start: int, end: int, title: str
    ) -> list[KnowledgeChunk]:
        """The ``lines`` / ``tokens`` strategy over the whole document; each chunk is headed
        by the section it starts in."""
        try:
            blocks, headings = _parse_blocks(content, title)
            starts = [(b.start, headings[b.section]) for b in blocks if b.kind == "heading"]
        except Exception:
            logger.exception("reading the headings failed; chunks are headed by the title")
            starts = []
        try:
            pieces = _Measure.of(content, self.config).window(start, end, False)
        except Exception:
            logger.exception("chunking failed; keeping the document as one chunk")
            pieces = [(start, end)]
        positions = [position for position, _ in starts]
        spans = []
        for piece_start, piece_end in pieces:
            section = bisect.bisect_right(positions, piece_start) - 1
            spans.append((piece_start, piece_end, starts[section][1] if section >= 0 else title))
        chunks = _to_chunks(content, spans)
        _mark_sections(chunks, starts)
        return chunks

    def _spans(
        self,
        content: str,
        start: int,
        end: int,
        title: str,
        blocks: list[_Block],
        headings: list[str],
    ) -> list[tuple[int, int, str]]:
        config = self.config
        if end - start < 2 * config.min_chunk_size and end - start <= config.max_chunk_size:
            return [(start, end, title)]
        spans: list[tuple[int, int, str]] = []
        for piece_start, piece_end, section, is_code in self._merge(blocks):
            heading = headings[section]
            for span_start, span_end in _window(content, piece_start, piece_end, config, is_code):
                spans.append((span_start, span_end, heading))
        return spans

    def chunk_sections(
        self,
        content: str,
        sections: Sequence[tuple[int, int, str]] | Sequence[Section],
        *,
        code: bool = False,
        merge_small: bool = True,
    ) -> list[KnowledgeChunk]:
        """Chunks of ``content`` cut along caller-supplied ``sections``, in document order.

        ``sections`` are ``Section`` objects or ``(start, end, heading)`` tuples (a fourth
        item, if present, is the metadata). Each section is trimmed; one longer than
        ``max_chunk_size`` goes through the sliding window (breaking at line ends when
        ``code``), each piece keeping the section's heading and metadata. With
        ``merge_small``, runs of neighbouring sections that are each shorter than
        ``min_chunk_size`` are merged (never beyond ``max_chunk_size``), and a document
        shorter than ``2 * min_chunk_size`` is one chunk, as in :meth:`chunk`. A merged
        chunk's heading joins the distinct headings with ``", "`` (a heading that is the
        parent path of the next one is left out); its metadata keeps the entries all its
        sections agree on. Every chunk also carries ``start_line`` / ``end_line``.

        Text outside every section is not chunked. Never raises on content: if anything
        goes wrong it logs and falls back to :meth:`chunk`.
        """
        try:
            measure = _Measure.of(content, self.config)
            pieces = self._section_pieces(content, sections, code, measure)
            if merge_small:
                pieces = self._merge_pieces(pieces, measure)
            return _piece_chunks(content, pieces)
        except Exception:
            logger.exception("section chunking failed; chunking the document as a whole")
            return self.chunk(content)

    def _section_pieces(
        self,
        content: str,
        sections: Sequence[tuple[int, int, str]] | Sequence[Section],
        code: bool,
        measure: _Measure,
    ) -> list[_Piece]:
        """Trimmed, ordered, non-overlapping pieces; long sections windowed (level 3)."""
        length = len(content)
        pieces: list[_Piece] = []
        covered = 0  # sections overlapping earlier ones are clipped, never chunked twice
        for section in sorted((_as_section(s) for s in sections), key=lambda s: s.start):
            start = max(min(section.start, length), covered, 0)
            end = max(min(section.end, length), start)
            covered = max(covered, end)
            start, end = _trim(content, start, end)
            if start >= end:
                continue
            size = measure.size(start, end)
            if size <= measure.limit:
                pieces.append(_Piece(start, end, [section], size < measure.small))
                continue
            for span_start, span_end in measure.window(start, end, code):
                pieces.append(_Piece(span_start, span_end, [section], False))
        return pieces

    def _merge_pieces(self, pieces: list[_Piece], measure: _Measure) -> list[_Piece]:
        """Merge runs of small pieces, like :meth:`_merge` does for paragraphs (level 2).

        Only pieces made of sections shorter than ``min_chunk_size`` merge, so a section
        of normal size (a function, an rST section) keeps its own chunk and metadata.
        """
        min_size, max_size, size = measure.small, measure.limit, measure.size
        total = size(pieces[0].start, pieces[-1].end) if pieces else 0
        if 0 < total < 2 * min_size and total <= max_size:
            sections = [s for piece in pieces for s in piece.sections]
            return [_Piece(pieces[0].start, pieces[-1].end, sections, True)]
        merged: list[_Piece] = []

        def emit(piece: _Piece) -> None:
            last = merged[-1] if merged else None
            if (
                last is not None
                and piece.small
                and last.small
                and size(piece.start, piece.end) < min_size
                and size(last.start, piece.end) <= max_size
            ):
                last.end = piece.end
                last.sections.extend(piece.sections)
            else:
                merged.append(piece)

        current: _Piece | None = None
        for piece in pieces:
            if (
                current is not None
                and current.small
                and piece.small
                and size(current.start, current.end) < min_size
                and size(current.start, piece.end) <= max_size
            ):
                current.end = piece.end
                current.sections.extend(piece.sections)
                continue
            if current is not None:
                emit(current)
            current = _Piece(piece.start, piece.end, list(piece.sections), piece.small)
        if current is not None:
            emit(current)
        return merged

    def _merge(self, blocks: list[_Block]) -> list[tuple[int, int, int, bool]]:
        """Join small blocks with their neighbours in the same section (level 2).

        A piece grows while it is shorter than ``min_chunk_size``; a small piece left at
        the end of a section joins the piece before it. A section holding only its heading
        line is joined to the next section, so a heading followed directly by a sub-heading
        does not become a chunk of its own.
        """
        min_size, max_size = self.config.min_chunk_size, self.config.max_chunk_size
        pieces: list[_Block] = []

        def emit(piece: _Block) -> None:
            last = pieces[-1] if pieces else None
            if (
                last is not None
                and piece.end - piece.start < min_size
                and last.section == piece.section
                and piece.end - last.start <= max_size
            ):
                last.end = piece.end
                last.kind = "text"
            else:
                pieces.append(piece)

        current: _Block | None = None
        for block in blocks:
            if current is None:
                current = _Block(block.start, block.end, block.kind, block.section)
                continue
            heading_only = current.kind == "heading"
            same_section = block.section == current.section or heading_only
            small = current.end - current.start < min_size
            if same_section and (small or heading_only) and block.end - current.start <= max_size:
                current.end = block.end
                current.section = block.section
                # A heading joined to a code block still windows like code.
                current.kind = "code" if heading_only and block.kind == "code" else "text"
                continue
            emit(current)
            current = _Block(block.start, block.end, block.kind, block.section)
        if current is not None:
            emit(current)
        return [(p.start, p.end, p.section, p.kind == "code") for p in pieces]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) past whitespace at both ends."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _parse_blocks(content: str, title: str) -> tuple[list[_Block], list[str]]:
    """Split the document into heading, paragraph and code blocks (levels 1 and 2).

    Returns the blocks and the heading path of every section; section 0 is the text
    before the first heading, whose heading is ``title``.
    """
    headings = [title]
    stack: list[tuple[int, str]] = []
    blocks: list[_Block] = []
    current: _Block | None = None
    fence: str | None = None
    previous_text_line: tuple[int, str] | None = None  # (start, text) of a 1-line paragraph

    def flush() -> None:
        nonlocal current
        if current is not None:
            blocks.append(current)
            current = None

    def open_section(level: int, text: str) -> int:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text))
        headings.append(" > ".join(name for _, name in stack if name))
        return len(headings) - 1

    position = _front_matter_end(content)
    if position:
        current = _Block(0, position, "text", 0)
        flush()
    length = len(content)
    while position < length:
        newline = content.find("\n", position)
        line_end = length if newline < 0 else newline
        next_position = length if newline < 0 else newline + 1
        line = content[position:line_end].rstrip("\r")
        line_start = position
        position = next_position

        if fence is not None and current is not None:
            current.end = line_end
            if _closes_fence(line, fence):
                fence = None
                flush()
            continue
        if not line.strip():
            flush()
            previous_text_line = None
            continue
        fence_match = _FENCE.match(line)
        if fence_match:
            flush()
            fence = fence_match.group(1)
            current = _Block(line_start, line_end, "code", len(headings) - 1)
            previous_text_line = None
            continue
        atx = _ATX.fullmatch(line)
        if atx:
            flush()
            section = open_section(len(atx.group(1)), clean_heading(atx.group(2) or ""))
            blocks.append(_Block(line_start, line_end, "heading", section))
            previous_text_line = None
            continue
        setext = _SETEXT.fullmatch(line)
        if setext and previous_text_line is not None and current is not None:
            text_start, text = previous_text_line
            level = 1 if setext.group(1)[0] == "=" else 2
            current = None
            section = open_section(level, clean_heading(text))
            blocks.append(_Block(text_start, line_end, "heading", section))
            previous_text_line = None
            continue
        if current is None:
            current = _Block(line_start, line_end, "text", len(headings) - 1)
            single = not _NOT_SETEXT_TEXT.match(line)
            previous_text_line = (line_start, line) if single else None
        else:
            current.end = line_end
            previous_text_line = None
    flush()
    return blocks, headings


def _front_matter_end(content: str) -> int:
    """End of a leading YAML front matter block (``---`` / ``key: value`` … ``---``), else 0."""
    match = _FRONT_MATTER.match(content)
    return match.end() if match else 0


def _closes_fence(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (
        len(line) - len(line.lstrip(" ")) <= 3
        and len(stripped) >= len(fence)
        and stripped == fence[0] * len(stripped)
    )


def _window(
    text: str, start: int, end: int, config: ChunkConfig, is_code: bool
) -> list[tuple[int, int]]:
    """Cut [start, end) into trimmed pieces of at most max_chunk_size (level 3)."""
    max_size = config.max_chunk_size
    overlap = int(max_size * config.overlap_ratio)
    spans: list[tuple[int, int]] = []
    position, end = _trim(text, start, end)
    while position < end:
        if end - position <= max_size:
            spans.append((position, end))
            break
        cut = _break_point(text, position, position + max_size, is_code)
        piece = _trim(text, position, cut)
        if piece[0] < piece[1]:
            spans.append(piece)
        following = _word_start(text, max(cut - overlap, position + 1), cut)
        position, _ = _trim(text, following, end)
    return spans


def _break_point(text: str, start: int, limit: int, is_code: bool) -> int:
    """Where a piece starting at ``start`` should end, at most at ``limit``.

    Looks in the second half of the window for, in order: a paragraph break, a
    sentence end (for prose) or a line end (for code), a clause end, any whitespace.
    Cuts inside a word only when none of those exist (e.g. a long run of CJK text).
    """
    low = start + (limit - start) // 2
    window = text[low:limit]
    paragraph = window.rfind("\n\n")
    if paragraph > 0:
        return low + paragraph
    patterns = (_NEWLINE, _SENTENCE_END) if is_code else (_SENTENCE_END, _NEWLINE)
    for pattern in (*patterns, _CLAUSE_END, _SPACE):
        matches = list(pattern.finditer(window))
        if matches:
            return low + matches[-1].end()
    return limit


def _word_start(text: str, position: int, limit: int) -> int:
    """The first position at or after ``position`` (before ``limit``) that starts a word."""
    if position <= 0 or text[position - 1].isspace() or _is_cjk(text[position]):
        return position
    for index in range(position, limit):
        if text[index].isspace():
            return index + 1
    return position


def _is_cjk(char: str) -> bool:
    return (
        "\u2e80" <= char <= "\u9fff" or "\uac00" <= char <= "\ud7af" or "\uf900" <= char <= "\ufaff"
    )


def _to_chunks(content: str, spans: list[tuple[int, int, str]]) -> list[KnowledgeChunk]:
    newlines = [match.start() for match in _NEWLINE.finditer(content)]
    chunks = []
    for index, (start, end, heading) in enumerate(spans):
        chunks.append(
            KnowledgeChunk(
                chunk_index=index,
                content=content[start:end],
                heading=heading,
                start_position=start,
                end_position=end,
                metadata={
                    "start_line": bisect.bisect_left(newlines, start) + 1,
                    "end_line": bisect.bisect_left(newlines, end - 1) + 1,
                },
            )
        )
    return chunks


def _as_section(section: Section | tuple[Any, ...]) -> Section:
    if isinstance(section, Section):
        return section
    start, end, heading, *rest = section
    return Section(int(start), int(end), str(heading), rest[0] if rest else {})


def _join_headings(headings: Sequence[str]) -> str:
    """Distinct headings joined by ", ", leaving out one that is a parent of the next.

    A heading with the same parent path as the one before it is shortened to its last
    part: ``A > x`` and ``A > y`` give ``A > x, y``.
    """
    distinct = list(dict.fromkeys(h for h in headings if h))
    kept = [
        heading
        for index, heading in enumerate(distinct)
        if not any(other.startswith(heading + " > ") for other in distinct[index + 1 :])
    ]
    parts: list[str] = []
    for index, heading in enumerate(kept):
        parent, separator, last = heading.rpartition(" > ")
        previous_parent = kept[index - 1].rpartition(" > ")[0] if index else None
        parts.append(last if separator and parent == previous_parent else heading)
    return ", ".join(parts)


def _common_metadata(sections: Sequence[Section]) -> dict[str, Any]:
    """The metadata entries every section agrees on (all of it for one section)."""
    first, *others = sections
    return {
        key: value
        for key, value in first.metadata.items()
        if all(key in other.metadata and other.metadata[key] == value for other in others)
    }


def _piece_chunks(content: str, pieces: list[_Piece]) -> list[KnowledgeChunk]:
    spans = [
        (piece.start, piece.end, _join_headings([s.heading for s in piece.sections]))
        for piece in pieces
    ]
    chunks = _to_chunks(content, spans)
    for chunk, piece in zip(chunks, pieces, strict=True):
        # Deep copy: pieces of one section must not share mutable metadata values.
        metadata = copy.deepcopy(_common_metadata(piece.sections))
        metadata.update(chunk.metadata)  # start_line / end_line are always derived
        chunk.metadata = metadata
    _mark_sections(chunks, [(s.start, s.heading) for p in pieces for s in p.sections])
    return chunks


def _mark_sections(chunks: list[KnowledgeChunk], starts: Sequence[tuple[int, str]]) -> None:
    """Give a chunk holding the start of a later section ``metadata["sections"]``: a list of
    ``[offset in the chunk, heading path]``, so a passage inside it can say which section it
    sits in (the chunk's own heading names the section it starts in)."""
    ordered = sorted(starts)
    positions = [position for position, _ in ordered]
    for chunk in chunks:
        first = bisect.bisect_right(positions, chunk.start_position)
        last = bisect.bisect_left(positions, chunk.end_position)
        inside = [
            [position - chunk.start_position, heading]
            for position, heading in ordered[first:last]
            if heading
        ]
        if inside:
            chunk.metadata["sections"] = inside
