"""Symbols of brace languages (JavaScript/TypeScript, Go, Rust, Java/C#, C/C++) by regex.

No parser: comments and string literals are blanked out (same length, newlines kept),
then lines at the current nesting depth are matched against per-language patterns for
a symbol's first line; its body is found by brace matching. Containers (classes, impl
blocks, traits, namespaces) are scanned again inside for members. Doc comments,
attributes and decorators directly above a symbol belong to it. Rough by design: a
regex literal holding a brace can confuse it, and then chunks are merely less neat.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any

from knowledge_agent.processors.code_symbols import Symbol, first_paragraph

__all__ = ["KEYWORDS", "SCANNED_LANGUAGES", "mask_code", "scan_symbols"]

_SIGNATURE_LIMIT = 300
_HEADER_LIMIT = 4000  # characters searched for a body's "{" after a symbol's first line
KEYWORDS = frozenset(  # words of the scanned languages that are never a symbol's name
    {
        "if",
        "else",
        "for",
        "while",
        "do",
        "switch",
        "case",
        "catch",
        "try",
        "finally",
        "return",
        "function",
        "new",
        "delete",
        "sizeof",
        "typeof",
        "throw",
        "await",
        "yield",
        "with",
        "defined",
        "elif",
        "using",
        "goto",
        "break",
        "continue",
        "default",
        "import",
        "export",
        "from",
        "package",
        "operator",
        "static_assert",
        "alignof",
        "decltype",
        "noexcept",
        "assert",
        "extends",
        "implements",
    }
)


@dataclass(frozen=True)
class _Rule:
    """A pattern for a symbol's first line (with named groups) and how to read the rest.

    Groups: ``name`` (required unless the name follows the body, as in C
    ``typedef struct {…} Name;``), ``kind`` (overrides ``kind``), ``parent`` (Go
    receivers), ``is_async``, ``ret`` (a return type; without one a Java/C# method must
    be a constructor), ``head`` (where the header starts when not at the line start).
    ``inner``: rules to scan a container's body with ("top" or "member"), ``None`` for
    non-containers; ``transparent`` containers (C++ ``extern "C" {``, anonymous
    JavaScript module functions) are not symbols themselves.
    """

    pattern: re.Pattern[str]
    kind: str
    inner: str | None = None
    needs_body: bool = False  # a declaration without "{…}" is not a symbol (C prototypes)
    no_assignment: bool = False  # an "=" before the body means a variable, not a symbol
    line_ends: bool = False  # without "{" or ";" on its line, the symbol is that line
    needs_arrow: bool = False  # JS `const f = (…) => …`: the header must hold "=>"
    constructor_only: bool = False  # without a return type, only the class's own name
    transparent: bool = False
    anonymous_transparent: bool = False  # without a name, a transparent container (JS IIFEs)


@dataclass(frozen=True)
class _Language:
    top: tuple[_Rule, ...]
    member: tuple[_Rule, ...]
    strings: re.Pattern[str]  # comments and literals to blank out
    attached: re.Pattern[str]  # lines above a symbol that belong to it
    type_line: re.Pattern[str] | None = None  # C: a return type on the line above


def _rule(pattern: str, kind: str, **options: Any) -> _Rule:
    return _Rule(re.compile(pattern), kind, **options)


_C_COMMENTS = r"//[^\n]*|/\*.*?(?:\*/|\Z)"
_DQ = r'"(?:\\.|[^"\\\n])*"?'
_CHAR = r"'(?:\\[^'\n]{1,10}|[^'\\\n])'"
_SQ = r"'(?:\\.|[^'\\\n])*'?"
_BACKTICK = r"`(?:\\.|[^`\\])*`?"
_RAW_RUST = r'r(#*)".*?"\1'

_MODS = r"(?:(?:public|private|protected|static|final|abstract|synchronized|native|default"
_MODS += r"|strictfp|transient|override|virtual|async|internal|extern|sealed|unsafe|new"
_MODS += r"|partial|readonly|non-sealed)\s+)*"

_JS_NAME = r"[A-Za-z_$][\w$]*"
_JS = _Language(
    top=(
        _rule(
            r"\s*(?:export\s+(?:default\s+)?)?(?:declare\s+)?(?P<is_async>async\s+)?function\b"
            rf"\s*\*?\s*(?P<name>{_JS_NAME})",
            "function",
        ),
        _rule(
            r"\s*(?:export\s+(?:default\s+)?)?(?:declare\s+)?(?:abstract\s+)?class\s+"
            rf"(?P<name>{_JS_NAME})",
            "class",
            inner="member",
        ),
        _rule(
            rf"\s*(?:export\s+)?(?:const|let|var)\s+(?P<name>{_JS_NAME})\s*(?::[^=]+)?="
            rf"\s*(?P<is_async>async\b\s*)?(?:function\b|\(|{_JS_NAME}\s*=>|<)",
            "function",
            needs_arrow=True,
        ),
        _rule(r"\s*(?:export\s+)?(?:declare\s+)?interface\s+(?P<name>\w+)", "interface"),
        _rule(
            r"\s*(?:export\s+)?(?:declare\s+)?type\s+(?P<name>\w+)\s*(?:<[^=]*>)?\s*=",
            "type",
            line_ends=True,
        ),
        _rule(r"\s*(?:export\s+)?(?:declare\s+)?(?:const\s+)?enum\s+(?P<name>\w+)", "enum"),
        _rule(
            r"\s*(?:export\s+)?(?:declare\s+)?(?:namespace|module)\s+(?P<name>[\w.]+)\s*\{",
            "namespace",
            inner="top",
        ),
        # Module pattern: (function name() { … })(); and (() => { … })();
        _rule(
            r"\s*[(!+~;]\s*(?P<head>(?P<is_async>async\s+)?(?:function\b\s*\*?\s*"
            r"(?P<name>[\w$]*)\s*\(|\([^)]*\)\s*=>\s*\{))",
            "function",
            inner="top",
            anonymous_transparent=True,
        ),
    ),
    member=(
        _rule(
            r"\s*(?:(?:public|private|protected|static|readonly|override|abstract|declare"
            r"|get|set|accessor)\s+)*(?P<is_async>async\s+)?(?:(?:get|set|static)\s+)*\*?\s*"
            rf"(?P<name>#?{_JS_NAME})\s*\??\s*(?:<[^>()]*>)?\s*\(",
            "method",
        ),
        _rule(
            r"\s*(?:(?:public|private|protected|static|readonly|override)\s+)*"
            rf"(?P<name>#?{_JS_NAME})\s*(?::[^=]+)?=\s*(?P<is_async>async\s+)?"
            rf"(?:\([^)]*\)|{_JS_NAME})\s*(?::[^=]+)?=>",
            "method",
        ),
    ),
    strings=re.compile(f"{_C_COMMENTS}|{_DQ}|{_SQ}|{_BACKTICK}", re.DOTALL),
    attached=re.compile(r"\s*(?:@|//|/\*|\*)"),
)

_GO = _Language(
    top=(
        _rule(
            r"func\s*\(\s*(?:\w+\s+)?\*?\s*(?P<parent>\w+)(?:\[[^\]]*\])?\s*\)\s*(?P<name>\w+)",
            "method",
        ),
        _rule(r"func\s+(?P<name>\w+)", "function"),
        _rule(
            r"type\s+(?P<name>\w+)(?:\[[^\]]*\])?\s+(?P<kind>struct|interface)\b",
            "type",
            line_ends=True,
        ),
        _rule(r"type\s+(?P<name>\w+)\b", "type", line_ends=True),
    ),
    member=(),
    strings=re.compile(f"{_C_COMMENTS}|{_DQ}|{_CHAR}|{_BACKTICK}", re.DOTALL),
    attached=re.compile(r"\s*(?://|/\*|\*)"),
)

_RUST_VIS = r"(?:pub(?:\s*\([^)]*\))?\s+)?"
_RUST_RULES = (
    _rule(
        rf"\s*{_RUST_VIS}(?:default\s+)?(?:const\s+)?(?P<is_async>async\s+)?(?:unsafe\s+)?"
        r'(?:extern\s+(?:"[^"]*"\s+)?)?fn\s+(?P<name>\w+)',
        "function",
    ),
    _rule(
        rf"\s*{_RUST_VIS}(?:unsafe\s+)?(?:auto\s+)?(?P<kind>trait)\s+(?P<name>\w+)",
        "trait",
        inner="top",
    ),
    _rule(rf"\s*{_RUST_VIS}(?P<kind>struct|enum|union|type)\s+(?P<name>\w+)", "struct"),
    _rule(rf"\s*{_RUST_VIS}mod\s+(?P<name>\w+)\s*\{{", "module", inner="top"),
    _rule(
        r"\s*(?:unsafe\s+)?impl\b(?:\s*<.*?>)?\s+(?:!?(?P<trait>[^{]+?)\s+for\s+)?&?"
        r"(?:'\w+\s+)?(?:mut\s+)?(?:\w+::)*(?P<name>\w+)",
        "impl",
        inner="top",
    ),
    _rule(r"\s*macro_rules!\s*(?P<name>\w+)", "macro"),
)
_RUST = _Language(
    top=_RUST_RULES,
    member=_RUST_RULES,
    strings=re.compile(f"{_C_COMMENTS}|{_RAW_RUST}|{_DQ}|{_CHAR}", re.DOTALL),
    attached=re.compile(r"\s*(?:#\[|//|/\*|\*)"),
)

_JAVA_TYPE = _rule(
    rf"\s*(?:@\w+(?:\([^)]*\))?\s+)*{_MODS}(?P<kind>class|interface|enum|record|struct"
    r"|@interface)\s+(?P<name>\w+)",
    "class",
    inner="member",
)
_JAVA = _Language(
    top=(
        _JAVA_TYPE,
        _rule(r"\s*namespace\s+(?P<name>[\w.]+)\s*\{?\s*$", "namespace", inner="top"),
    ),
    member=(
        _JAVA_TYPE,
        _rule(
            rf"\s*(?:@\w+(?:\([^)]*\))?\s+)*{_MODS}(?:<[^>]+>\s+)?"
            r"(?:(?P<ret>[\w.$]+(?:<[^()=;]*>)?(?:\[\])*\??)\s+)?(?P<name>\w+)\s*"
            r"(?:<[^()=;]*>)?\s*\(",
            "method",
            constructor_only=True,
            no_assignment=True,
        ),
    ),
    strings=re.compile(f"{_C_COMMENTS}|{_DQ}|{_CHAR}", re.DOTALL),
    attached=re.compile(r"\s*(?:@|\[|//|/\*|\*)"),
)

_C_TYPE = _rule(
    r"\s*(?:template\s*<.*>\s*)?(?:typedef\s+)?(?P<kind>class|struct|union|enum)"
    r"(?:\s+class)?\s+(?:\w+\s+)*?(?P<name>\w+)?\s*(?:final\s*)?(?::[^;{]*)?(?:\{|$)",
    "struct",
    inner="member",
    needs_body=True,
    no_assignment=True,
)
_C_FUNCTION = _rule(
    r"\s*(?P<ret>(?:[A-Za-z_][\w:<>,*&~\s]*?[\s*&]+)?)"
    r"(?P<name>(?:[A-Za-z_]\w*::)*~?[A-Za-z_]\w*|operator\s*\S+?)\s*\(",
    "function",
    needs_body=True,
    no_assignment=True,
)
_C = _Language(
    top=(
        _rule(r'\s*extern\s+"[^"]*"\s*\{', "namespace", inner="top", transparent=True),
        _rule(
            r"\s*(?:inline\s+)?namespace\s*(?P<name>[\w:]*)\s*\{",
            "namespace",
            inner="top",
            anonymous_transparent=True,
        ),
        _C_TYPE,
        _C_FUNCTION,
    ),
    member=(_C_TYPE, _C_FUNCTION),
    strings=re.compile(f"{_C_COMMENTS}|{_DQ}|{_CHAR}", re.DOTALL),
    attached=re.compile(r"\s*(?://|/\*|\*|template\b)"),
    type_line=re.compile(r"\s*[A-Za-z_][\w\s*&:<>,]*"),
)

_LANGUAGES: dict[str, _Language] = {
    "javascript": _JS,
    "typescript": _JS,
    "go": _GO,
    "rust": _RUST,
    "java": _JAVA,
    "csharp": _JAVA,
    "c": _C,
    "cpp": _C,
}
SCANNED_LANGUAGES = frozenset(_LANGUAGES)
_TYPE_KINDS = frozenset(
    {"class", "struct", "union", "enum", "interface", "record", "trait", "impl", "@interface"}
)
_HEADER_TOKEN = re.compile(r"=>|==|[!<>]=|[(){}\[\];=\n]")
_EXPRESSION_TOKEN = re.compile(r"[(){}\[\];\n]")
_BRACE = re.compile(r"[{}]")
_BLOCK_BODY = re.compile(r"[ \t]*\{")
_TRAILING_NAME = re.compile(r"\}\s*(\w+)")
_DOC_MARKERS = re.compile(r"^\s*(?:///?!?|/\*\*?|\*/|\*(?!/))\s?")
_DOC_END = re.compile(r"\s*\*/\s*$|\s+$")


def mask_code(text: str, language: str) -> str:
    """``text`` with comments and literals blanked out: same length, newlines kept.

    String literals keep their quote characters, so ``extern "C"`` still reads as one.
    """
    pattern = _LANGUAGES[language].strings

    def blank(match: re.Match[str]) -> str:
        token = match.group()
        if token.startswith(("//", "/*")):
            return re.sub(r"[^\n]", " ", token)
        inner = re.sub(r"[^\n]", " ", token[1:-1]) if len(token) >= 2 else ""
        return token[0] + inner + token[-1] if len(token) >= 2 else " "

    return pattern.sub(blank, text)


def scan_symbols(text: str, language: str) -> list[Symbol]:
    """The symbols of ``text`` (``\\n`` line ends) in a brace language, in line order."""
    scanner = _Scanner(text, mask_code(text, language), _LANGUAGES[language])
    scanner.scan_region(0, len(scanner.lines) - 1, (), scanner.language.top)
    return sorted(scanner.symbols, key=lambda s: (s.start_line, -s.end_line))


class _Scanner:
    def __init__(self, text: str, masked: str, language: _Language) -> None:
        self.text = text
        self.masked = masked
        self.language = language
        self.lines = text.split("\n")
        self.masked_lines = masked.split("\n")
        self.offsets = [0]
        for line in self.lines:
            self.offsets.append(self.offsets[-1] + len(line) + 1)
        self.symbols: list[Symbol] = []
        self.kinds: dict[tuple[str, ...], str] = {}  # symbol path → symbol type

    def line_of(self, offset: int) -> int:
        """0-based line index of a character offset."""
        return min(bisect.bisect_right(self.offsets, offset) - 1, len(self.lines) - 1)

    def scan_region(
        self, first: int, last: int, path: tuple[str, ...], rules: tuple[_Rule, ...]
    ) -> None:
        """Find symbols on lines ``first..last`` (0-based) at nesting depth 0 of the region."""
        depth = 0
        index = first
        floor = first  # attached lines above a symbol may not reach into the previous one
        while index <= last:
            line = self.masked_lines[index]
            if depth == 0 and line.strip():
                end = self.try_rules(index, last, floor, path, rules)
                if end is not None:
                    index = floor = end + 1
                    continue
            depth = max(0, depth + line.count("{") - line.count("}"))
            index += 1

    def try_rules(
        self, index: int, last: int, floor: int, path: tuple[str, ...], rules: tuple[_Rule, ...]
    ) -> int | None:
        """If a rule matches line ``index``, record the symbol; returns its last line."""
        line = self.masked_lines[index]
        for rule in rules:
            match = rule.pattern.match(line)
            if match is None:
                continue
            groups = match.groupdict()
            name = groups.get("name")
            if name and name.split("::")[-1].lstrip("#~") in KEYWORDS:
                continue
            if rule.constructor_only and not groups.get("ret") and (not path or name != path[-1]):
                continue
            if groups.get("ret") and groups["ret"].split()[0] in KEYWORDS:
                continue
            found = self.extent(index, last, match, rule)
            if found is None:
                continue
            end_line, body = found
            if not name and body is not None:
                trailing = _TRAILING_NAME.match(self.masked, body[1])
                name = trailing.group(1) if trailing else None
            if rule.transparent or (rule.anonymous_transparent and not name):
                if body is not None:
                    self.scan_body(body, last, path, self.rules(rule))
                return end_line
            if not name:
                continue
            self.add(index, floor, end_line, match, rule, path, name, body)
            return end_line
        return None

    def rules(self, rule: _Rule) -> tuple[_Rule, ...]:
        return self.language.member if rule.inner == "member" else self.language.top

    def extent(
        self, index: int, last: int, match: re.Match[str], rule: _Rule
    ) -> tuple[int, tuple[int, int] | None] | None:
        """``(last line, (body "{" offset, body "}" offset) or None)``, or None: no symbol."""
        # The header starts at the line's start, or at the "head" group (after a "(").
        head = match.start("head") if "head" in match.re.groupindex else match.start()
        start = self.offsets[index] + head
        header = self.header_end(start, rule)
        if header is None:
            return None
        position, char = header
        if char != "{":
            if rule.needs_body:
                return None
            return self.line_of(max(position, start)), None
        close = self.matching_brace(position)
        close_line = self.line_of(close) if close is not None else last
        return min(close_line, last), (position, close if close is not None else position)

    def header_end(self, start: int, rule: _Rule) -> tuple[int, str] | None:
        """Where the header ends: the body's ``{``, a ``;``, or a line end (``line_ends``).

        Returns None when the header is not a symbol's: an ``=`` at depth 0 before the
        body for ``needs_body`` rules (a C initializer), no ``=>`` for ``needs_arrow``.
        """
        masked = self.masked
        limit = min(len(masked), start + _HEADER_LIMIT)
        depth = 0
        arrow = False
        for found in _HEADER_TOKEN.finditer(masked, start, limit):
            token = found.group()
            position = found.start()
            if token in "([":
                depth += 1
            elif token in ")]":
                depth = max(0, depth - 1)
            elif depth:
                continue
            elif token == "=>":
                arrow = True
                if rule.needs_arrow and not _BLOCK_BODY.match(masked, found.end()):
                    return self.expression_end(position), ";"
            elif token == "=" and rule.no_assignment:
                return None
            elif token == "{":
                if rule.needs_arrow and not arrow and "function" not in masked[start:position]:
                    return None
                return position, "{"
            elif token == ";":
                return (position, ";") if not rule.needs_arrow or arrow else None
            elif token == "}":
                return (position - 1, ";") if not rule.needs_body else None
            elif token == "\n" and rule.line_ends:
                return position - 1, "\n"
        if rule.needs_body or rule.needs_arrow:
            return None
        return start, "\n"

    def expression_end(self, position: int) -> int:
        """End of an arrow function's expression body: ``;`` or a line end at depth 0."""
        depth = 0
        masked = self.masked
        for found in _EXPRESSION_TOKEN.finditer(masked, position):
            token = found.group()
            if token in "({[":
                depth += 1
            elif token in ")}]":
                depth -= 1
                if depth < 0:
                    return found.start() - 1
            elif depth == 0:
                return found.start() - (1 if token == "\n" else 0)
        return len(masked) - 1

    def matching_brace(self, open_position: int) -> int | None:
        """The offset of the ``}`` closing the ``{`` at ``open_position``, if any."""
        depth = 0
        for found in _BRACE.finditer(self.masked, open_position):
            depth += 1 if found.group() == "{" else -1
            if depth == 0:
                return found.start()
        return None

    def scan_body(
        self, body: tuple[int, int], last: int, path: tuple[str, ...], rules: tuple[_Rule, ...]
    ) -> None:
        first_line = self.line_of(body[0]) + 1
        last_line = min(self.line_of(body[1]) - 1, last)
        if first_line <= last_line:
            self.scan_region(first_line, last_line, path, rules)

    def add(
        self,
        index: int,
        floor: int,
        end_line: int,
        match: re.Match[str],
        rule: _Rule,
        path: tuple[str, ...],
        name: str,
        body: tuple[int, int] | None,
    ) -> None:
        groups = match.groupdict()
        parent = groups.get("parent")
        *qualifier, name = name.split("::")
        symbol_path = (*path, *([parent] if parent else qualifier), name)
        kind = groups.get("kind") or rule.kind
        if kind == "function" and (qualifier or parent or self.kinds.get(path) in _TYPE_KINDS):
            kind = "method"
        if groups.get("is_async") and kind in ("function", "method"):
            kind = f"async_{kind}"
        start_index, header_line, doc_lines = self.attached(index, floor, match, rule)
        header_end = body[0] if body is not None else self.offsets[end_line + 1] - 1
        header_start = self.offsets[index] + match.start()
        if header_line < index:  # "static int\nname(…)": the signature includes the type
            header_start = self.offsets[header_line]
        signature = " ".join(self.text[header_start:header_end].split())
        self.kinds[symbol_path] = kind
        self.symbols.append(
            Symbol(
                path=symbol_path,
                symbol_type=kind,
                start_line=start_index + 1,
                end_line=end_line + 1,
                signature=signature[:_SIGNATURE_LIMIT],
                docstring=first_paragraph(
                    "\n".join(_DOC_END.sub("", _DOC_MARKERS.sub("", line)) for line in doc_lines)
                ),
            )
        )
        if rule.inner is not None and body is not None:
            self.scan_body(body, end_line, symbol_path, self.rules(rule))

    def attached(
        self, index: int, floor: int, match: re.Match[str], rule: _Rule
    ) -> tuple[int, int, list[str]]:
        """The symbol's first line (doc comments, attributes above), where its header
        starts (a C return type may sit on the line above), and its doc comment lines."""
        start = index
        attached = self.language.attached
        type_line = self.language.type_line
        if type_line is not None and rule.kind == "function" and not match.group("ret").strip():
            # C style "static int\nname(args)": the return type sits on the line above.
            above = self.masked_lines[start - 1] if start > floor else ""
            if (
                type_line.fullmatch(above)
                and above.strip()
                and not above.rstrip().endswith((";", "{", "}", ")", ","))
            ):
                start -= 1
        header = start
        doc: list[str] = []
        while start > floor:
            above = self.lines[start - 1]
            if not above.strip() or not attached.match(above):
                break
            if self.masked_lines[start - 1].strip().endswith(
                ("}", ";")
            ) and not above.lstrip().startswith(("//", "/*", "*")):
                break
            start -= 1
            doc.insert(0, above)
        comment_lines = [line for line in doc if line.lstrip().startswith(("//", "/*", "*"))]
        return start, header, comment_lines
