"""Filter values the command line checks before searching: a typo is an error, not silence."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

__all__ = ["check_filters", "check_values"]

# What detect_language gives; items may carry others, given when they were added.
_DETECTED_LANGUAGES = ("en", "ja", "ko", "zh")


def check_values(option: str, given: Iterable[str], valid: Iterable[str]) -> None:
    """``click.BadParameter`` (exit 2) for a value of ``option`` that is not among ``valid``,
    naming the closest valid value and listing them all."""
    choices = sorted(set(valid))
    for value in given:
        if value in choices:
            continue
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        listed = ", ".join(choices) if choices else "none yet"
        raise click.BadParameter(f"unknown {value!r}: {hint}valid: {listed}", param_hint=option)


def check_filters(
    core: KnowledgeAgentCore,
    *,
    kb: Sequence[str] = (),
    source_types: Sequence[str] = (),
    doc_types: Sequence[str] = (),
    languages: Sequence[str] = (),
    doc_type_rules: Iterable[str] = (),
) -> None:
    """Check every filter value against what the knowledge base holds or can hold."""
    from knowledge_agent.processors.registry import SOURCE_TYPES

    storage = core.storage
    # The valid values are read only for an option that was given: each is a scan of items.
    if kb:
        check_values("--kb", kb, storage.sources.kb_names())
    if source_types:
        check_values("--type", source_types, [*SOURCE_TYPES, *storage.field_values("source_type")])
    if doc_types:
        known = [*doc_type_rules, *core.engine.config.doc_type_weights]
        check_values("--doc-type", doc_types, [*known, *storage.field_values("doc_type")])
    if languages:
        check_values("--lang", languages, [*_DETECTED_LANGUAGES, *storage.field_values("language")])
