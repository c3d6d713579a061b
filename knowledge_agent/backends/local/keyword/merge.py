"""The keyword indexes' segment merge policy: tiers by order of magnitude."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from whoosh.reading import SegmentReader
from whoosh.writing import SegmentWriter

from knowledge_agent.backends.local.keyword.parts import Codec, spill_to_pool

__all__ = ["may_merge", "merge_policy"]

_MERGE_LIMIT_MB = 128  # postings Whoosh's own writer holds in a merge before spilling runs
_SEGMENTS_PER_TIER = 8  # segments of one size tier that are merged into one


def size_tier(doc_count: int) -> int:
    return int(math.log10(max(doc_count, 1)))


def may_merge(segments: Sequence[Any]) -> bool:
    """Whether :func:`merge_policy` could merge any of ``segments`` (a tier holds at least
    ``_SEGMENTS_PER_TIER`` segments with documents)."""
    return sum(1 for segment in segments if segment.doc_count() > 0) >= _SEGMENTS_PER_TIER


def merge_policy(added: int) -> Callable[[SegmentWriter, list[Any]], list[Any]]:
    """A whoosh merge policy for a commit that adds ``added`` documents.

    Segments are tiered by the order of magnitude of their document count; a tier holding
    ``_SEGMENTS_PER_TIER`` segments is merged into one. A commit merges at most one tier,
    and no tier above the size of its own update: one edited file never rewrites a large
    segment (whoosh's MERGE_SMALL merged every segment below a fibonacci bound: 20 s to
    delete one file from a 32K-chunk index), while bulk updates keep the count bounded.
    """
    highest = max(1, size_tier(added))

    def merge(writer: SegmentWriter, segments: list[Any]) -> list[Any]:
        # A segment whose documents are all deleted is dropped: left out of the list.
        segments = [segment for segment in segments if segment.doc_count() > 0]
        tiers: dict[int, list[Any]] = {}
        for segment in segments:
            tiers.setdefault(size_tier(segment.doc_count()), []).append(segment)
        for tier, members in sorted(tiers.items()):
            if tier <= highest and len(members) >= _SEGMENTS_PER_TIER:
                spill_to_pool(writer, _MERGE_LIMIT_MB)  # (a bulk writer reads in slices)
                for segment in members:
                    reader = SegmentReader(writer.storage, writer.schema, segment, codec=Codec())
                    writer.add_reader(reader)
                    reader.close()
                merged = {id(segment) for segment in members}
                return [segment for segment in segments if id(segment) not in merged]
        return segments

    return merge
