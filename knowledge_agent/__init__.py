"""knowledge_agent: an offline knowledge base and search engine for AI agents."""

import typing as _typing
from importlib import metadata as _metadata

from knowledge_agent import errors
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.models import (
    ItemSummary,
    KnowledgeChunk,
    KnowledgeItem,
    MatchedChunk,
    SearchResult,
)

if _typing.TYPE_CHECKING:
    from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore
    from knowledge_agent.crawl import CrawlOptions

try:
    __version__ = _metadata.version("knowledge-agent")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ChunkConfig",
    "ContentChunker",
    "CrawlOptions",
    "ItemSummary",
    "KnowledgeAgentCore",
    "KnowledgeChunk",
    "KnowledgeItem",
    "MatchedChunk",
    "SearchResult",
    "errors",
]


def __getattr__(name: str) -> _typing.Any:
    # The core loads scipy and Whoosh: only when it is first used, so the command line's
    # --help and --version, and the lower layers, start fast.
    if name == "KnowledgeAgentCore":
        from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore

        return KnowledgeAgentCore
    if name == "CrawlOptions":
        from knowledge_agent.crawl import CrawlOptions

        return CrawlOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
