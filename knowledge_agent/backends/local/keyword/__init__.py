"""The keyword index: Whoosh BM25F over chunks and items, its bulk writer, filters and
safe loading."""
