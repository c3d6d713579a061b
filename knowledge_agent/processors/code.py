"""Source code: one chunk per symbol (class, function, method), headed by its path.

Python is read with ``ast`` (:mod:`.code_python`); JavaScript/TypeScript, Go, Rust,
Java/C# and C/C++ with a brace-matching scanner (:mod:`.code_scan`); other languages
are split at blank lines. A chunk's heading is the symbol's qualified path
(``ArgumentParser > parse_args``) and its metadata holds ``symbol``, ``qualified_name``,
``symbol_type``, ``parent_symbol``, ``signature``, ``docstring``, ``symbol_start_line``,
``symbol_end_line``, ``kind`` (function, method, class, … as 000 names them),
``symbols`` (every symbol the chunk touches) and, where the code uses or imports names,
``references`` and ``imports`` (:mod:`.code_names`); the item's metadata lists the file's
``imports``.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from knowledge_agent.processors.base import (
    BaseDataSourceProcessor,
    Extraction,
    block_sections,
    file_name,
)
from knowledge_agent.processors.code_names import NameUse, python_names, scanned_names
from knowledge_agent.processors.code_python import python_symbols
from knowledge_agent.processors.code_scan import SCANNED_LANGUAGES, scan_symbols
from knowledge_agent.processors.code_symbols import Symbol, symbol_sections
from knowledge_agent.processors.encoding import decode_bytes

__all__ = ["LANGUAGE_BY_EXTENSION", "CodeProcessor", "detect_code_language", "module_name"]

LANGUAGE_BY_EXTENSION: dict[str, str] = {
    ".py": "python",
    ".pyw": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".tsx": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".cs": "csharp",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".c++": "cpp",
    ".hh": "cpp",
    ".hpp": "cpp",
    ".hxx": "cpp",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".swift": "swift",
    ".scala": "scala",
    ".rb": "ruby",
    ".php": "php",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".fish": "shell",
    ".ps1": "powershell",
    ".bat": "batch",
    ".cmd": "batch",
    ".sql": "sql",
    ".lua": "lua",
    ".pl": "perl",
    ".pm": "perl",
    ".r": "r",
    ".jl": "julia",
    ".dart": "dart",
    ".ex": "elixir",
    ".exs": "elixir",
    ".erl": "erlang",
    ".hs": "haskell",
    ".clj": "clojure",
    ".el": "emacs-lisp",
    ".vim": "vim",
    ".zig": "zig",
    ".nim": "nim",
    ".groovy": "groovy",
    ".gradle": "groovy",
    ".proto": "protobuf",
    ".graphql": "graphql",
    ".tf": "hcl",
    ".css": "css",
    ".scss": "scss",
    ".less": "less",
    ".vue": "vue",
    ".svelte": "svelte",
    ".mk": "makefile",
    ".cmake": "cmake",
}
_LANGUAGE_BY_NAME = {
    "makefile": "makefile",
    "gnumakefile": "makefile",
    "dockerfile": "dockerfile",
    "containerfile": "dockerfile",
    "cmakelists.txt": "cmake",
    "rakefile": "ruby",
    "gemfile": "ruby",
    "jenkinsfile": "groovy",
}
_SHEBANG = re.compile(r"#![ \t]*(?:/usr)?(?:/local)?/bin/(?:env[ \t]+(?:-S[ \t]+)?)?([\w.+-]+)")
_LANGUAGE_BY_INTERPRETER = (
    ("python", "python"),
    ("node", "javascript"),
    ("deno", "typescript"),
    ("bash", "shell"),
    ("zsh", "shell"),
    ("sh", "shell"),
    ("dash", "shell"),
    ("ksh", "shell"),
    ("ruby", "ruby"),
    ("perl", "perl"),
    ("php", "php"),
    ("lua", "lua"),
    ("rscript", "r"),
)
_CONTENT_TYPES = {
    "python": "text/x-python",
    "javascript": "text/javascript",
    "typescript": "text/x-typescript",
    "shell": "text/x-shellscript",
    "c": "text/x-c",
    "cpp": "text/x-c++",
    "csharp": "text/x-csharp",
    "css": "text/css",
    "sql": "application/sql",
}


def detect_code_language(path: str, text: str = "") -> str | None:
    """The programming language of a file from its extension, name or shebang line."""
    name = PurePath(path.replace("\\", "/")).name.lower()
    suffix = PurePath(name).suffix
    if suffix in LANGUAGE_BY_EXTENSION:
        return LANGUAGE_BY_EXTENSION[suffix]
    if name in _LANGUAGE_BY_NAME:
        return _LANGUAGE_BY_NAME[name]
    return shebang_language(text)


def shebang_language(text: str) -> str | None:
    """``#!/usr/bin/env python3`` → ``python``; ``None`` without a known interpreter."""
    match = _SHEBANG.match(text)
    if not match:
        return None
    interpreter = match.group(1).lower()
    for prefix, language in _LANGUAGE_BY_INTERPRETER:
        if interpreter.startswith(prefix):
            return language
    return None


def module_name(path: str) -> str:
    """``pkg/json/decoder.py`` → ``decoder``; a package's ``__init__.py`` → ``json``."""
    pure = PurePath(path.replace("\\", "/"))
    if pure.stem == "__init__" and pure.parent.name:
        return pure.parent.name
    return pure.stem or pure.name or path


class CodeProcessor(BaseDataSourceProcessor):
    """Source files; the title is the file name, ``language`` the programming language."""

    name = "code"
    extensions = frozenset(LANGUAGE_BY_EXTENSION)
    source_type = "code"
    content_type = "text/plain"

    def extract(self, data: bytes, path: str) -> Extraction:
        text, encoding = decode_bytes(data)
        language = detect_code_language(path, text) or "text"
        module = module_name(path)
        metadata: dict[str, Any] = {"encoding": encoding, "code_language": language}
        symbols: list[Symbol] | None = None
        names: list[NameUse] | None = None
        docstring = ""
        if language == "python":
            found = python_symbols(text)
            symbols, docstring, metadata["parser"] = found.symbols, found.docstring, found.parser
            names = python_names(text, found.tree) if found.tree is not None else []
        elif language in SCANNED_LANGUAGES:
            symbols, metadata["parser"] = scan_symbols(text, language), "scanner"
            names = scanned_names(text, language)
        imports = list(dict.fromkeys(use.name for use in names or () if use.role == "import"))
        if imports:
            metadata["imports"] = imports
        if symbols is None:
            sections = block_sections(text, module, max_size=self.chunker.config.max_chunk_size)
            spans = None
            metadata["parser"] = "lines"
        else:
            sections, spans = symbol_sections(
                text, symbols, module, docstring, max_size=self.chunker.config.max_chunk_size
            )
            metadata["symbol_count"] = len(symbols)
            if docstring:
                metadata["docstring"] = docstring
        return Extraction(
            content=text,
            title=file_name(path),
            sections=sections,
            code=True,
            symbols=spans,
            names=names,
            language=language,
            content_type=_CONTENT_TYPES.get(language, f"text/x-{language}"),
            metadata=metadata,
        )
