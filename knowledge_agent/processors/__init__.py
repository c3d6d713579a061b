"""Format processors: turn a file's bytes into text, a title and chunks (R3).

One processor per format (Markdown, plain text, reStructuredText, HTML, PDF, source
code, data files, logs), all subclasses of :class:`BaseDataSourceProcessor`, chosen by
:func:`processor_for` in :mod:`.registry`. Callers use :func:`process_file` or
:func:`process_bytes`, which return a :class:`ProcessedDocument` or raise
``IngestError`` (``UnsupportedSourceError`` for binary, empty and oversized files).
"""

from knowledge_agent.processors.base import BaseDataSourceProcessor, ProcessedDocument
from knowledge_agent.processors.registry import (
    SUPPORTED_EXTENSIONS,
    process_bytes,
    process_file,
    processor_for,
)

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "BaseDataSourceProcessor",
    "ProcessedDocument",
    "process_bytes",
    "process_file",
    "processor_for",
]
