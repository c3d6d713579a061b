"""What an error says when a feature's optional extra is not installed.

Every such message comes from :func:`missing_extra`, so each names its extra and gives the
same two install commands: by the installed distribution's name, which pip resolves against
the copy already installed (the package is not on a package index), and the README's line for
a checkout of the repository.
"""

from __future__ import annotations

__all__ = ["install_hint", "missing_extra"]

DISTRIBUTION = "knowledge-agent"
"""The distribution's name, as pyproject.toml declares it."""


def install_hint(extra: str) -> str:
    """The commands that install ``extra``: ``pip install "knowledge-agent[extra]"`` (which
    adds it to the installed package), or ``pip install ".[extra]"`` in a checkout."""
    return (
        f'pip install "{DISTRIBUTION}[{extra}]" '
        f'(or, in a checkout of knowledge_agent: pip install ".[{extra}]")'
    )


def missing_extra(feature: str, extra: str) -> str:
    """One line for ``feature`` (what needs it: "the MCP server") when the optional
    ``extra`` is not installed: the feature, the extra's name and :func:`install_hint`."""
    return f"{feature} needs the [{extra}] extra, which is not installed: {install_hint(extra)}"
