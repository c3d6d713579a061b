"""The log-structured segment store the TF-IDF and dense indexes share: manifest, item
rows, filter masks and the merge policy."""
