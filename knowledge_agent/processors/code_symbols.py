"""Code symbols (classes, functions, methods) and the chunk sections built from them.

Every line of a file belongs to the innermost symbol whose lines hold it, or to the
module. Each run of lines with one owner becomes a section: a function is one section,
a class is its header (docstring, attributes) plus any statements between its methods,
and module-level code between symbols is split at blank lines. Sections therefore cover
the whole file, so every character lands in some chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from knowledge_agent.chunking import Section
from knowledge_agent.processors.base import SymbolSpan, block_sections

__all__ = ["Symbol", "first_paragraph", "symbol_kind", "symbol_sections"]

DOCSTRING_LIMIT = 300
HEADING_SEPARATOR = " > "
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_NEWLINE = re.compile(r"\n")


@dataclass(frozen=True)
class Symbol:
    """A class, function, method, … found in source code.

    ``path`` is the nesting, outermost first (``("Parser", "parse_args")``); lines are
    1-based and inclusive, decorators / attributes / attached doc comments included.
    """

    path: tuple[str, ...]
    symbol_type: str
    start_line: int
    end_line: int
    signature: str = ""
    docstring: str = ""

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def qualified_name(self) -> str:
        return ".".join(self.path)

    @property
    def heading(self) -> str:
        return HEADING_SEPARATOR.join(self.path)

    def metadata(self) -> dict[str, Any]:
        """The chunk metadata of the symbol's sections (JSON-ready)."""
        return {
            "symbol": self.name,
            "qualified_name": self.qualified_name,
            "symbol_type": self.symbol_type,
            "kind": symbol_kind(self.symbol_type),
            "parent_symbol": ".".join(self.path[:-1]),
            "signature": self.signature,
            "docstring": self.docstring,
            "symbol_start_line": self.start_line,
            "symbol_end_line": self.end_line,
        }


_METHOD_TYPES = frozenset(
    {"method", "async_method", "staticmethod", "classmethod", "property", "constructor"}
)


def symbol_kind(symbol_type: str) -> str:
    """The coarse kind of a symbol type, as 000's code symbols name them: ``function``
    (async too), ``method`` (static, class, property), else the type itself (``class``,
    ``interface``, ``struct``, …)."""
    if symbol_type in _METHOD_TYPES:
        return "method"
    if symbol_type.endswith("function"):
        return "function"
    return symbol_type


def symbol_sections(
    content: str,
    symbols: list[Symbol],
    module: str,
    module_docstring: str = "",
    *,
    max_size: int,
) -> tuple[list[Section], list[SymbolSpan]]:
    """Sections covering all of ``content`` and the spans of the symbols' own lines.

    A symbol's first run (its header and, for a function, its body) is one section, which
    the chunker windows if it is long. Module-level runs, and the later runs of a
    container (statements between methods), are cut at blank lines into pieces of at most
    ``max_size``.
    """
    line_starts = [0] + [match.end() for match in _NEWLINE.finditer(content)]
    line_count = len(line_starts)
    owner = [-1] * (line_count + 1)  # 1-based; -1 is the module
    order = sorted(range(len(symbols)), key=lambda i: (symbols[i].start_line, -symbols[i].end_line))
    for index in order:  # parents first, so the lines of nested symbols go to the child
        symbol = symbols[index]
        first = max(symbol.start_line, 1)
        last = min(symbol.end_line, line_count)
        owner[first : last + 1] = [index] * max(0, last - first + 1)
    module_metadata = {
        "symbol": module,
        "qualified_name": module,
        "symbol_type": "module",
        "kind": "module",
        "parent_symbol": "",
        "signature": "",
        "docstring": module_docstring,
    }
    sections: list[Section] = []
    spans: list[SymbolSpan] = []
    seen: set[int] = set()  # symbols whose first run (the header) is done
    run_start = 1
    for line in range(2, line_count + 2):
        if line <= line_count and owner[line] == owner[run_start]:
            continue
        start = line_starts[run_start - 1]
        end = line_starts[line - 1] - 1 if line <= line_count else len(content)
        who = owner[run_start]
        if who < 0:
            sections.extend(
                block_sections(
                    content[start:end], module, module_metadata, max_size=max_size, offset=start
                )
            )
        else:
            symbol = symbols[who]
            metadata = symbol.metadata()
            if who in seen:  # statements between a container's members: cut like module code
                sections.extend(
                    block_sections(
                        content[start:end],
                        symbol.heading,
                        metadata,
                        max_size=max_size,
                        offset=start,
                    )
                )
            else:
                sections.append(Section(start, end, symbol.heading, metadata))
            seen.add(who)
            text_start = start + len(content[start:end]) - len(content[start:end].lstrip())
            text_end = start + len(content[start:end].rstrip())
            if text_start < text_end:  # a run of blank lines holds no symbol text
                spans.append(SymbolSpan(text_start, text_end, symbol.qualified_name))
        run_start = line
    return sections, spans


def first_paragraph(text: str, limit: int = DOCSTRING_LIMIT) -> str:
    """The first paragraph of a docstring, whitespace collapsed, cut at ``limit`` chars."""
    paragraph = _BLANK_LINE.split(text.strip(), maxsplit=1)[0] if text else ""
    paragraph = " ".join(paragraph.split())
    if len(paragraph) > limit:
        paragraph = paragraph[: limit - 1].rstrip() + "…"
    return paragraph
