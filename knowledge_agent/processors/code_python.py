"""Python symbols from the ``ast`` module, with an indentation scanner for broken code.

Line numbers match ``inspect.getsourcelines``: a symbol starts at its first decorator
and ends at its last statement, or at a comment indented inside its body that follows
it. Classes, functions and methods are symbols, also when defined under a module-level
``if`` / ``try`` / ``with``; functions nested in functions are part of their parent.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import warnings
from dataclasses import dataclass

from knowledge_agent.processors.code_symbols import Symbol, first_paragraph

__all__ = ["PythonModule", "python_symbols", "scan_python_symbols"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")
_METHOD_KINDS = {
    "staticmethod": "staticmethod",
    "classmethod": "classmethod",
    "property": "property",
    "cached_property": "property",
    "functools.cached_property": "property",
}
_DEF_LINE = re.compile(r"([ \t]*)(async[ \t]+def|def|class)[ \t]+([A-Za-z_]\w*)")


@dataclass(frozen=True)
class PythonModule:
    """The symbols of a module, its docstring's first paragraph and how they were found."""

    symbols: list[Symbol]
    docstring: str
    parser: str  # "ast" or "indentation"
    tree: ast.Module | None = dataclasses.field(default=None, compare=False, repr=False)


def python_symbols(source: str) -> PythonModule:
    """Symbols of ``source``; falls back to :func:`scan_python_symbols` if it does not parse."""
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences in old code warn on stderr; not our concern here.
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return PythonModule(scan_python_symbols(source), "", "indentation")
    lines = source.split("\n")
    symbols: list[Symbol] = []
    _collect(tree.body, (), False, lines, symbols)
    docstring = first_paragraph(ast.get_docstring(tree) or "")
    return PythonModule(symbols, docstring, "ast", tree)


def _collect(
    body: list[ast.stmt], path: tuple[str, ...], in_class: bool, lines: list[str], out: list[Symbol]
) -> None:
    for node in body:
        if isinstance(node, _DEFINITIONS):
            symbol = _symbol(node, path, in_class, lines)
            out.append(symbol)
            if isinstance(node, ast.ClassDef):
                _collect(node.body, symbol.path, True, lines, out)
            continue
        # Definitions under if / try / with / for / match at this level count too.
        for field in _BLOCK_FIELDS:
            for child in getattr(node, field, None) or []:
                inner = getattr(child, "body", None)
                if isinstance(child, ast.stmt):
                    _collect([child], path, in_class, lines, out)
                elif isinstance(inner, list):  # except handlers and match cases
                    _collect(inner, path, in_class, lines, out)


def _symbol(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
    path: tuple[str, ...],
    in_class: bool,
    lines: list[str],
) -> Symbol:
    start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
    end = _end_line(node, lines)
    return Symbol(
        path=(*path, node.name),
        symbol_type=_symbol_type(node, in_class),
        start_line=start,
        end_line=end,
        signature=_signature(node, lines),
        docstring=first_paragraph(ast.get_docstring(node) or ""),
    )


def _end_line(node: ast.stmt, lines: list[str]) -> int:
    """The last statement's line, extended over comments indented inside the body."""
    end = node.end_lineno or node.lineno
    last = end
    index = end  # 0-based index of the line after the node
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if stripped.startswith("#") and len(line) - len(line.lstrip()) > node.col_offset:
            last = index + 1
        elif stripped:
            break
        index += 1
    return last


def _symbol_type(node: ast.stmt, in_class: bool) -> str:
    if isinstance(node, ast.ClassDef):
        return "class"
    is_async = isinstance(node, ast.AsyncFunctionDef)
    if not in_class:
        return "async_function" if is_async else "function"
    for decorator in getattr(node, "decorator_list", []):
        name = _unparse(decorator)
        if name in _METHOD_KINDS:
            return _METHOD_KINDS[name]
        if name.endswith((".setter", ".getter", ".deleter")):
            return "property"
    return "async_method" if is_async else "method"


def _signature(
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, lines: list[str]
) -> str:
    """``def name(args) -> ret`` / ``class Name(bases)``, rebuilt from the tree."""
    type_params = getattr(node, "type_params", None)  # Python 3.12+
    generic = f"[{', '.join(_unparse(p) for p in type_params)}]" if type_params else ""
    try:
        if isinstance(node, ast.ClassDef):
            bases = [_unparse(b) for b in node.bases] + [_unparse(k) for k in node.keywords]
            return f"class {node.name}{generic}" + (f"({', '.join(bases)})" if bases else "")
        keyword = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        returns = f" -> {_unparse(node.returns)}" if node.returns is not None else ""
        return f"{keyword} {node.name}{generic}({_unparse(node.args)}){returns}"
    except Exception:  # ast.unparse on an unusual tree: the source line will do
        return lines[node.lineno - 1].strip().rstrip(":") if node.lineno <= len(lines) else ""


def _unparse(node: ast.AST) -> str:
    return ast.unparse(node)


def scan_python_symbols(source: str) -> list[Symbol]:
    """Symbols of Python that does not parse, from ``def`` / ``class`` lines and indentation.

    A block ends before the next non-blank, non-comment line indented no deeper than its
    header. Rough by design: it only has to give sensible chunks for broken files.
    """
    lines = source.split("\n")
    symbols: list[Symbol] = []
    # Open blocks: (indent, path, type, start line, header text, is a function).
    stack: list[tuple[int, tuple[str, ...], str, int, str, bool]] = []
    last_code_line = 0
    decorator_start = 0

    def close(indent: int) -> None:
        while stack and stack[-1][0] >= indent:
            _, path, kind, start, header, _ = stack.pop()
            symbols.append(Symbol(path, kind, start, max(last_code_line, start), header))

    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        close(indent)
        match = _DEF_LINE.match(line)
        if match and not (stack and stack[-1][5]):  # not nested in a function
            in_class = bool(stack)
            keyword = match.group(2)
            is_function = keyword != "class"
            if not is_function:
                kind = "class"
            elif keyword.startswith("async"):
                kind = "async_method" if in_class else "async_function"
            else:
                kind = "method" if in_class else "function"
            path = (*(stack[-1][1] if stack else ()), match.group(3))
            start = decorator_start or number
            header = stripped.rstrip(":")
            stack.append((indent, path, kind, start, header, is_function))
        decorator_start = (decorator_start or number) if stripped.startswith("@") else 0
        last_code_line = number
    close(-1)
    symbols.sort(key=lambda symbol: (symbol.start_line, -symbol.end_line))
    return symbols
