"""Heading text as a reader sees it: without the attribute lists of MkDocs, kramdown and
Pandoc (``## Lifespan Events { #lifespan-events }``), which are markup, not words."""

from __future__ import annotations

import re

__all__ = ["clean_heading"]

_ATTRIBUTE = r"""(?:[#.][\w:.-]+|[\w-]+=(?:"[^"]*"|'[^']*'|[^\s}]+))"""
_ATTRIBUTE_LIST = re.compile(rf"\s*\{{:?\s*{_ATTRIBUTE}(?:\s+{_ATTRIBUTE})*\s*\}}\s*$")


def clean_heading(text: str) -> str:
    """``text`` without a trailing attribute list (``{ #id .class key=value }``), stripped."""
    return _ATTRIBUTE_LIST.sub("", text).strip()
