"""Evidence references: ``kb:<chunk_id>:<path>#L<start>-L<end>@<hash>``.

A reference says where a cited passage is (the chunk, its document's path or URL, its lines)
and what it said (a short hash of the chunk's text), so a later reader can check whether the
text changed since it was cited.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EvidenceRef", "chunk_hash", "evidence_ref", "lines_label"]

_HASH_CHARS = 12
_REF = re.compile(
    r"kb:(?P<chunk>[^:]+):(?P<path>.*?)(?:#L(?P<start>\d+)-L(?P<end>\d+))?@(?P<hash>[0-9a-f]+)",
    re.DOTALL,
)


def chunk_hash(content: str) -> str:
    """A short hash of a chunk's text (12 hex digits of its SHA-256)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]


def lines_label(metadata: Mapping[str, Any]) -> str:
    """``L45-L68`` from a chunk's ``start_line`` / ``end_line``, or "" without them."""
    start, end = metadata.get("start_line"), metadata.get("end_line")
    if not isinstance(start, int):
        return ""
    return f"L{start}-L{end if isinstance(end, int) else start}"


def evidence_ref(chunk_id: str, path: str, metadata: Mapping[str, Any], content: str) -> str:
    """The reference of a chunk of the document at ``path``."""
    lines = lines_label(metadata)
    return f"kb:{chunk_id}:{path}{'#' + lines if lines else ''}@{chunk_hash(content)}"


@dataclass(frozen=True)
class EvidenceRef:
    """A parsed evidence reference."""

    chunk_id: str
    path: str
    start_line: int | None
    end_line: int | None
    content_hash: str

    @classmethod
    def parse(cls, text: str) -> EvidenceRef:
        """Read a reference; ``ValueError`` naming the expected shape if it is not one."""
        match = _REF.fullmatch(text) or _REF.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"not an evidence reference (kb:<chunk_id>:<path>#L<a>-L<b>@<hash>): {text!r}"
            )
        start, end = match.group("start"), match.group("end")
        return cls(
            chunk_id=match.group("chunk"),
            path=match.group("path"),
            start_line=int(start) if start else None,
            end_line=int(end) if end else None,
            content_hash=match.group("hash"),
        )

    def matches(self, content: str) -> bool:
        """Whether ``content`` is still the text that was cited."""
        return chunk_hash(content).startswith(self.content_hash)
