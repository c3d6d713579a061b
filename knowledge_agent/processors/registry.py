"""Which processor handles a file, and the two entry points that run one.

Choice, in order: ``.pdf`` or a ``%PDF-`` header is a PDF; binary-looking bytes are not
indexable; a known code file name (``Makefile``, ``CMakeLists.txt``) is code; then the
extension; then the content — an HTML doctype / ``<html>`` is HTML, a shebang is code,
and any other text is plain text.

:func:`process_file` and :func:`process_bytes` are module-level functions of picklable
arguments with a picklable result, so they can run in a ``ProcessPoolExecutor``. They
raise only ``IngestError`` (``UnsupportedSourceError`` for files that are skipped rather
than failed): one bad file must never stop a folder ingest.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePath
from types import MappingProxyType

from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.errors import IngestError, UnsupportedSourceError
from knowledge_agent.processors.base import BaseDataSourceProcessor, ProcessedDocument
from knowledge_agent.processors.code import CodeProcessor, detect_code_language
from knowledge_agent.processors.encoding import (
    binary_problem,
    bom_encoding,
    looks_binary,
    unmarked_utf_encoding,
)
from knowledge_agent.processors.html import HtmlProcessor
from knowledge_agent.processors.pdf import PdfProcessor
from knowledge_agent.processors.rst import RstProcessor, find_rst_headings
from knowledge_agent.processors.text import (
    DataProcessor,
    LogProcessor,
    MarkdownProcessor,
    TextProcessor,
)

__all__ = [
    "PROCESSORS",
    "SOURCE_TYPES",
    "SUPPORTED_EXTENSIONS",
    "process_bytes",
    "process_file",
    "processor_for",
]

PROCESSORS: tuple[type[BaseDataSourceProcessor], ...] = (
    MarkdownProcessor,
    RstProcessor,
    TextProcessor,
    HtmlProcessor,
    PdfProcessor,
    CodeProcessor,
    DataProcessor,
    LogProcessor,
)
_BY_EXTENSION = MappingProxyType(
    {extension: processor for processor in PROCESSORS for extension in processor.extensions}
)
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_BY_EXTENSION)
SOURCE_TYPES: tuple[str, ...] = tuple(sorted({processor.source_type for processor in PROCESSORS}))
"""Every ``source_type`` an item collected from a file or page can have."""
"""Extensions (lower-case, with the dot) that have a processor."""

SNIFF_BYTES = 4096  # how much of a file processor_for needs to see
_MEGABYTE = 1024 * 1024
_HTML_STARTS = ("<!doctype html", "<html")


def processor_for(path: str, head: bytes) -> type[BaseDataSourceProcessor] | None:
    """The processor class for a file, from its name and first bytes; ``None`` if binary.

    ``head`` is the start of the file (:data:`SNIFF_BYTES` is plenty).
    """
    extension = _extension(path)
    processor = _BY_EXTENSION.get(extension)
    if processor is PdfProcessor or (processor is None and b"%PDF-" in head[:1024]):
        return PdfProcessor
    if looks_binary(head):
        return None
    if processor in (None, TextProcessor) and detect_code_language(path) is not None:
        return CodeProcessor  # Makefile, Dockerfile, CMakeLists.txt
    if processor is TextProcessor and extension == ".txt" and _looks_like_rst(head):
        return RstProcessor  # Sphinx projects (Django's docs) keep their sources as .txt
    if processor is not None:
        return processor
    start = _text_start(head)
    if start.startswith(_HTML_STARTS):
        return HtmlProcessor
    if detect_code_language(path, start) is not None:
        return CodeProcessor
    return TextProcessor


_RST_MARKUP = re.compile(
    rb"^\.\. [\w:-]+::|^\.\. _[^:\n]+:|:(?:ref|doc|class|func|meth|setting):`", re.M
)


def _looks_like_rst(head: bytes) -> bool:
    """Whether a text file's start reads as reStructuredText: a section title under (or
    between) adornment lines and some reST markup (a directive, a target, a role)."""
    if not _RST_MARKUP.search(head):
        return False
    text = head.decode("utf-8", "replace").replace("\r\n", "\n")
    return bool(find_rst_headings(text))


def process_bytes(data: bytes, path: str, config: ChunkConfig | None = None) -> ProcessedDocument:
    """Extract and chunk the content of the file ``path``, given as ``data``.

    Raises ``UnsupportedSourceError`` for binary or empty content and ``IngestError``
    for anything else that goes wrong; never another exception.
    """
    try:
        if not data.strip():
            raise UnsupportedSourceError(path, "empty file")
        processor = processor_for(path, data[:SNIFF_BYTES])
        if processor is None:
            raise UnsupportedSourceError(path, _binary_reason(path, data[:SNIFF_BYTES]))
        return processor(ContentChunker(config)).process(data, path)
    except IngestError:
        raise
    except Exception as exc:  # a processor bug must not stop a folder ingest
        raise IngestError(path, f"{type(exc).__name__}: {exc}") from exc


def process_file(
    path: str | os.PathLike[str],
    config: ChunkConfig | None = None,
    *,
    max_file_size: int | None = None,
) -> ProcessedDocument:
    """Read the file at ``path`` and :func:`process_bytes` it.

    Raises ``UnsupportedSourceError`` for a file over ``max_file_size`` bytes and
    ``IngestError`` when it cannot be read (the reason is the operating system's).
    """
    name = os.fspath(path)
    try:
        if max_file_size is not None and os.path.getsize(name) > max_file_size:
            raise UnsupportedSourceError(
                name, f"larger than the {max_file_size / _MEGABYTE:g} MB limit"
            )
        with open(name, "rb") as handle:
            data = handle.read()
    except IngestError:
        raise
    except OSError as exc:
        raise IngestError(name, exc.strerror or str(exc)) from exc
    except Exception as exc:
        raise IngestError(name, f"{type(exc).__name__}: {exc}") from exc
    if max_file_size is not None and len(data) > max_file_size:  # it grew while we looked
        raise UnsupportedSourceError(
            name, f"larger than the {max_file_size / _MEGABYTE:g} MB limit"
        )
    return process_bytes(data, name, config)


def _binary_reason(path: str, head: bytes) -> str:
    """Why a file is skipped as binary; a file named as text gets the encoding blamed."""
    problem = binary_problem(head)
    if (
        problem is None
        or problem == "a binary file signature"
        or _extension(path) not in _BY_EXTENSION
    ):
        return "binary file"
    return f"unrecognised text encoding: {problem}"


def _extension(path: str) -> str:
    return PurePath(path.replace("\\", "/")).suffix.lower()


def _text_start(head: bytes) -> str:
    """The first characters of ``head`` as lower-case text, leading whitespace removed."""
    encoding = bom_encoding(head) or unmarked_utf_encoding(head)
    if encoding is not None:
        codec = "utf-8" if encoding == "utf-8-sig" else encoding
        text = head.decode(codec, errors="ignore").lstrip("\ufeff")
    else:
        text = head.decode("utf-8", errors="ignore")
    return text.lstrip()[:256].lower()
