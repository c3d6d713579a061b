"""The TF-IDF index: hashed term counts in immutable segments, cosine similarity."""
