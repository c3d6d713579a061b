"""The ``knowledge-agent`` command."""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import resources
from pathlib import Path

from knowledge_agent.chunking import ContentChunker
from knowledge_agent.models import KnowledgeItem
from knowledge_agent.storage import SQLiteStorageManager


def _sample_files() -> list[tuple[str, str]]:
    samples = resources.files("knowledge_agent") / "samples"
    return sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in samples.iterdir()
        if entry.name.endswith(".md")
    )


def demo() -> int:
    """Chunk the bundled samples into a throwaway knowledge base and show the chunks."""
    chunker = ContentChunker()
    with (
        tempfile.TemporaryDirectory() as folder,
        SQLiteStorageManager(Path(folder) / "demo.sqlite3") as storage,
    ):
        for name, text in _sample_files():
            item = KnowledgeItem(title=name, content=text, source_uri=name)
            storage.save_item_with_chunks(item, chunker.chunk(text, title=name))
        print(f"Stored {storage.count_items()} documents as {storage.count_chunks()} chunks.\n")
        for item in storage.iter_items():
            print(item.source_uri)
            for chunk in storage.get_chunks_for_item(item.id):
                lines = f"L{chunk.metadata['start_line']}-L{chunk.metadata['end_line']}"
                preview = " ".join(chunk.content.split())[:70]
                print(f"  #{chunk.chunk_index} {lines:<9} {chunk.heading}")
                print(f"      {preview}…")
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
