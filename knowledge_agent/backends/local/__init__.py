"""The default backend: a data folder (SQLite, Whoosh, TF-IDF and dense segment stores),
shared by several processes (SharedIndexes)."""
