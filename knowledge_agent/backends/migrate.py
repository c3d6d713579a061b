"""Copying a knowledge base from one backend's storage to another's (``knowledge-agent migrate``).

Everything the storage holds goes across through the :class:`~knowledge_agent.protocols.Storage`
protocol alone: knowledge bases with their descriptions, items with their chunks, collected
roots and tracked files, doc sources and their pages. The target's indexes follow its own way
(a server indexes each write in its transaction; a data folder from its journal). What only
describes the source's own indexes (their journal position, fingerprint) stays behind.

Items are written in groups, each one transaction, and an item already in the target is
replaced: a migration that stopped half-way (Ctrl-C, a lost connection) is finished by running
it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass

from knowledge_agent.protocols import Storage

__all__ = ["MigrateReport", "copy_storage"]

logger = logging.getLogger(__name__)

_GROUP = 200  # items per transaction


@dataclass
class MigrateReport:
    """What was copied."""

    knowledge_bases: int = 0
    items: int = 0
    chunks: int = 0
    roots: int = 0
    sources: int = 0
    doc_sources: int = 0
    doc_pages: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def copy_storage(
    source: Storage,
    target: Storage,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> MigrateReport:
    """Copy everything ``source`` holds into ``target``; ``progress(items done, items)``."""
    report = MigrateReport()
    names = source.sources.kb_names()
    for name in names:
        info = source.sources.kb_info(name)
        target.sources.ensure_kb(name, info.description if info else None)
    report.knowledge_bases = len(names)
    total = source.count_items()
    group: list[str] = []

    def write(item_ids: list[str]) -> None:
        items = source.get_items(item_ids)
        with target.write_group("migrate"):
            for item_id in item_ids:
                chunks = source.get_chunks_for_item(item_id)
                target.save_item_with_chunks(items[item_id], chunks)
                report.chunks += len(chunks)
        report.items += len(item_ids)
        if progress is not None:
            progress(report.items, total)

    for item in source.iter_items():
        group.append(item.id)
        if len(group) == _GROUP:
            write(group)
            group = []
    if group:
        write(group)
    with target.write_group("migrate"):
        for root in source.sources.get_roots():
            target.sources.save_root(root)
            report.roots += 1
        for name in names:
            for record in source.sources.get_sources(name).values():
                target.sources.save_source(record)
                report.sources += 1
        for doc_source in source.doc_sources.get_doc_sources():
            target.doc_sources.save_doc_source(doc_source)
            report.doc_sources += 1
        for name in names:
            for page in source.doc_sources.get_doc_pages(name).values():
                target.doc_sources.save_doc_page(page)
                report.doc_pages += 1
    logger.info("migrated %d items in %d knowledge bases", report.items, len(names))
    return report
