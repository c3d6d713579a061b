"""A leading YAML front matter block, read without a YAML dependency.

Only the shapes Markdown front matter uses in practice are understood: ``key: value``
scalars (quoted or not; ``true`` / ``false`` and integers are typed), flow lists
``[a, b]``, block lists (``- a`` lines under ``key:``) and ``|`` / ``>`` block
scalars. Nested mappings are skipped. Anything unparseable is ignored, never raised.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["FrontMatter", "parse_front_matter"]

FrontMatter = dict[str, Any]

_BLOCK = re.compile(r"---[ \t]*\n(.*?)\n?(?:---|\.\.\.)[ \t]*(?:\n|$)", re.DOTALL)
_KEY = re.compile(r"([A-Za-z_][\w.-]*)[ \t]*:(?:[ \t]+(.*?))?[ \t]*$")
_ITEM = re.compile(r"[ \t]*-[ \t]+(.*?)[ \t]*$")
_INT = re.compile(r"[-+]?\d{1,18}")


def parse_front_matter(text: str) -> tuple[FrontMatter, int]:
    """The front matter of ``text`` and the offset where the body starts (0 if none).

    ``text`` must use ``\\n`` line ends. A block needs at least one ``key: value``
    line, so a document that merely starts with a ``---`` rule is not front matter.
    """
    match = _BLOCK.match(text)
    if not match:
        return {}, 0
    fields = _parse_lines(match.group(1).split("\n"))
    if not fields:
        return {}, 0
    return fields, match.end()


def _parse_lines(lines: list[str]) -> FrontMatter:
    fields: FrontMatter = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip() or line.lstrip().startswith("#") or line[:1].isspace():
            continue
        key_match = _KEY.match(line)
        if not key_match:
            continue
        key, raw = key_match.group(1), (key_match.group(2) or "")
        if raw in ("|", ">", "|-", ">-", "|+", ">+"):
            block, index = _indented(lines, index)
            separator = "\n" if raw.startswith("|") else " "
            fields[key] = separator.join(part.strip() for part in block).strip()
        elif raw:
            fields[key] = _value(raw)
        else:
            block, index = _indented(lines, index)
            items = [m.group(1) for m in map(_ITEM.fullmatch, block) if m]
            if items and len(items) == len([b for b in block if b.strip()]):
                fields[key] = [_scalar(item) for item in items]
            # else: a nested mapping or nothing; not kept
    return fields


def _indented(lines: list[str], index: int) -> tuple[list[str], int]:
    """The lines from ``index`` that are indented, blank, or ``- item`` lines."""
    block: list[str] = []
    while index < len(lines) and (
        not lines[index].strip() or lines[index][:1].isspace() or lines[index].startswith("-")
    ):
        block.append(lines[index])
        index += 1
    return block, index


def _value(raw: str) -> Any:
    if raw.startswith("[") and raw.endswith("]"):
        inner = raw[1:-1].strip()
        return [_scalar(part) for part in _split_flow(inner)] if inner else []
    return _scalar(raw)


def _split_flow(inner: str) -> list[str]:
    """Split ``a, "b, c", d`` at commas outside quotes."""
    parts: list[str] = []
    current: list[str] = []
    quote = ""
    for char in inner:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
            current.append(char)
        elif char == ",":
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def _scalar(raw: str) -> Any:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    if " #" in raw:  # a trailing comment
        raw = raw.split(" #", 1)[0].rstrip()
    lowered = raw.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    if lowered in ("null", "~"):
        return None
    if _INT.fullmatch(raw):
        return int(raw)
    return raw
