"""A gitignore pattern list that answers "no pattern matches" with one regex search.

pathspec's ``GitIgnoreSpec.check_file`` tries each pattern in turn, so a folder walk paid one
regex search per pattern (about a hundred with the default excludes) for every file. Almost
every path matches none of them, and one search of the patterns joined into a single
alternation says so; only a path that matches one goes through ``check_file`` for the answer
(which pattern wins). The answers are those of ``check_file`` in every case.
"""

from __future__ import annotations

import re

from pathspec import GitIgnoreSpec

__all__ = ["ScreenedSpec"]

# Named groups (pathspec marks a directory match with one) would repeat in the alternation.
_NAMED_GROUP = re.compile(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>")


class ScreenedSpec:
    """``spec.check_file`` as ``(include, index)``, screened by one joined regex."""

    __slots__ = ("_screen", "spec")

    def __init__(self, spec: GitIgnoreSpec) -> None:
        self.spec = spec
        self._screen = _screen(spec)

    def __len__(self) -> int:
        return len(self.spec)

    def check(self, path: str) -> tuple[bool | None, int | None]:
        """Whether ``path`` is matched to be excluded (True), re-included (False) or not
        matched (None), and the index of the deciding pattern."""
        if self._screen is not None and self._screen.search(path) is None:
            return None, None
        result = self.spec.check_file(path)
        return result.include, result.index


def _screen(spec: GitIgnoreSpec) -> re.Pattern[str] | None:
    """One regex matching where any pattern of ``spec`` that counts does; None when the
    patterns cannot be joined exactly (then every path is checked pattern by pattern)."""
    parts: list[str] = []
    for pattern in spec.patterns:
        if pattern.include is None:
            continue  # a comment or blank line: never decides
        regex = getattr(pattern, "regex", None)
        if regex is None:
            continue
        if not isinstance(regex.pattern, str) or regex.flags != re.UNICODE:
            return None
        if "(?P=" in regex.pattern or "(?" in _NAMED_GROUP.sub("", regex.pattern).replace(
            "(?:", ""
        ):
            return None  # back-references, inline flags, look-arounds: not joined
        parts.append(f"(?:{_NAMED_GROUP.sub('(?:', regex.pattern)})")
    if not parts:
        return re.compile(r"(?!)")  # nothing can match
    try:
        return re.compile("|".join(parts))
    except re.error:
        return None
