"""SemanticSearcher: the TF-IDF cosine index (R4.2), the spec's module path.

The local backend's TF-IDF index lives in :mod:`knowledge_agent.backends.local.tfidf`."""

from knowledge_agent.backends.local.tfidf.index import SemanticSearcher

__all__ = ["SemanticSearcher"]
