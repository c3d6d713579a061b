"""knowledge_agent: an offline knowledge base and search engine for AI agents."""

from knowledge_agent import errors
from knowledge_agent.chunking import ChunkConfig, ContentChunker
from knowledge_agent.core import KnowledgeAgentCore
from knowledge_agent.models import KnowledgeChunk, KnowledgeItem, MatchedChunk, SearchResult

__all__ = [
    "ChunkConfig",
    "ContentChunker",
    "KnowledgeAgentCore",
    "KnowledgeChunk",
    "KnowledgeItem",
    "MatchedChunk",
    "SearchResult",
    "errors",
]
