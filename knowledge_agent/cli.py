"""The ``knowledge-agent`` command."""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import resources

from knowledge_agent.core import KnowledgeAgentCore
from knowledge_agent.models import SearchResult

DEMO_QUERIES = (
    "how do I roll back a failed deploy",
    "ETag revalidation 304",
    "如何重置密码",
)


def _sample_files() -> list[tuple[str, str]]:
    samples = resources.files("knowledge_agent") / "samples"
    return sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in samples.iterdir()
        if entry.name.endswith(".md")
    )


def _title(text: str, default: str) -> str:
    """The first level-one heading of a markdown page."""
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return default


def _format_result(rank: int, result: SearchResult) -> str:
    best = result.matched_chunks[0] if result.matched_chunks else None
    lines = ""
    if best is not None:
        lines = f":{best.metadata.get('start_line', '?')}-{best.metadata.get('end_line', '?')}"
    out = [f"{rank}. {result.item.title}  ({result.item.source_uri}{lines})"]
    out.append(f"   score {result.relevance_score:.4f}")
    if best is not None and best.heading:
        out.append(f"   § {best.heading}")
    if result.highlights:
        out.append("   " + " ".join(result.highlights[0].split()))
    if result.context_chunks:
        indexes = ", ".join(str(chunk.chunk_index) for chunk in result.context_chunks)
        out.append(f"   context: chunks {indexes}")
    return "\n".join(out)


def demo() -> int:
    """Index the bundled sample knowledge base in a throwaway folder and answer three queries."""
    with tempfile.TemporaryDirectory() as folder, KnowledgeAgentCore(folder) as core:
        with core.batch():
            for name, text in _sample_files():
                core.add_text(
                    text, title=_title(text, name), source_uri=name, source_type="markdown"
                )
        print(
            f"Indexed {core.storage.count_items()} sample documents "
            f"as {core.storage.count_chunks()} chunks.\n"
        )
        for query in DEMO_QUERIES:
            print(f"Query: {query}")
            for rank, result in enumerate(core.search(query, limit=2), start=1):
                print(_format_result(rank, result))
            print()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="knowledge-agent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help=demo.__doc__)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
