"""Benchmark harnesses for knowledge_agent (not tests: pytest never collects this folder).

Run them as scripts from the project root, e.g. ``python benchmarks/quality.py``; they read the
evaluation data from ``../shared/datasets``.
"""
