"""HTML to Markdown-like text in one pass, without building a tree.

For pages too big or too deeply nested for a BeautifulSoup tree (which costs about 25
times the page's text in memory, and whose conversion recurses once per level): the
stdlib ``html.parser`` feeds events to a stack of open elements, and each element turns
its own text into Markdown blocks as it closes, so memory is the text and the output.

The output has the shape of :func:`~knowledge_agent.processors.html_markdown.to_markdown`
(title, main content, headings, lists, tables, ``<pre>`` blocks as Markdown) and follows
the same rules, with these approximations: the main element is chosen from a scan of the
markup before parsing; whether a class-matched chrome element holds half the page's text
is judged against an estimate of that text; a block element inside a paragraph, heading
or table cell keeps its text instead of losing it; list, quote and definition nesting
deeper than :data:`MAX_NESTING` is flattened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

# One set of rules for both ways of converting a page.
from knowledge_agent.processors.html_markdown import (
    BLOCK_TAGS,
    CHROME,
    CHROME_TEXT_SHARE,
    DROP_ROLES,
    DROP_TAGS,
    HEADINGS,
    LANGUAGE_CLASS,
    SPACES,
    append_block,
    fenced_block,
    indent_block,
    paragraph,
    table_block,
)

__all__ = ["MAX_NESTING", "StreamedPage", "stream_markdown"]

MAX_NESTING = 32
"""Lists, quotes and definitions nested deeper than this are rendered flat."""

_FEED = 1 << 16  # characters per parser feed: the parser's buffer stays small
# The elements html.parser never closes (bs4's list): they hold no content.
_VOID = frozenset(
    {
        "area", "base", "basefont", "bgsound", "br", "col", "command", "embed", "frame",
        "hr", "image", "img", "input", "isindex", "keygen", "link", "menuitem", "meta",
        "nextid", "param", "source", "spacer", "track", "wbr",
    }
)  # fmt: skip
_INLINE_CODE = frozenset({"code", "kbd", "samp", "tt"})
_NESTING = frozenset({"ul", "ol", "menu", "blockquote", "dd"})
_MAIN = re.compile(r"<main[\s/>]", re.IGNORECASE)
_ARTICLE = re.compile(r"<article[\s/>]", re.IGNORECASE)
_ROLE_MAIN = re.compile(r"""<[a-zA-Z][^>]*\srole\s*=\s*["']?main["'\s/>]""")
_BODY = re.compile(r"<body[\s/>]", re.IGNORECASE)
_TEXT_RUN = re.compile(r">([^<]+)")
_RAW_TEXT = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)


@dataclass
class StreamedPage:
    """What :func:`stream_markdown` found: the fields ``HtmlProcessor`` needs."""

    content: str
    title: str
    first_h1: str
    description: str


@dataclass
class _Frame:
    """An open element. ``blocks`` is set on containers (they collect Markdown blocks);
    ``parts`` on every element that collects inline text (a container's is its current
    paragraph)."""

    name: str
    kind: str
    blocks: list[str] | None = None
    parts: list[str] | None = None
    flushes: int = 0  # paragraphs this container has ended, to undo inline chrome safely
    # list state
    ordered: bool = False
    number: int = 1
    items: list[str] = field(default_factory=list)
    # table state
    rows: list[list[str]] = field(default_factory=list)
    cells: list[str] | None = None
    caption: list[str] = field(default_factory=list)
    # pre / code
    language: str = ""
    code_seen: bool = False
    # chrome decided when the element closes
    chrome: bool = False
    header: bool = False
    has_heading: bool = False
    text_at_open: int = 0
    sink: _Frame | None = None  # inline chrome: where its text went, and how far
    sink_parts: int = 0
    sink_flushes: int = 0
    region: bool = False


def stream_markdown(text: str) -> StreamedPage:
    """Title, main content as Markdown-like text, first ``<h1>`` and description of a page."""
    parser = _StreamParser(_choose_region(text), _estimate_text(text))
    for start in range(0, len(text), _FEED):
        parser.feed(text[start : start + _FEED])
    parser.close()
    return parser.result()


def _choose_region(text: str) -> str:
    """``main``, ``article``, ``role`` or ``body``: the element ``main_content`` would pick."""
    if _MAIN.search(text):
        return "main"
    articles = 0
    for _ in _ARTICLE.finditer(text):
        articles += 1
        if articles > 1:
            break
    if articles == 1:
        return "article"
    if _ROLE_MAIN.search(text):
        return "role"
    return "body" if _BODY.search(text) else "all"


def _estimate_text(text: str) -> int:
    """About how many characters of text the page holds, scripts and styles left out."""
    total = sum(match.end(1) - match.start(1) for match in _TEXT_RUN.finditer(text))
    raw = sum(match.end() - match.start() for match in _RAW_TEXT.finditer(text))
    return max(total - raw, 1)


class _StreamParser(HTMLParser):
    def __init__(self, region: str, total_text: int) -> None:
        super().__init__(convert_charrefs=True)
        self.region_kind = region
        self.total_text = total_text
        root = _Frame("#root", "container", blocks=[], parts=[])
        self.root = root
        self.stack: list[_Frame] = [root]
        self.open_names: dict[str, int] = {}
        self.in_region = region == "all"
        self.region_done = False
        self.skip = 0  # open dropped elements: their text is ignored
        self.nesting = 0
        self.text_seen = 0
        self.headers: list[_Frame] = []
        self.title: list[str] | None = None
        self.title_text: str | None = None
        self.h1_depth = 0
        self.h1_parts: list[str] | None = None
        self.h1_region: str | None = None
        self.h1_any: str | None = None
        self.meta: dict[str, str] = {}

    # -- events --------------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "meta":
            self._meta(values)
        if tag in _VOID:
            self._void(tag, values)
            return
        self._open(tag, values)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # <br/>, <img/>; <div/> is an empty element, as bs4 makes it.
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open_names.get(tag):
            return  # closes nothing that is open: ignored, as bs4 ignores it
        while True:
            frame = self.stack.pop()
            self.open_names[frame.name] -= 1
            self._close(frame)
            if frame.name == tag:
                return

    def handle_data(self, data: str) -> None:
        if self.title is not None:
            self.title.append(data)
        if self.h1_parts is not None:
            self.h1_parts.append(data)
        if self.skip:
            return
        self.text_seen += len(data)
        if not self.in_region:
            return
        sink = self._sink()
        assert sink.parts is not None
        sink.parts.append(data if sink.kind in ("pre", "code") else SPACES.sub(" ", data))

    def result(self) -> StreamedPage:
        while len(self.stack) > 1:
            frame = self.stack.pop()
            self._close(frame)
        self._flush(self.root)
        assert self.root.blocks is not None
        description = self.meta.get("description") or self.meta.get("og:description", "")
        return StreamedPage(
            content="\n\n".join(self.root.blocks),
            title=_clean(self.title_text or ""),
            first_h1=_clean(self.h1_region or self.h1_any or ""),
            description=description,
        )

    # -- opening -------------------------------------------------------------------------

    def _meta(self, values: dict[str, str]) -> None:
        content = values.get("content", "")
        for key in ("name", "property"):
            name = values.get(key, "")
            wanted = "description" if key == "name" else "og:description"
            if name == wanted and wanted not in self.meta and content.strip():
                self.meta[wanted] = _clean(content)

    def _void(self, tag: str, values: dict[str, str]) -> None:
        if self.skip or not self.in_region or tag not in ("br", "img"):
            return
        sink = self._sink()
        assert sink.parts is not None
        if tag == "br":
            sink.parts.append("\n")
        elif values.get("alt", "").strip():
            sink.parts.append(f" {values['alt']} ")

    def _open(self, tag: str, values: dict[str, str]) -> None:
        parent = self.stack[-1]
        frame = _Frame(tag, "inline")
        if tag == "title" and self.title_text is None and self.title is None:
            self.title = []
            frame.kind = "title"
        if tag == "h1":
            self.h1_depth += 1
            if self.h1_parts is None and (self.h1_any is None or self.h1_region is None):
                self.h1_parts = []
        if self.skip or parent.kind == "skip":
            frame.kind = "skip"
            self.skip += 1
        elif not self.in_region:
            if not self.region_done and self._is_region(tag, values):
                self.in_region = True
                frame.region = True
                frame.kind = "container"
                frame.blocks, frame.parts = [], []
        elif self._dropped(tag, values):
            frame.kind = "skip"
            self.skip += 1
        else:
            self._shape(frame, tag, values)
        if tag in HEADINGS and frame.kind != "skip":
            for header in self.headers:
                header.has_heading = True
        self.stack.append(frame)
        self.open_names[tag] = self.open_names.get(tag, 0) + 1

    def _is_region(self, tag: str, values: dict[str, str]) -> bool:
        kind = self.region_kind
        if kind == "role":
            return values.get("role") == "main"
        return tag == kind

    def _dropped(self, tag: str, values: dict[str, str]) -> bool:
        if tag in DROP_TAGS or tag == "footer" or "hidden" in values:
            return True
        return values.get("role", "").lower() in DROP_ROLES

    def _shape(self, frame: _Frame, tag: str, values: dict[str, str]) -> None:
        """Decide what an element inside the main content collects."""
        sink = self._sink()
        frame.text_at_open = self.text_seen
        frame.chrome = _is_chrome(values)
        frame.header = tag == "header"
        if frame.header:
            self.headers.append(frame)
        if sink.kind in ("pre", "code"):
            if tag == "code" and sink.kind == "pre" and not sink.code_seen:
                sink.code_seen = True  # only the first <code> names the language
                sink.language = sink.language or _language(values)
            return  # their text is taken as it is
        if tag in _INLINE_CODE:
            frame.kind, frame.parts = "code", []
            return
        if sink.blocks is None or tag not in BLOCK_TAGS:
            if frame.chrome or frame.header:
                frame.sink = sink
                assert sink.parts is not None
                frame.sink_parts, frame.sink_flushes = len(sink.parts), sink.flushes
            return
        if self._table() is not None:
            # Between a table and its cells: rows, cells and caption count; thead, tbody
            # and the like are transparent.
            if tag in ("tr", "th", "td", "caption"):
                self._table_part(frame, tag)
            return
        container = self._container()
        self._flush(container)
        if tag in HEADINGS or tag == "p":
            frame.kind, frame.parts = ("heading" if tag in HEADINGS else "para"), []
        elif tag == "pre":
            frame.kind, frame.parts = "pre", []
            frame.language = _language(values)
        elif tag in ("ul", "ol", "menu") and self.nesting < MAX_NESTING:
            frame.kind, frame.ordered = "list", tag == "ol"
            start = values.get("start", "")
            frame.number = int(start) if tag == "ol" and start.strip().isdigit() else 1
            self.nesting += 1
        elif tag == "table":
            frame.kind = "table"
        else:
            frame.kind, frame.blocks, frame.parts = "container", [], []
            if tag in ("blockquote", "dd"):
                if self.nesting < MAX_NESTING:
                    frame.kind = "quote" if tag == "blockquote" else "dd"
                    self.nesting += 1
            elif tag == "li" and self.stack[-1].kind == "list":
                frame.kind = "item"

    def _table_part(self, frame: _Frame, tag: str) -> None:
        table = self._table()
        assert table is not None
        if tag == "tr":
            frame.kind = "row"
            table.cells = []
        elif tag == "caption":
            frame.kind, frame.parts = "caption", []
        elif table.cells is not None and self.stack[-1].kind == "row":
            frame.kind, frame.parts = "cell", []

    # -- closing -------------------------------------------------------------------------

    def _close(self, frame: _Frame) -> None:
        if frame.name == "h1":
            self.h1_depth -= 1
            if self.h1_depth == 0 and self.h1_parts is not None:
                self._h1_done("".join(self.h1_parts))
        if frame.kind == "title":
            self.title_text = "".join(self.title or [])
            self.title = None
        if frame.kind == "skip":
            self.skip -= 1
            return
        if frame.region:
            self._flush(frame)
            assert frame.blocks is not None and self.root.blocks is not None
            self.root.blocks.extend(frame.blocks)
            self.in_region, self.region_done = False, True
            return
        if not self.in_region:
            return
        if frame.header:
            self.headers.remove(frame)
        keep = not (frame.header and not frame.has_heading)
        if keep and frame.chrome:
            keep = self.text_seen - frame.text_at_open > CHROME_TEXT_SHARE * self.total_text
        if frame.kind in _NESTING_KINDS:
            self.nesting -= 1
        if not keep:
            self._drop_inline(frame)
            return
        blocks = self._render(frame)
        if blocks is None:
            return
        container = self._container()
        self._flush(container)
        assert container.blocks is not None
        for block in blocks:
            append_block(container.blocks, block)

    def _drop_inline(self, frame: _Frame) -> None:
        sink = frame.sink
        if sink is not None and sink.parts is not None and sink.flushes == frame.sink_flushes:
            del sink.parts[frame.sink_parts :]

    def _render(self, frame: _Frame) -> list[str] | None:
        """The blocks a closing element adds to its container; None for inline ones."""
        kind = frame.kind
        text = "".join(frame.parts or ())
        if kind == "code":
            code = SPACES.sub(" ", text).strip()
            if code:
                tick = "``" if "`" in code else "`"
                assert self._sink().parts is not None
                self._sink().parts.append(f"{tick}{code}{tick}")  # type: ignore[union-attr]
            return None
        if kind == "cell" or kind == "caption":
            table = self._table()
            if table is not None:
                if kind == "cell" and table.cells is not None:
                    table.cells.append(SPACES.sub(" ", text).strip().replace("|", "\\|"))
                elif kind == "caption":
                    table.caption.append(text)
            return None
        if kind == "row":
            table = self._table()
            if table is not None and table.cells is not None:
                if any(table.cells):
                    table.rows.append(table.cells)
                table.cells = None
            return None
        if kind == "heading":
            heading = SPACES.sub(" ", text).strip()
            return [f"{'#' * HEADINGS[frame.name]} {heading}"] if heading else []
        if kind == "para":
            block = paragraph([text])
            return [block] if block else []
        if kind == "pre":
            return fenced_block(text, frame.language)
        if kind == "list":
            listing = "\n".join(frame.items)
            return [listing] if listing else []
        if kind == "table":
            return _table_blocks(frame)
        if kind in ("container", "item", "quote", "dd"):
            self._flush(frame)
            blocks = frame.blocks or []
            if kind == "item":
                body = "\n".join(blocks)
                parent = self.stack[-1]
                if body.strip() and parent.kind == "list":
                    marker = f"{parent.number}. " if parent.ordered else "- "
                    parent.number += 1
                    parent.items.append(indent_block(body, marker, " " * len(marker)))
                return []
            if kind == "quote":
                inner = "\n\n".join(blocks)
                if not inner:
                    return []
                return ["\n".join(f"> {line}".rstrip() for line in inner.split("\n"))]
            if kind == "dd":
                inner = "\n".join(blocks)
                return [indent_block(inner, "  ", "  ")] if inner else []
            return blocks
        return None

    # -- helpers -------------------------------------------------------------------------

    def _sink(self) -> _Frame:
        """The innermost element collecting inline text."""
        for frame in reversed(self.stack):
            if frame.parts is not None:
                return frame
        return self.root

    def _container(self) -> _Frame:
        for frame in reversed(self.stack):
            if frame.blocks is not None:
                return frame
        return self.root

    def _table(self) -> _Frame | None:
        for frame in reversed(self.stack):
            if frame.kind == "table":
                return frame
            if frame.blocks is not None:
                return None
        return None

    def _flush(self, container: _Frame) -> None:
        """End the container's current paragraph."""
        if container.parts:
            assert container.blocks is not None
            append_block(container.blocks, paragraph(container.parts))
            container.parts = []
            container.flushes += 1

    def _h1_done(self, text: str) -> None:
        if self.h1_any is None:
            self.h1_any = text
        if self.h1_region is None and self.in_region:
            self.h1_region = text
        self.h1_parts = None


_NESTING_KINDS = frozenset({"list", "quote", "dd"})


def _table_blocks(table: _Frame) -> list[str]:
    out: list[str] = []
    if table.caption:
        append_block(out, paragraph(table.caption))
    block = table_block(table.rows)
    if block:
        out.append(block)
    return out


def _is_chrome(values: dict[str, str]) -> bool:
    tokens = values.get("class", "").split()
    if values.get("id"):
        tokens.append(values["id"])
    return any(CHROME.search(token) for token in tokens)


def _language(values: dict[str, str]) -> str:
    for token in values.get("class", "").split():
        match = LANGUAGE_CLASS.match(token)
        if match:
            return match.group(1)
    return ""


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
