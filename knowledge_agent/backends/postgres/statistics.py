"""The postings tables' statistics, cached across searches for one generation of the tables.

A search needs, per level, the number of documents and the total field lengths
(``kw_stats``), and per query term its document frequencies (the sums of its posting rows'
counts). Read afresh, that is two or three round trips for each of the calls a search makes
(the idf for the confidence, the unseen terms, the chunk and item rankings, the TF-IDF
ranking). Here they are read once and kept while the tables' **generation** stays the same.

The generation is ``(Σ changes, Σ norms_at, rows)`` over ``kw_stats``: every write of
documents adds to the ``changes`` of the rows it touches, in its transaction, a refresh of the
TF-IDF norms moves ``norms_at`` up to ``changes``, a new knowledge base adds rows, and no row
is ever deleted (a clear zeroes them and still counts a change), so the generation never
comes back to an earlier value: equal generations mean equal statistics and frequencies,
whichever process wrote, on whatever machine.

* Statistics and the frequencies of the terms asked for are read in **one statement** (one
  snapshot), so what is cached under a generation is what that generation holds.
* Outside a search's scope, every read checks the generation (one round trip for the
  statistics; frequencies already cached cost nothing more).
* Inside :meth:`Statistics.search` (a search from start to end), the generation is checked at
  the first read only; the later reads of the same search trust it.
* A ranking statement reads the generation in its own snapshot (:data:`GENERATION_SQL`) and
  its caller compares it with the one its statistics came from: when a write committed in
  between, the statistics are read again and the ranking run again, so the scores are
  always those of the statistics of the postings they were computed from.
* What rankings read into this process for a generation (the query terms' postings, the
  stored TF-IDF norms: :mod:`.client_rank`) is kept in its :class:`StatsState` and goes with
  it; a ranking that finds all it needs there sends no statement and answers as of the
  generation its search checked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "GENERATION_SQL",
    "Generation",
    "LevelStats",
    "Statistics",
    "StatsState",
    "generation_of",
]

Generation = tuple[int, int, int]

GENERATION_SQL = """
    generation AS (
        SELECT coalesce(sum(changes), 0)::int8 AS changes,
            coalesce(sum(norms_at), 0)::int8 AS norms_at, count(*)::int8 AS rows
        FROM kw_stats
    )
"""
"""A CTE naming the generation of the statement's snapshot (columns changes, norms_at, rows)."""


def generation_of(row: Any) -> Generation:
    """The generation in a row's first three columns (those of :data:`GENERATION_SQL`)."""
    return (int(row[0]), int(row[1]), int(row[2]))


# The statistics per level, then the frequencies of the terms asked for: one snapshot.
_READ = """
    SELECT 0, level, NULL::text, coalesce(sum(docs), 0)::int8, coalesce(sum(len), 0)::int8,
        coalesce(sum(len_head), 0)::int8, coalesce(sum(changes), 0)::int8,
        coalesce(sum(norms_at), 0)::int8, count(*)::int8, bool_and(changes = norms_at)
    FROM kw_stats GROUP BY level
    UNION ALL
    SELECT 1, level, term, sum(df)::int8, sum(df_head)::int8, sum(df_vec)::int8,
        NULL, NULL, NULL, NULL
    FROM kw_postings WHERE level IN (0, 1) AND term = ANY(%s::text[]) GROUP BY level, term
"""
# ``level IN (0, 1)`` names the index's first column: without it, a table not yet analysed is
# scanned whole (16 ms for 145,000 rows) rather than searched twice per term.

MAX_CACHED_TERMS = 200_000
"""Frequencies kept at most; past it the cache starts again (it refills from the queries)."""


@dataclass(frozen=True)
class LevelStats:
    """One level's documents, total field lengths and whether the stored TF-IDF norms
    reflect its last change."""

    docs: int = 0
    length: int = 0
    length_head: int = 0
    norms_fresh: bool = True


_EMPTY = LevelStats()
_NO_DF = (0, 0, 0)


@dataclass
class StatsState:
    """What one generation holds: the levels' statistics and the frequencies read so far
    (per term and level: df in content, df in the head field, df in the vectors)."""

    generation: Generation
    levels: dict[int, LevelStats]
    df: dict[str, dict[int, tuple[int, int, int]]] = field(default_factory=dict)
    # What searches read into this process for this generation (:mod:`.term_postings`,
    # :mod:`.client_rank`): terms' postings by (level, term), least recently read first,
    # knowledge bases' codes, each level's stored TF-IDF norms.
    postings: dict[tuple[int, str], Any] = field(default_factory=dict)
    kept_postings: int = 0
    kb_codes: dict[str, int] = field(default_factory=dict)
    norms: dict[int, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def level(self, level: int) -> LevelStats:
        return self.levels.get(level, _EMPTY)

    def frequencies(self, term: str, level: int) -> tuple[int, int, int]:
        """(df, df_head, df_vec) of a term this state has read (0s when no document holds
        it)."""
        return self.df.get(term, {}).get(level, _NO_DF)

    @property
    def norms_fresh(self) -> bool:
        return all(stats.norms_fresh for stats in self.levels.values())


class Statistics:
    """The statistics of one database's postings tables, shared by the indexes that read
    them (each reads through its own connection). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: StatsState | None = None
        self._scope = threading.local()
        self.reads = 0
        """Statements this object has sent (for tests and profiles)."""
        from knowledge_agent.backends.postgres.client_rank import DocumentNames

        self.names = DocumentNames()
        """The documents named by rankings so far (:mod:`.client_rank`)."""

    @contextmanager
    def search(self) -> Iterator[None]:
        """One search's scope, in this thread: the generation is checked at its first read
        and trusted until the scope ends (scopes nest)."""
        depth = getattr(self._scope, "depth", 0)
        if depth == 0:
            self._scope.checked = False
        self._scope.depth = depth + 1
        try:
            yield
        finally:
            self._scope.depth = depth

    def _trusted(self) -> bool:
        return getattr(self._scope, "depth", 0) > 0 and getattr(self._scope, "checked", False)

    def read(
        self, cur: psycopg.Cursor[Any], terms: Iterable[str] = (), *, fresh: bool = False
    ) -> StatsState:
        """The statistics, with the frequencies of ``terms``: from the cache when its
        generation is known to be current (see the module), else (and with ``fresh``) read
        in one statement on ``cur``."""
        state = self._state
        wanted = list(dict.fromkeys(terms))
        missing = wanted if state is None else [t for t in wanted if t not in state.df]
        if state is not None and not missing and not fresh and self._trusted():
            return state
        # Every term asked for, not only the missing ones: the generation may have moved.
        self.reads += 1
        cur.execute(_READ, (wanted,))
        levels: dict[int, LevelStats] = {}
        df: dict[str, dict[int, tuple[int, int, int]]] = {term: {} for term in wanted}
        changes = norms_at = rows = 0
        for kind, level, term, a, b, c, d, e, f, norms_fresh in cur.fetchall():
            if kind == 0:
                levels[int(level)] = LevelStats(int(a), int(b), int(c), bool(norms_fresh))
                changes, norms_at, rows = changes + int(d), norms_at + int(e), rows + int(f)
            else:
                df.setdefault(term, {})[int(level)] = (int(a), int(b), int(c))
        generation = (changes, norms_at, rows)
        with self._lock:
            current = self._state
            if current is not None and current.generation == generation:
                if len(current.df) + len(df) > MAX_CACHED_TERMS:
                    current.df = {t: current.df[t] for t in wanted if t in current.df}
                current.df.update(df)
                state = current
            else:
                state = StatsState(generation, levels, df)
                self._state = state
        if getattr(self._scope, "depth", 0) > 0:
            self._scope.checked = True
        return state

    def current(self, state: StatsState, generation: Sequence[Any]) -> bool:
        """Whether a ranking statement that saw ``generation`` saw ``state``'s; when not,
        the next read in this thread checks the generation again."""
        seen = generation_of(generation)
        if seen == state.generation:
            return True
        if getattr(self._scope, "depth", 0) > 0:
            self._scope.checked = False
        return False

    def forget(self) -> None:
        """Check the generation at the next read (after this process changed it)."""
        if getattr(self._scope, "depth", 0) > 0:
            self._scope.checked = False
