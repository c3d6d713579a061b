"""HTML to Markdown-like text, so the chunker sees the page's structure.

Headings become ``#`` lines, lists ``-`` / ``1.`` items (nested ones indented), tables
pipe tables, ``<pre>`` fenced code blocks with their whitespace kept exactly, inline
``<code>`` backticks; links keep their text. Page chrome (navigation, headers, footers,
sidebars, scripts, forms) is removed first by :func:`strip_page_chrome`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import CData, Comment, Declaration, Doctype, ProcessingInstruction

__all__ = [
    "BLOCK_TAGS",
    "CHROME",
    "CHROME_TEXT_SHARE",
    "DROP_ROLES",
    "DROP_TAGS",
    "HEADINGS",
    "LANGUAGE_CLASS",
    "SPACES",
    "append_block",
    "fenced_block",
    "indent_block",
    "main_content",
    "paragraph",
    "strip_page_chrome",
    "table_block",
    "table_row",
    "to_markdown",
]

DROP_TAGS = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "aside",
    "form",
    "svg",
    "button",
    "iframe",
    "object",
    "embed",
    "canvas",
    "select",
    "input",
    "textarea",
    "link",
    "meta",
)
DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "search", "complementary", "menu", "menubar"}
)
# Class / id tokens of sidebars, menus, tables of contents and similar chrome.
CHROME = re.compile(
    r"^(?:nav|navbar|navigation|menu|menu-bar|menubar|toc|table-of-contents|breadcrumbs?"
    r"|skip-?link|site-header|site-footer|pagination|pager|headerlink|cookie-?(?:banner|consent)"
    r"|share|social)$|(?:^|[-_])(?:sidebar|sidenav|side-bar)(?:$|[-_])",
    re.IGNORECASE,
)
BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hgroup",
        "hr",
        "html",
        "li",
        "main",
        "menu",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
    }
)
_BLOCK_NAMES = sorted(BLOCK_TAGS)  # bs4 searches take a list of names
HEADINGS = {f"h{level}": level for level in range(1, 7)}
_SKIPPED_STRINGS = (Comment, Doctype, Declaration, ProcessingInstruction, CData)
SPACES = re.compile(r"[ \t\n\r\f\v]+")
_HEADING_LIKE = re.compile(r"[ ]{0,3}(?:#{1,6}(?:[ \t]|$)|```|~~~)")
LANGUAGE_CLASS = re.compile(r"^(?:language|lang)-([\w+#.-]+)$")
_FENCE_RUN = re.compile(r"^[ \t]*(`{3,}|~{3,})", re.MULTILINE)
CHROME_TEXT_SHARE = 0.5  # never drop a class-matched element holding half the page text


def main_content(soup: BeautifulSoup) -> Tag | BeautifulSoup:
    """``<main>``, else a single ``<article>``, else ``[role=main]``, else ``<body>``."""
    main = soup.find("main")
    if isinstance(main, Tag):
        return main
    articles = soup.find_all("article")
    if len(articles) == 1:
        return articles[0]
    role_main = soup.find(attrs={"role": "main"})
    if isinstance(role_main, Tag):
        return role_main
    body = soup.find("body")
    return body if isinstance(body, Tag) else soup


def strip_page_chrome(root: Tag | BeautifulSoup) -> None:
    """Remove navigation, sidebars, scripts, forms and other chrome below ``root``.

    A ``<header>`` holding a heading (an article's title block) is kept; a class- or
    id-matched element holding most of the text is kept too, so a wrapper whose class
    happens to say "menu" cannot take the content with it.
    """
    for tag in root.find_all(list(DROP_TAGS)):
        tag.decompose()
    total = len(root.get_text())
    for tag in root.find_all(True):
        # Not ``tag.decomposed``: on an element not decomposed, bs4 answers that through
        # ``tag._decomposed``, a search of the whole subtree for such a tag (quadratic).
        if vars(tag).get("_decomposed", False):
            continue
        if tag.name in ("header", "footer"):
            if tag.name == "footer" or not tag.find(list(HEADINGS)):
                tag.decompose()
            continue
        if tag.has_attr("hidden") or str(tag.get("role", "")).lower() in DROP_ROLES:
            tag.decompose()
            continue
        if _is_chrome(tag) and len(tag.get_text()) <= CHROME_TEXT_SHARE * total:
            tag.decompose()


def _is_chrome(tag: Tag) -> bool:
    tokens = list(tag.get("class") or [])
    tag_id = tag.get("id")
    if isinstance(tag_id, str):
        tokens.append(tag_id)
    return any(CHROME.search(token) for token in tokens)


def to_markdown(root: Tag | BeautifulSoup) -> str:
    """The Markdown-like text of ``root``: blocks separated by blank lines."""
    return "\n\n".join(_Renderer().blocks(root))


class _Renderer:
    """Walks the tree; block elements give blocks, inline runs give paragraphs."""

    def blocks(self, node: Tag | BeautifulSoup) -> list[str]:
        out: list[str] = []
        inline: list[str] = []
        for child in node.children:
            if isinstance(child, NavigableString):
                if not isinstance(child, _SKIPPED_STRINGS):
                    inline.append(SPACES.sub(" ", str(child)))
                continue
            if not isinstance(child, Tag):
                continue
            if child.name in BLOCK_TAGS or child.find(_BLOCK_NAMES) is not None:
                append_block(out, paragraph(inline))
                inline = []
                out.extend(self.block(child))
            else:
                inline.append(self.inline(child))
        append_block(out, paragraph(inline))
        return out

    def block(self, tag: Tag) -> list[str]:
        name = tag.name
        if name in HEADINGS:
            text = SPACES.sub(" ", self.inline(tag)).strip()
            return [f"{'#' * HEADINGS[name]} {text}"] if text else []
        if name == "p":
            text = paragraph([self.inline(tag)])
            return [text] if text else []
        if name == "pre":
            return _fenced(tag)
        if name in ("ul", "ol", "menu"):
            listing = self.listing(tag, ordered=name == "ol")
            return [listing] if listing else []
        if name == "table":
            return self.table(tag)
        if name == "blockquote":
            inner = "\n\n".join(self.blocks(tag))
            return ["\n".join(f"> {line}".rstrip() for line in inner.split("\n"))] if inner else []
        if name == "hr":
            return []
        if name == "dd":
            inner = "\n".join(self.blocks(tag))
            return [indent_block(inner, "  ", "  ")] if inner else []
        return self.blocks(tag)

    def inline(self, tag: Tag) -> str:
        name = tag.name
        if name == "br":
            return "\n"
        if name == "img":
            alt = tag.get("alt")
            return f" {alt} " if isinstance(alt, str) and alt.strip() else ""
        if name in ("code", "kbd", "samp", "tt"):
            text = SPACES.sub(" ", tag.get_text()).strip()
            if not text:
                return ""
            tick = "``" if "`" in text else "`"
            return f"{tick}{text}{tick}"
        parts: list[str] = []
        for child in tag.children:
            if isinstance(child, NavigableString):
                if not isinstance(child, _SKIPPED_STRINGS):
                    parts.append(SPACES.sub(" ", str(child)))
            elif isinstance(child, Tag):
                parts.append(self.inline(child) if child.name not in BLOCK_TAGS else " ")
        return "".join(parts)

    def listing(self, tag: Tag, *, ordered: bool) -> str:
        start = tag.get("start")
        number = int(start) if isinstance(start, str) and start.strip().isdigit() else 1
        items: list[str] = []
        for item in tag.find_all("li", recursive=False):
            body = "\n".join(self.blocks(item))
            if not body.strip():
                continue
            marker = f"{number}. " if ordered else "- "
            number += 1
            items.append(indent_block(body, marker, " " * len(marker)))
        return "\n".join(items)

    def table(self, tag: Tag) -> list[str]:
        out: list[str] = []
        caption = tag.find("caption")
        if isinstance(caption, Tag):
            append_block(out, paragraph([self.inline(caption)]))
        rows: list[list[str]] = []
        for row in tag.find_all("tr"):
            if row.find_parent("table") is not tag:
                continue  # a row of a nested table
            cells = [
                SPACES.sub(" ", self.inline(cell)).strip().replace("|", "\\|")
                for cell in row.find_all(("th", "td"), recursive=False)
            ]
            if any(cells):
                rows.append(cells)
        block = table_block(rows)
        if block:
            out.append(block)
        return out


def append_block(out: list[str], block: str | None) -> None:
    if block:
        out.append(block)


def paragraph(parts: Iterable[str]) -> str | None:
    """Inline text as one paragraph: spaces collapsed, ``<br>`` line breaks kept."""
    lines = [SPACES.sub(" ", line).strip() for line in "".join(parts).split("\n")]
    text = "\n".join(line for line in lines if line)
    if not text:
        return None
    # A paragraph line that would read as a Markdown heading or fence is escaped.
    return "\n".join(
        "\\" + line if _HEADING_LIKE.match(line) else line for line in text.split("\n")
    )


def _fenced(pre: Tag) -> list[str]:
    """A ``<pre>`` as a fenced code block, its text kept exactly."""
    return fenced_block(pre.get_text(), _code_language(pre))


def fenced_block(code: str, language: str) -> list[str]:
    """The text of a ``<pre>`` as a fenced code block (none when it is blank)."""
    if code.startswith("\n"):
        code = code[1:]  # HTML ignores a newline right after <pre>
    code = code.rstrip("\n")
    if not code.strip():
        return []
    runs = [len(match.group(1)) for match in _FENCE_RUN.finditer(code) if match.group(1)[0] == "`"]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [f"{fence}{language}\n{code}\n{fence}"]


def _code_language(pre: Tag) -> str:
    code = pre.find("code")
    for tag in (pre, code):
        if isinstance(tag, Tag):
            for token in tag.get("class") or []:
                match = LANGUAGE_CLASS.match(token)
                if match:
                    return match.group(1)
    return ""


def indent_block(text: str, first: str, rest: str) -> str:
    """Prefix the first line with ``first`` and later ones with ``rest``.

    Fenced code blocks are left at column 0 so their lines stay verbatim; a block that
    starts with a fence puts the marker on a line of its own.
    """
    lines = text.split("\n")
    out: list[str] = []
    fence = ""
    for index, line in enumerate(lines):
        opener = _FENCE_RUN.match(line)
        if fence or opener:
            if index == 0:
                out.append(first.rstrip())
            out.append(line)
            if fence and line.strip() == fence:
                fence = ""
            elif not fence and opener:
                fence = opener.group(1)
            continue
        prefix = first if index == 0 else rest
        out.append(prefix + line if line else line)
    return "\n".join(out)


def table_block(rows: list[list[str]]) -> str | None:
    """Rows of cell texts as a Markdown table, the first row its header (None: no rows)."""
    if not rows:
        return None
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    lines = [table_row(rows[0]), table_row(["---"] * width)]
    lines.extend(table_row(row) for row in rows[1:])
    return "\n".join(lines)


def table_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
