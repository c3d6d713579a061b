"""The PostgreSQL backend: one database holds a knowledge base completely.

``connection`` opens a connection from a ``postgresql://`` URL (psycopg 3, imported only when
this backend is used), ``schema`` versions each component's tables, and ``storage`` keeps
items, chunks, knowledge bases, tracked sources and doc pages (the ``Storage`` protocol),
calling the index writers inside each write's transaction. ``postings`` is that writer: the
analysed terms and the statistics BM25F needs; ``keyword`` and ``vectors`` rank from them in
SQL. ``backend`` puts them together for the core.
"""
