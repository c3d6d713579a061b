"""The second stage, shared by every backend: fusion, passage and document evidence,
boosts, query expansion and explanations."""
