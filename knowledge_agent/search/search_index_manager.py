"""SearchIndexManager: the Whoosh BM25F keyword index (R4), the spec's module path.

The local backend's keyword index lives in :mod:`knowledge_agent.backends.local.keyword`."""

from knowledge_agent.backends.local.keyword.index import SearchIndexManager, verify_keyword_folder

__all__ = ["SearchIndexManager", "verify_keyword_folder"]
