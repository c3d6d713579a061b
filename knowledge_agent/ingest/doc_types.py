"""A document's type (adr, runbook, spec, guide, …) from the folders it sits in."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

__all__ = ["DEFAULT_DOC_TYPE_RULES", "INDEX_FILES", "doc_type_for"]

# Folder name (lower case) → doc type.
DEFAULT_DOC_TYPE_RULES: Mapping[str, str] = {
    "adr": "adr",
    "adrs": "adr",
    "decisions": "adr",
    "runbook": "runbook",
    "runbooks": "runbook",
    "playbooks": "runbook",
    "spec": "spec",
    "specs": "spec",
    "specifications": "spec",
    "guide": "guide",
    "guides": "guide",
    "howto": "guide",
    "how-to": "guide",
    "how-tos": "guide",
    "tutorial": "guide",
    "tutorials": "guide",
    "reference": "reference",
    "references": "reference",
    "api": "reference",
    "faq": "faq",
    "faqs": "faq",
    "changelog": "changelog",
    "changelogs": "changelog",
    "release-notes": "changelog",
}


INDEX_FILES = frozenset({"index.md", "_index.md", "index.rst", "index.txt"})
"""A folder's table of contents: doc type ``index`` wherever it is (ranked low by default)."""


def doc_type_for(relative: str, root_name: str = "", rules: Mapping[str, str] | None = None) -> str:
    """The doc type of a file: ``index`` for a table of contents (``INDEX.md``), else that of
    its nearest matching folder, else the root's name, else ""."""
    path = PurePosixPath(relative)
    if path.name.lower() in INDEX_FILES:
        return "index"
    table = DEFAULT_DOC_TYPE_RULES if rules is None else rules
    for folder in [*reversed(path.parts[:-1]), root_name]:
        found = table.get(folder.lower())
        if found:
            return found
    return ""
