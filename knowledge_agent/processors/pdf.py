"""PDF documents through pypdf: text per page, page numbers on every chunk.

The content is the pages' text joined by blank lines; the offset where each page starts
is kept so every chunk gets ``page`` (first page it touches, 1-based) and ``page_end``.
Broken files become ``IngestError``: pypdf raises many exception types on malformed
input, and one bad PDF must not stop a folder ingest.
"""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING, Any

from knowledge_agent.errors import IngestError, UnsupportedSourceError
from knowledge_agent.processors.base import BaseDataSourceProcessor, Extraction, file_stem
from knowledge_agent.processors.encoding import normalize_newlines

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["PdfProcessor"]

logger = logging.getLogger(__name__)

PAGE_SEPARATOR = "\n\n"
_EOF_MARKER = b"%%EOF"
# Exceptions pypdf lets escape on malformed input besides its own PyPdfError family.
_MALFORMED_BUILTIN = (
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    AssertionError,
    RecursionError,
)


def _malformed() -> tuple[type[Exception], ...]:
    # pypdf is imported on first use, here and below: a sixth of the package's import
    # time, which opening a knowledge base and searching never need.
    from pypdf.errors import PyPdfError

    return (PyPdfError, *_MALFORMED_BUILTIN)


class PdfProcessor(BaseDataSourceProcessor):
    """PDF files; title and author from the document information when present."""

    name = "pdf"
    extensions = frozenset({".pdf"})
    source_type = "pdf"
    content_type = "application/pdf"

    def extract(self, data: bytes, path: str) -> Extraction:
        reader = _open(data, path)
        pages = _page_texts(reader, path)
        content = PAGE_SEPARATOR.join(pages)
        if not content.strip():
            raise UnsupportedSourceError(path, "no extractable text (scanned PDF?)")
        page_starts: list[int] = []
        offset = 0
        for text in pages:
            page_starts.append(offset)
            offset += len(text) + len(PAGE_SEPARATOR)
        info = _document_info(reader)
        metadata: dict[str, Any] = {"page_count": len(pages), **info}
        title = info.get("title") or _first_line(content) or file_stem(path)
        return Extraction(content=content, title=title, page_starts=page_starts, metadata=metadata)


def _open(data: bytes, path: str) -> PdfReader:
    """A reader for ``data``, decrypted with the empty password if needed."""
    if _EOF_MARKER not in data:
        # Lenient pypdf tolerates junk after the end marker and rebuilds a damaged
        # cross-reference table, but a file with no end marker at all has lost its tail.
        raise IngestError(path, "corrupt or truncated PDF: no %%EOF end marker")
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                decrypted = reader.decrypt("")
            except (DependencyError, NotImplementedError) as exc:
                # AES needs the optional "cryptography" package; some schemes pypdf lacks.
                raise IngestError(path, f"encrypted PDF (cannot decrypt: {exc})") from exc
            if not decrypted:
                raise IngestError(path, "encrypted PDF (password required)")
        len(reader.pages)  # reads the page tree: a broken one fails here, not later
    except IngestError:
        raise
    except FileNotDecryptedError as exc:
        raise IngestError(path, "encrypted PDF (password required)") from exc
    except _malformed() as exc:
        raise IngestError(path, f"corrupt or truncated PDF: {exc}") from exc
    return reader


def _page_texts(reader: PdfReader, path: str) -> list[str]:
    """Each page's text with ``\\n`` line ends; a page that cannot be read is empty."""
    from pypdf.errors import PdfReadError

    malformed = _malformed()
    texts: list[str] = []
    try:
        pages = list(reader.pages)
    except malformed as exc:
        raise IngestError(path, f"corrupt or truncated PDF: {exc}") from exc
    for number, page in enumerate(pages, start=1):
        try:
            text = page.extract_text() or ""
        except (*malformed, PdfReadError) as exc:
            logger.warning("%s: page %d has no readable text (%s)", path, number, exc)
            text = ""
        texts.append(normalize_newlines(text).strip())
    return texts


def _document_info(reader: PdfReader) -> dict[str, str]:
    """Title, author, subject, creator and producer from the info dictionary, as text."""
    malformed = _malformed()
    try:
        info = reader.metadata
    except malformed:
        return {}
    if not info:
        return {}
    found: dict[str, str] = {}
    for key, name in (
        ("/Title", "title"),
        ("/Author", "author"),
        ("/Subject", "subject"),
        ("/Creator", "creator"),
        ("/Producer", "producer"),
    ):
        try:
            value = info.get(key)
        except malformed:
            continue
        text = " ".join(str(value).split()) if value is not None else ""
        if text:
            found[name] = text
    return found


def _first_line(content: str) -> str:
    for line in content.split("\n"):
        if line.strip():
            return line.strip()[:200]
    return ""
