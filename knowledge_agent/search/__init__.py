"""Search: the two-stage engine (search_engine_impl), its settings, filters and hits, and the
second stage every backend shares (ranking/). The engine talks to a backend only through
knowledge_agent.protocols; search_index_manager and semantic_searcher are the spec's names for
the local backend's keyword and TF-IDF indexes."""
