"""Splitting documents into chunks."""

from knowledge_agent.chunking.content_chunker import ChunkConfig, ContentChunker, Section

__all__ = ["ChunkConfig", "ContentChunker", "Section"]
