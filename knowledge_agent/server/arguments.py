"""Checks of the tools' arguments: a bad value is a ``QueryError`` whose message names the
argument.

The MCP schema types and bounds each argument for agents; Python callers skip it, so every
tool checks its own arguments here first. The checks also bound what a schema leaves open:
the length of strings and of lists, so that no argument can make a call expensive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from knowledge_agent.errors import NotFoundError, QueryError

if TYPE_CHECKING:
    from knowledge_agent.core import KnowledgeAgentCore

__all__ = [
    "MAX_NAMES",
    "MAX_NAME_CHARS",
    "MAX_QUERY_CHARS",
    "flag",
    "integer",
    "knowledge_base",
    "knowledge_bases",
    "names",
    "number",
    "optional_text",
    "text",
]

MAX_NAMES = 100
"""Most names (knowledge bases, source types, languages …) one argument lists."""
MAX_NAME_CHARS = 200
"""Longest name, or keyword matched against names."""
MAX_QUERY_CHARS = 10_000
"""Longest question a search takes (a few pages of text: every word of it is looked up)."""
# How many knowledge bases an error about an unknown one lists.
_KBS_SHOWN = 20


def _shown(value: object) -> str:
    """A value as a message shows it: its repr, cut (a value may be a megabyte long)."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:79] + "…"


def integer(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an integer from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise QueryError(f"{name} must be an integer from {low} to {high}, got {_shown(value)}")
    return value


def number(name: str, value: object, low: float, high: float) -> float:
    """``value`` if it is a (finite) number from ``low`` to ``high``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise QueryError(f"{name} must be a number from {low:g} to {high:g}, got {_shown(value)}")
    return float(value)


def flag(name: str, value: object) -> bool:
    """``value`` if it is true or false (not 0, 1 or "yes")."""
    if not isinstance(value, bool):
        raise QueryError(f"{name} must be true or false, got {_shown(value)}")
    return value


def text(name: str, value: object, *, max_chars: int, blank: bool = False) -> str:
    """``value`` if it is a string of at most ``max_chars`` characters, not blank unless
    ``blank``."""
    if not isinstance(value, str) or (not blank and not value.strip()):
        kind = "a string" if blank else "a non-empty string"
        raise QueryError(f"{name} must be {kind}, got {_shown(value)}")
    if len(value) > max_chars:
        raise QueryError(
            f"{name} is {len(value):,} characters long; at most {max_chars:,} are allowed"
        )
    return value


def optional_text(name: str, value: object, *, max_chars: int) -> str | None:
    """``value`` as :func:`text` (blank allowed), or None."""
    return None if value is None else text(name, value, max_chars=max_chars, blank=True)


def names(
    name: str,
    value: object,
    *,
    max_count: int = MAX_NAMES,
    max_chars: int = MAX_NAME_CHARS,
) -> list[str] | None:
    """A name or a list of names as a list, blanks left out; None (no restriction) for
    nothing given."""
    if value is None:
        return None
    values: Sequence[object] = [value] if isinstance(value, str) else value  # type: ignore[assignment]
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise QueryError(f"{name} must be a string or a list of strings, got {_shown(value)}")
    if len(values) > max_count:
        raise QueryError(f"{name} lists {len(values):,} values; at most {max_count} are allowed")
    kept = [text(name, v, max_chars=max_chars, blank=True).strip() for v in values]  # type: ignore[arg-type]
    return [v for v in kept if v] or None


def knowledge_bases(core: KnowledgeAgentCore, name: str, value: object) -> list[str] | None:
    """The knowledge-base names ``value`` gives (None: every one); ``NotFoundError`` naming
    the first unknown one and the known ones, so an agent can correct itself at once."""
    wanted = names(name, value)
    if wanted:
        known = core.storage.sources.kb_names()
        unknown = [kb for kb in wanted if kb not in known]
        if unknown:
            shown = ", ".join(known[:_KBS_SHOWN]) + (" …" if len(known) > _KBS_SHOWN else "")
            raise NotFoundError(
                f"{name}: no knowledge base named {_shown(unknown[0])}; "
                f"the knowledge bases are: {shown or 'none'}"
            )
    return wanted


def knowledge_base(core: KnowledgeAgentCore, name: str, value: object) -> str:
    """The one knowledge base ``value`` names, as :func:`knowledge_bases`."""
    text(name, value, max_chars=MAX_NAME_CHARS)
    return knowledge_bases(core, name, value)[0]  # type: ignore[index]
