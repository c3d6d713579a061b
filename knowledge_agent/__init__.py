"""knowledge_agent: an offline knowledge base and search engine for AI agents."""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from knowledge_agent import errors
    from knowledge_agent.chunking import ChunkConfig, ContentChunker
    from knowledge_agent.core.knowledge_agent_core import KnowledgeAgentCore
    from knowledge_agent.crawl import CrawlOptions
    from knowledge_agent.models import (
        ItemSummary,
        KnowledgeChunk,
        KnowledgeItem,
        MatchedChunk,
        SearchResult,
    )

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

# Every public name is loaded on first use: the core loads scipy and Whoosh, and the
# command line's entry point must be running (to turn a Ctrl-C into one line) before
# anything heavy is imported.
_HOMES = {
    "ChunkConfig": "knowledge_agent.chunking",
    "ContentChunker": "knowledge_agent.chunking",
    "CrawlOptions": "knowledge_agent.crawl",
    "ItemSummary": "knowledge_agent.models",
    "KnowledgeAgentCore": "knowledge_agent.core.knowledge_agent_core",
    "KnowledgeChunk": "knowledge_agent.models",
    "KnowledgeItem": "knowledge_agent.models",
    "MatchedChunk": "knowledge_agent.models",
    "SearchResult": "knowledge_agent.models",
}


def __getattr__(name: str) -> _typing.Any:
    if name == "errors":
        return _importlib.import_module("knowledge_agent.errors")
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("knowledge-agent")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
