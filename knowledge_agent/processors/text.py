"""Plain text, Markdown, structured data files and logs: decoded and chunked as text."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from knowledge_agent.chunking import Section
from knowledge_agent.chunking.headings import clean_heading
from knowledge_agent.processors.base import (
    BaseDataSourceProcessor,
    Extraction,
    block_sections,
    file_name,
    file_stem,
)
from knowledge_agent.processors.encoding import decode_bytes
from knowledge_agent.processors.front_matter import parse_front_matter

__all__ = ["DataProcessor", "LogProcessor", "MarkdownProcessor", "TextProcessor"]

_H1 = re.compile(r"[ ]{0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*")
_SETEXT_H1 = re.compile(r"[ ]{0,3}=+[ \t]*")
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")
_TAG_KEYS = ("tags", "keywords")


class TextProcessor(BaseDataSourceProcessor):
    """Plain text; the title is the file name without its extension."""

    name = "text"
    extensions = frozenset({".txt", ".text"})
    source_type = "text"
    content_type = "text/plain"

    def extract(self, data: bytes, path: str) -> Extraction:
        text, encoding = decode_bytes(data)
        return Extraction(content=text, title=file_stem(path), metadata={"encoding": encoding})


class MarkdownProcessor(BaseDataSourceProcessor):
    """Markdown with optional YAML front matter.

    Title: front matter ``title``, else the first ``# H1`` outside code fences, else the
    first line of text (:func:`first_line`), else the file stem. ``tags`` / ``keywords``
    become the item's tags; the other front matter fields go to ``metadata["front_matter"]``.
    The content keeps the front matter text: the chunker recognises it and it is part of
    the file a citation points into.
    """

    name = "markdown"
    extensions = frozenset({".md", ".markdown", ".mdown", ".mkd", ".mkdn", ".mdx"})
    source_type = "markdown"
    content_type = "text/markdown"

    def extract(self, data: bytes, path: str) -> Extraction:
        text, encoding = decode_bytes(data)
        front_matter, body_start = parse_front_matter(text)
        body = text[body_start:]
        title = _text_value(front_matter.get("title")) or first_h1(body) or first_line(body)
        metadata: dict[str, Any] = {"encoding": encoding}
        rest = {
            key: value
            for key, value in front_matter.items()
            if key != "title" and key not in _TAG_KEYS
        }
        if rest:
            metadata["front_matter"] = rest
        return Extraction(
            content=text,
            title=title or file_stem(path),
            tags=_tags(front_matter),
            metadata=metadata,
        )


class _LinesProcessor(BaseDataSourceProcessor):
    """Text cut at blank lines and line ends only: a ``# comment`` is not a heading here."""

    def _line_sections(self, text: str, heading: str) -> list[Section]:
        return block_sections(text, heading, max_size=self.chunker.config.max_chunk_size)


class DataProcessor(_LinesProcessor):
    """Structured data and configuration files, indexed as text; the title is the file name."""

    name = "data"
    extensions = frozenset(
        {
            ".json",
            ".jsonl",
            ".ndjson",
            ".yaml",
            ".yml",
            ".csv",
            ".tsv",
            ".toml",
            ".ini",
            ".cfg",
            ".conf",
            ".properties",
            ".xml",
        }
    )
    source_type = "data"
    content_type = "text/plain"

    _CONTENT_TYPES: ClassVar[dict[str, str]] = {
        ".json": "application/json",
        ".jsonl": "application/jsonl",
        ".ndjson": "application/x-ndjson",
        ".yaml": "application/yaml",
        ".yml": "application/yaml",
        ".csv": "text/csv",
        ".tsv": "text/tab-separated-values",
        ".toml": "application/toml",
        ".xml": "application/xml",
    }

    def extract(self, data: bytes, path: str) -> Extraction:
        text, encoding = decode_bytes(data)
        name = file_name(path)
        extension = _extension(name)
        return Extraction(
            content=text,
            title=name,
            sections=self._line_sections(text, name),
            code=True,
            content_type=self._CONTENT_TYPES.get(extension, self.content_type),
            metadata={"encoding": encoding, "format": extension.lstrip(".") or "text"},
        )


class LogProcessor(_LinesProcessor):
    """Log files, indexed as text; the title is the file name."""

    name = "log"
    extensions = frozenset({".log"})
    source_type = "log"
    content_type = "text/plain"

    def extract(self, data: bytes, path: str) -> Extraction:
        text, encoding = decode_bytes(data)
        name = file_name(path)
        return Extraction(
            content=text,
            title=name,
            sections=self._line_sections(text, name),
            code=True,
            metadata={"encoding": encoding},
        )


def first_h1(text: str) -> str:
    """The first level-1 heading (``# Title`` or ``Title`` over ``=====``) outside fenced
    code, else ``""``."""
    fence = ""
    previous = ""  # the line before, if it could be the text of a setext heading
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            continue
        if match:
            fence, previous = match.group(1), ""
            continue
        heading = _H1.fullmatch(line)
        if heading:
            return clean_heading(heading.group(1))
        if previous and _SETEXT_H1.fullmatch(line):
            return clean_heading(previous)
        previous = line.strip() if not line[:4].isspace() else ""
    return ""


_COMMENT = re.compile(r"<!--.*?-->", re.S)
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_LEAD = re.compile(r"\A(?:[ \t]*(?:#{1,6}|>|[-*+]|\d{1,9}[.)])[ \t]+)+")
# An admonition (``!!! note "Title"``, MkDocs and Python-Markdown): its title, if it has one.
_ADMONITION = re.compile(r'[ \t]*[!?]{3}\+?[ \t]+[\w-]+(?:[ \t]+"([^"]*)")?[ \t]*')
_RULE = re.compile(r"[ ]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
_TITLE_CHARS = 80


def first_line(text: str) -> str:
    """The first line of Markdown text as a title: outside code fences and HTML comments,
    without heading, quote and list markers, emphasis, images, link targets and tags (an
    admonition's title for an admonition), and not a template directive (``{% … %}``,
    ``{{ … }}``); cut to about 80 characters at a word. ``""`` when no line has a letter
    or digit."""
    fence = ""
    for line in _COMMENT.sub("", text).split("\n"):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            continue
        if match:
            fence = match.group(1)
            continue
        stripped = line.strip()
        if stripped.startswith(("{%", "{{", "{#", "[TOC]")) or _RULE.fullmatch(line):
            continue
        admonition = _ADMONITION.fullmatch(line)
        if admonition:
            line = admonition.group(1) or ""
        words = _TAG.sub("", _LINK.sub(r"\1", _IMAGE.sub("", line)))
        words = _LEAD.sub("", words, count=1).strip(" \t#*_`~|")
        words = " ".join(words.replace("**", "").replace("`", "").split())
        if any(char.isalnum() for char in words):
            return _shortened(words)
    return ""


def _shortened(words: str) -> str:
    if len(words) <= _TITLE_CHARS:
        return words
    cut = words[: _TITLE_CHARS - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > _TITLE_CHARS // 2 else cut).rstrip(" ,;:") + "…"


def _text_value(value: object) -> str:
    return str(value).strip() if isinstance(value, (str, int, float)) else ""


def _tags(front_matter: dict[str, Any]) -> list[str]:
    """Tags from ``tags`` and ``keywords``: a list, or a comma-separated string."""
    tags: list[str] = []
    for key in _TAG_KEYS:
        value = front_matter.get(key)
        items = value if isinstance(value, list) else str(value or "").split(",")
        tags.extend(str(item).strip() for item in items if item is not None and str(item).strip())
    return list(dict.fromkeys(tags))


def _extension(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""
