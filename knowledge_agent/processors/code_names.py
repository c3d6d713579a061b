"""The names source code uses and imports, where each use is: "who uses X" as chunk data.

Each :class:`NameUse` is an offset in the content and a name; a chunk records the names
used (``references``) and imported (``imports``) inside its own span, so merged chunks
list their neighbours' names and the pieces of a long symbol only their own.

Python is read with ``ast``: a name loaded (``backoff``), or a dotted chain of attributes
on one (``time.sleep``; a leading ``self.`` / ``cls.`` left out), unless a builtin or a
name the enclosing function binds itself (its parameters, assignments, loop variables);
imports are the modules and names ``import`` / ``from … import`` bring in. The brace
languages are read with regular expressions over the code with comments and strings
blanked out: a name followed by ``(`` is a use (keywords aside), and each language's
import statement gives its imports.
"""

from __future__ import annotations

import ast
import builtins
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from knowledge_agent.processors.code_scan import KEYWORDS, mask_code

__all__ = ["NameUse", "python_names", "scanned_names"]

_BUILTINS = frozenset(dir(builtins)) | {"self", "cls", "__name__", "__file__"}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_CALL = re.compile(r"\b([A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*)\s*\(")
_DEFINES = re.compile(r"\b(?:function|fn|func|def)\s+$")  # a definition's name, not a call
# Keywords, and type and declaration words, that a '(' follows without a call.
_NOT_CALLS = KEYWORDS | frozenset(
    {
        "and",
        "bool",
        "boolean",
        "chan",
        "char",
        "class",
        "const",
        "def",
        "defer",
        "double",
        "enum",
        "float",
        "fn",
        "func",
        "go",
        "impl",
        "in",
        "int",
        "interface",
        "is",
        "let",
        "long",
        "loop",
        "map",
        "match",
        "namespace",
        "not",
        "or",
        "select",
        "signed",
        "static",
        "string",
        "struct",
        "super",
        "this",
        "trait",
        "union",
        "unsigned",
        "var",
        "void",
    }
)
_IMPORTS = {
    "javascript": re.compile(
        r"""^\s*(?:import|export)\b[^;'"]*?\bfrom\s*(['"])(?P<name>[^'"\n]+)\1"""
        r"""|^\s*import\s*(['"])(?P<bare>[^'"\n]+)\3"""
        r"""|\brequire\s*\(\s*(['"])(?P<req>[^'"\n]+)\5\s*\)""",
        re.MULTILINE,
    ),
    "go": re.compile(r"""^\s*(?:import\s+)?(?:[\w.]+\s+)?"(?P<name>[\w./-]+)"\s*$""", re.MULTILINE),
    "java": re.compile(r"^\s*import\s+(?:static\s+)?(?P<name>[\w.]+(?:\.\*)?)\s*;", re.MULTILINE),
    "csharp": re.compile(r"^\s*using\s+(?:static\s+)?(?P<name>[\w.]+)\s*;", re.MULTILINE),
    "rust": re.compile(r"^\s*(?:pub\s+)?use\s+(?P<name>[\w:]+)", re.MULTILINE),
    "c": re.compile(r"""^\s*#\s*include\s*[<"](?P<name>[^>"\n]+)[>"]""", re.MULTILINE),
}
_IMPORTS["typescript"] = _IMPORTS["javascript"]
_IMPORTS["cpp"] = _IMPORTS["c"]


@dataclass(frozen=True)
class NameUse:
    """A name used (``role`` ``"reference"``) or imported (``"import"``) at ``offset``."""

    offset: int
    name: str
    role: str


def python_names(source: str, tree: ast.Module | None = None) -> list[NameUse]:
    """The names ``source`` uses and imports, by offset; [] when it does not parse.
    ``tree``: ``source`` already parsed."""
    if tree is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []
    lines = source.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(node: ast.expr | ast.stmt) -> int:
        line = lines[node.lineno - 1]
        column = node.col_offset
        if not line.isascii():  # ast columns count UTF-8 bytes
            column = len(line.encode("utf-8")[:column].decode("utf-8", "ignore"))
        return starts[node.lineno - 1] + column

    uses: list[NameUse] = []
    _visit(tree, uses, offset)
    uses.sort(key=lambda use: use.offset)
    return uses


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` as a list, without its two generators (the walk's cost)."""
    found: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            found.append(value)
    return found


def _visit(tree: ast.AST, uses: list[NameUse], at: Callable[[Any], int]) -> None:
    """Every use under ``tree``, each node with the names its enclosing functions bind."""
    stack: list[tuple[ast.AST, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, local = stack.pop()
        if isinstance(node, _FUNCTIONS):
            local = local | _bound(node)
        if isinstance(node, ast.Import):
            uses.extend(NameUse(at(node), alias.name, "import") for alias in node.names)
            continue
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                name = module if alias.name == "*" else f"{module}.{alias.name}".lstrip(".")
                uses.append(NameUse(at(node), name, "import"))
            continue
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            name = _dotted(node)
            if name is not None:
                root = name.split(".", 1)[0]
                if name not in _BUILTINS and root not in local:
                    uses.append(NameUse(at(node), name, "reference"))
                continue
        stack.extend((child, local) for child in _children(node))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name (``self.`` / ``cls.`` dropped)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    if node.id not in ("self", "cls") or not parts:
        parts.append(node.id)
    return ".".join(reversed(parts))


def _bound(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> frozenset[str]:
    """The names a function binds: parameters and the targets of its own statements."""
    arguments = function.args
    names = {
        arg.arg
        for arg in (
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
        )
    }
    body = function.body if isinstance(function.body, list) else [function.body]
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # a nested function binds its own names
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        stack.extend(_children(node))
    return frozenset(names)


def scanned_names(text: str, language: str) -> list[NameUse]:
    """The calls and imports of ``text`` in a brace language (see the module docstring)."""
    masked = mask_code(text, language)
    uses = [
        NameUse(match.start(1), re.sub(r"::|->", ".", match.group(1)), "reference")
        for match in _CALL.finditer(masked)
        if not _DEFINES.search(masked, max(0, match.start() - 12), match.start())
        and match.group(1).rsplit(".", 1)[-1] not in _NOT_CALLS
        and match.group(1) not in _NOT_CALLS
    ]
    pattern = _IMPORTS.get(language)
    if pattern is not None:
        # Module names are string literals, blanked in the masked code: read them from the
        # text, at statements that start where the masked code has code.
        for match in pattern.finditer(text):
            statement = match.group()
            first = match.start() + len(statement) - len(statement.lstrip())
            if masked[first] != text[first]:
                continue  # inside a comment or a string
            found = [match.group(k) for k in ("name", "bare", "req") if k in pattern.groupindex]
            name = next(value for value in found if value)
            uses.append(NameUse(first, name.replace("::", "."), "import"))
    uses.sort(key=lambda use: use.offset)
    return uses
