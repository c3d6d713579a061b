"""The dense index: an embedder's vectors in immutable segments, cosine similarity."""
