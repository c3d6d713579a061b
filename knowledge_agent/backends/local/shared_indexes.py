"""SharedIndexes: a data folder's two search indexes, kept in step with SQLite by whichever
process may write — the sharing protocol of a data folder.

* **One writer at a time.** :meth:`SharedIndexes.writing` holds the folder's write lock
  (:class:`~knowledge_agent.backends.local.folder_lock.FolderLock`) from a write's first change
  to the index commit that makes it searchable. Another writer waits for it (``lock_timeout``,
  ``on_lock_wait``) outside :attr:`SharedIndexes.lock`, so this process's readers keep
  answering meanwhile, and first loads what the other writer committed.
* **Writes are indexed behind.** A write commits to SQLite and its journal at once
  (:meth:`SharedIndexes.defer`); the indexes apply the journal later, in one batch: at this
  process's next search, when :data:`FLUSH_ITEMS` changes or :data:`FLUSH_CHARS` characters
  are pending, at the end of a batch, or at :meth:`SharedIndexes.close`. So a search always
  sees every write of its own process that returned before it, and a loop of single adds
  costs about one batch. Other processes see the writes once an index commit holds them —
  theirs: a reader that finds the indexes behind the journal replays it itself.
* **Readers never write, and wait only for their own writes.** :meth:`SharedIndexes.reading`
  loads the index generations other processes committed (cheap: a stat per index); when
  the indexes are behind the journal and the write lock is free, it takes the lock, without
  waiting, and replays the journal. Only a process with writes of its own still unindexed
  waits for the lock (another writer holds it), as its search must see them.
* **Opening checks and repairs when it can.** With the lock free: an index in the previous
  release's format (no checksums) is upgraded in place, its files' sums recorded and
  nothing rebuilt; an unreadable index is deleted and rebuilt from SQLite (a sound dense
  index keeps its vectors meanwhile: nothing is embedded again for another index's sake),
  a changed analyzer configuration rebuilds, the journal is replayed, and each index's item
  and chunk counts are compared with SQLite's and any difference replayed. With the lock
  busy or the database read-only, the indexes answer as they are on disk (an unreadable one
  by an empty stand-in; one of the previous release as that release read it). Opening reads
  every index file it relies on for its size and verifies the checksums of the small ones
  (manifests, TOCs, state files, and each array of a TF-IDF segment as it is loaded).
* **Damage is found, never answered around.** A query that needs an index answered by a
  stand-in, or that finds an index damaged as it reads it (:class:`DamagedIndexError`), has
  the index rebuilt from SQLite first, with a warning, when the write lock can be had
  without waiting — and is run again; otherwise it fails with :class:`DamagedIndexError`
  naming ``knowledge-agent check --repair`` (:meth:`SharedIndexes.answer`). A write that
  finds damage holds the lock: it rebuilds. :meth:`SharedIndexes.damage` verifies every
  file's checksum, for ``check``.

Indexes in memory (no data folder) have no lock and nothing to share.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from knowledge_agent.analysis import TextAnalyzer
from knowledge_agent.backends.local.checksums import Damage
from knowledge_agent.backends.local.dense.index import DenseIndex
from knowledge_agent.backends.local.dense.store import stored_config, verify_dense_folder
from knowledge_agent.backends.local.folder_lock import FolderLock
from knowledge_agent.backends.local.keyword.index import SearchIndexManager, verify_keyword_folder
from knowledge_agent.backends.local.tfidf.index import SemanticSearcher
from knowledge_agent.backends.local.tfidf.store import verify_tfidf_folder
from knowledge_agent.errors import DamagedIndexError, KnowledgeAgentError, SearchIndexError
from knowledge_agent.faults import Faults
from knowledge_agent.models.status import IndexDamage
from knowledge_agent.search.config import KeywordIndexConfig, TfidfConfig

if TYPE_CHECKING:
    from knowledge_agent.embeddings import Embedder
    from knowledge_agent.protocols import EngineFactory, Storage

__all__ = ["INDEX_LABELS", "REPAIR_HINT", "SharedIndexes"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_FINGERPRINT_KEY = "index_fingerprint"

FLUSH_ITEMS = 1000
"""Deferred writes (items added or deleted) that are indexed at once, without a search."""
FLUSH_CHARS = 16_000_000
_STATUS_MIN_CHUNKS = 5_000  # catching up on fewer chunks than this is quick: no messages
"""… or deferred characters of text: what an index update holds in memory stays bounded."""

INDEX_LABELS = {"whoosh": "keyword", "tfidf": "semantic", "dense": "dense"}
"""How messages and ``check`` name each index (by its folder under ``index/``)."""
REPAIR_HINT = "run `knowledge-agent check --repair`"
_VERIFY_FOLDER: dict[str, Callable[..., list[Damage]]] = {
    "whoosh": verify_keyword_folder,
    "tfidf": verify_tfidf_folder,
    "dense": verify_dense_folder,
}  # for an index answered by a stand-in, which has no files of its own
_MODE_NEEDS: dict[str, Collection[str]] = {
    "keyword": ("whoosh",),
    "semantic": ("whoosh", "tfidf"),
    "dense": ("whoosh", "dense"),
}  # the keyword index's statistics score every mode; hybrid may read every index


class SharedIndexes:
    """The keyword and semantic indexes of one knowledge base, and the engine over them."""

    def __init__(
        self,
        data_dir: Path | None,
        storage: Storage,
        analyzer: TextAnalyzer,
        make_engine: EngineFactory,
        *,
        keyword_config: KeywordIndexConfig,
        tfidf_config: TfidfConfig,
        lock_timeout: float | None,
        on_lock_wait: Callable[[str], None] | None,
        embedder: Embedder | None = None,
        on_status: Callable[[str], None] | None = None,
        rebuild_unreadable: bool = True,
        faults: Faults | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.embedder = embedder
        self.storage = storage
        self.analyzer = analyzer
        self.lock_timeout = lock_timeout
        # One reader or writer of this object at a time: a watcher calls in from its thread.
        self.lock = threading.RLock()
        self._keyword_config = keyword_config
        self._tfidf_config = tfidf_config
        self._on_lock_wait = on_lock_wait
        self._on_status = on_status
        self._faults = faults or Faults()  # a testing hook: where this process kills itself
        self._folder_lock = None if data_dir is None else FolderLock(data_dir)
        self._write_depth = 0  # > 0 while this object holds the write lock
        self._write_gate = threading.Lock()  # this object's writing threads, one at a time
        self._writer: int | None = None  # the thread inside writing()
        self._rebuild_unreadable = rebuild_unreadable
        # Indexes that could not be read (name → why); those answered by an empty stand-in
        # are in _stand_ins too (the others keep answering from the generation they hold).
        self._unreadable: dict[str, str] = {}
        self._stand_ins: set[str] = set()
        self._repairing = False  # inside _rebuild_damaged
        self._deferred = 0  # this process's writes in the journal, not yet indexed
        self._deferred_chars = 0
        keyword_index = self._open_index(
            "whoosh", self._new_keyword_index, lambda: SearchIndexManager(None, analyzer)
        )
        dense_index: DenseIndex | None = None
        try:
            semantic_searcher = self._open_index(
                "tfidf", self._new_semantic_searcher, lambda: SemanticSearcher(None, analyzer)
            )
            if embedder is not None:
                dense_index = self._open_index(
                    "dense", self._new_dense_index, lambda: DenseIndex(None, embedder)
                )
        except BaseException:
            keyword_index.close()
            raise
        self.engine = make_engine(storage, keyword_index, semantic_searcher, dense_index)

    @property
    def keyword_index(self) -> SearchIndexManager:
        return self.engine.keyword_index

    @property
    def semantic_searcher(self) -> SemanticSearcher:
        return self.engine.semantic_searcher

    def _indexes(self) -> list[tuple[str, Any]]:
        """Every derived index by its folder name: whoosh, tfidf, and dense when embedding."""
        found: list[tuple[str, Any]] = [
            ("whoosh", self.keyword_index),
            ("tfidf", self.semantic_searcher),
        ]
        if self.engine.dense_index is not None:
            found.append(("dense", self.engine.dense_index))
        return found

    # -- opening -------------------------------------------------------------------------

    def open(self) -> None:
        """Check, and repair what needs it when the write lock is free (see the module
        docstring); an open that finds nothing to repair writes nothing. Without
        ``rebuild_unreadable``, an unreadable index leaves everything as it is."""
        if self._folder_lock is None:
            self._catch_up(opening=True)
        elif self._unreadable and not self._rebuild_unreadable:
            logger.info("%s: not rebuilding %s", self.data_dir, ", ".join(self._unreadable))
        elif not self._needs_repair():
            return
        elif self.storage.read_only:
            logger.info("%s is read-only: answering from the indexes as they are", self.data_dir)
        elif self._folder_lock.try_acquire():
            self._caught_up_under_lock(opening=True)
        else:
            logger.info("another process is writing to %s; reading its last commit", self.data_dir)

    def _needs_repair(self) -> bool:
        """What opening checks, read-only: an unreadable index, an index in the previous
        release's format, a changed analyzer configuration, pending journal entries, item
        or chunk counts unlike SQLite's."""
        if self._behind() or self.storage.get_meta(_FINGERPRINT_KEY) != self.fingerprint():
            return True
        if any(index.legacy for _, index in self._indexes()):
            return True
        counts = (self.storage.count_items(), self.storage.count_chunks())
        return any(
            (index.item_count(), index.chunk_count()) != counts for _, index in self._indexes()
        )

    def _index_dir(self, name: str) -> Path | None:
        return None if self.data_dir is None else self.data_dir / "index" / name

    def _new_keyword_index(self) -> SearchIndexManager:
        config = self._keyword_config
        return SearchIndexManager(
            self._index_dir("whoosh"),
            self.analyzer,
            field_boosts=config.field_boosts,
            lock_timeout=config.lock_timeout,
        )

    def _new_semantic_searcher(self) -> SemanticSearcher:
        config = self._tfidf_config
        return SemanticSearcher(
            self._index_dir("tfidf"),
            self.analyzer,
            n_features=config.n_features,
            sublinear_tf=config.sublinear_tf,
            include_title=config.include_title,
            include_heading=config.include_heading,
            faults=self._faults,
        )

    def _new_dense_index(self) -> DenseIndex:
        # An index made with another embedder fails to open: it is rebuilt, never mixed.
        assert self.embedder is not None
        return DenseIndex(self._index_dir("dense"), self.embedder)

    def _open_index(self, name: str, factory: Callable[[], _T], stand_in: Callable[[], _T]) -> _T:
        """Open an index as it is on disk. An unreadable one is answered by an empty
        in-memory stand-in until a writer deletes it and rebuilds it from SQLite."""
        try:
            return factory()
        except SearchIndexError as exc:
            if self._index_dir(name) is None:
                raise
            logger.warning("%s; it will be rebuilt from the database", exc)
            self._unreadable[name] = str(exc)
            self._stand_ins.add(name)
            return stand_in()

    def _replace_unreadable_indexes(self) -> None:
        """Under the write lock: delete each unreadable index and open an empty one."""
        for name in sorted(self._unreadable):
            folder = self._index_dir(name)
            assert folder is not None
            made = stored_config(folder) if name == "dense" else None
            logger.warning(
                "rebuilding the %s index in %s from the database%s: %s",
                name,
                folder,
                f" (it was made with {made.get('embedder')})" if made else "",
                self._unreadable[name],
            )
            shutil.rmtree(folder, ignore_errors=True)
            if name == "whoosh":
                self.keyword_index.close()
                self.engine.keyword_index = self._new_keyword_index()
            elif name == "tfidf":
                self.semantic_searcher.close()
                self.engine.semantic_searcher = self._new_semantic_searcher()
            else:  # the dense index alone is embedded again by the next sync
                if self.engine.dense_index is not None:
                    self.engine.dense_index.close()
                self.engine.dense_index = self._new_dense_index()
                self._readable_again(name)
                continue
            self._readable_again(name)
            self.storage.set_meta(_FINGERPRINT_KEY, "")

    def _upgrade_legacy(self) -> None:
        """Under the write lock: give each index read in the previous release's format the
        checksums of its files, in place; nothing is rebuilt or embedded again."""
        for name, index in self._indexes():
            if name not in self._unreadable and index.upgrade():
                logger.info(
                    "upgraded the %s index in %s to this version's format "
                    "(checksums recorded; nothing rebuilt)",
                    INDEX_LABELS[name],
                    self._index_dir(name),
                )

    def _readable_again(self, name: str) -> None:
        self._unreadable.pop(name, None)
        self._stand_ins.discard(name)

    def fingerprint(self) -> str:
        """What the indexed terms depend on: a change of it means a rebuild."""
        return json.dumps(
            {"analyzer": self.analyzer.config.to_dict(), "semantic": self._tfidf_config.changed()},
            sort_keys=True,
            default=str,
        )

    # -- keeping up ------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Load the index generations other processes committed. One that cannot be read
        marks its index unreadable (a writer rebuilds it); the current state keeps answering.
        """
        for name, index in self._indexes():
            if name in self._unreadable:
                continue
            try:
                index.refresh()
            except SearchIndexError as exc:
                logger.warning("%s; it will be rebuilt from the database", exc)
                self._unreadable[name] = str(exc)

    def _catch_up(self, *, opening: bool, replay: bool = True) -> None:
        """Under the write lock: make both indexes reflect everything SQLite holds.

        Other processes' commits are loaded, unreadable indexes recreated and (with
        ``replay``) the journal replayed. On ``opening`` (and after recreating an index) a
        changed analyzer configuration or a missing index rebuilds, and each index's item
        count is compared with SQLite's and any difference replayed. An index found damaged
        on the way is rebuilt.
        """
        try:
            self._catch_up_steps(opening=opening, replay=replay)
        except DamagedIndexError as exc:
            self._rebuild_damaged(exc)

    def _catch_up_steps(self, *, opening: bool, replay: bool) -> None:
        self._refresh()
        self._upgrade_legacy()
        recreated = bool(self._unreadable)
        self._replace_unreadable_indexes()
        if opening or recreated:
            fingerprint = self.fingerprint()
            stale = self.storage.get_meta(_FINGERPRINT_KEY) != fingerprint
            missing = self.storage.count_chunks() > 0 and not self.engine.has_chunk_index()
            if stale or missing:
                indexed = self.keyword_index.item_count() or self.semantic_searcher.item_count()
                if self.storage.count_items() or indexed:
                    logger.info("building the search indexes from the database")
                    # Dense vectors depend on neither the analyzer nor the other indexes: a
                    # dense index still standing keeps them, and embeds only what it lacks.
                    self.rebuild(reuse_vectors=True)
                else:
                    self.storage.set_meta(_FINGERPRINT_KEY, fingerprint)
                self._deferred = self._deferred_chars = 0
                return
        if replay:
            self._apply()
        if opening:
            self.engine.reconcile()

    def _apply(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Under the write lock: replay the journal into every index (a damaged one is
        rebuilt instead)."""
        try:
            self.engine.sync(progress or self._status_progress())
        except DamagedIndexError as exc:
            self._rebuild_damaged(exc)
        self._deferred = self._deferred_chars = 0

    # -- damage ----------------------------------------------------------------------------

    def damage(self, *, full: bool = True) -> list[IndexDamage]:
        """Every damaged file of every index on disk (verified for size, and with ``full``
        for its checksum), and each index that could not be read for another reason."""
        found: list[IndexDamage] = []
        for name, _ in self._indexes():
            label = INDEX_LABELS[name]
            damaged = self._verify(name, full=full)
            found.extend(IndexDamage(label, d.path, d.problem) for d in damaged)
            if not damaged and name in self._unreadable:
                folder = self._index_dir(name)
                found.append(IndexDamage(label, str(folder), self._unreadable[name]))
        return found

    def _mark_damaged(self) -> bool:
        """Verify every index in full and mark the damaged ones unreadable (once an index
        has failed to read, the cost of reading it whole is worth knowing which)."""
        marked = False
        for name, _ in self._indexes():
            if name not in self._unreadable:
                damaged = self._verify(name, full=True)
                if damaged:
                    self._unreadable[name] = str(damaged[0])
                    marked = True
        return marked

    def _verify(self, name: str, *, full: bool) -> list[Damage]:
        folder = self._index_dir(name)
        if folder is None:
            return []
        if name in self._stand_ins:
            return _VERIFY_FOLDER[name](folder, full=full)
        index = dict(self._indexes())[name]
        return index.verify(full=full)  # type: ignore[no-any-return]

    def _rebuild_damaged(self, exc: DamagedIndexError) -> None:
        """Under the write lock, after ``exc``: rebuild every damaged index from SQLite;
        ``exc`` again when no index is found damaged."""
        if self._repairing or not self._mark_damaged():
            raise exc  # damaged again while rebuilding: not for this process to fix
        self._repairing = True
        try:
            self._catch_up_steps(opening=False, replay=True)
        finally:
            self._repairing = False

    def repair(self, damaged: Collection[str]) -> None:
        """Rebuild the indexes named (by label: ``keyword``, ``semantic``, ``dense``) from
        SQLite under the write lock, then bring every index up to date (``check --repair``)."""
        names = {name for name, label in INDEX_LABELS.items() if label in damaged}
        with self.lock:
            for name in names:
                self._unreadable.setdefault(name, "damaged")
        with self.writing():  # whose catching up rebuilds what is marked unreadable
            self._catch_up(opening=True)

    def answer(self, run: Callable[[], _T], mode: str = "hybrid") -> _T:
        """``run()``, a query in ``mode``, under :attr:`lock` after :meth:`reading`.

        An index the query needs that is answered by an empty stand-in, or that turns out
        damaged while the query reads it, is rebuilt first when this process can take the
        write lock without waiting, and the query runs again; otherwise the query fails
        with :class:`DamagedIndexError` naming ``knowledge-agent check --repair``. A query
        never answers from an index that is not there.
        """
        needs = _MODE_NEEDS.get(mode, INDEX_LABELS)
        for attempt in range(2):
            missing = [name for name in needs if name in self._stand_ins]
            if missing:
                error = DamagedIndexError(
                    f"the {INDEX_LABELS[missing[0]]} index cannot be read "
                    f"({self._unreadable[missing[0]]})"
                )
            else:
                try:
                    return run()
                except DamagedIndexError as exc:
                    error = exc
                    if attempt == 0:
                        self._mark_damaged()
            if attempt == 0 and self._unreadable and self._rebuild_now():
                continue
            raise DamagedIndexError(f"{error}; {REPAIR_HINT}") from error
        raise AssertionError("unreachable")

    def _rebuild_now(self) -> bool:
        """Rebuild the unreadable indexes if the write lock can be had without waiting;
        whether every index is readable then."""
        if not self._rebuild_unreadable or self.storage.read_only:
            return False
        if self._write_depth:  # this thread holds the write lock
            self._catch_up(opening=False)
        elif self._folder_lock is not None and self._folder_lock.try_acquire():
            self._caught_up_under_lock(opening=False)
        else:
            return False
        return not self._unreadable

    def _status_progress(self) -> Callable[[int, int], None] | None:
        """Progress of long catching up (an index built or embedded again on open) as a few
        ``on_status`` messages: at most one per tenth, and none for short work."""
        report = self._on_status
        if report is None:
            return None
        shown = -1

        def progress(done: int, total: int) -> None:
            nonlocal shown
            if total < _STATUS_MIN_CHUNKS:
                return
            tenth = done * 10 // total
            if tenth > shown:
                shown = tenth
                report(f"indexing: {done:,} of {total:,} chunks")

        return progress

    def _caught_up_under_lock(self, *, opening: bool) -> None:
        """Catch up with the write lock just taken without waiting, then release it; a
        failure (a full disk) is logged, and the snapshot on disk keeps answering."""
        assert self._folder_lock is not None
        try:
            self._write_depth += 1
            self._catch_up(opening=opening)
        except KnowledgeAgentError as exc:
            logger.warning("cannot bring the search indexes up to date now: %s", exc)
        finally:
            self._write_depth -= 1
            self._folder_lock.release()

    def _behind(self) -> bool:
        """Whether the indexes miss something SQLite holds (cheap: one SQLite query)."""
        if self._unreadable:
            return True
        applied = min(index.applied_seq for _, index in self._indexes())
        return applied != self.storage.last_journal_seq()

    def before_reading(self) -> None:
        """Before a query, outside :attr:`lock`: index this process's deferred writes,
        waiting for the write lock if another process holds it (the query must see them)."""
        if self._deferred:
            self.flush()

    def reading(self) -> None:
        """Before a query, under :attr:`lock`: pick up other processes' commits; replay
        the journal if the indexes are behind and the write lock is free."""
        if self._write_depth:  # this thread holds the write lock: a search inside a batch
            if self._behind():
                self._apply()
            return
        if self._folder_lock is None:
            if self._deferred:
                self._apply()
            return
        self._refresh()
        if self.storage.read_only or not self._behind():
            return
        if self._unreadable and not self._rebuild_unreadable:
            return
        if self._folder_lock.try_acquire():
            self._caught_up_under_lock(opening=False)

    def defer(self, chars: int = 0) -> None:
        """Inside :meth:`writing`: a change is in SQLite and its journal, to be indexed by
        the next search, batch end or close — or now, once enough is pending."""
        self._deferred += 1
        self._deferred_chars += chars
        if self._deferred >= FLUSH_ITEMS or self._deferred_chars >= FLUSH_CHARS:
            self._apply()

    def flush(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Index everything the journal holds now (inside :meth:`writing`, or taking it)."""
        with self.writing():
            self._apply(progress)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the data folder's write lock and :attr:`lock`, with the indexes caught up.

        The wait for another process happens outside :attr:`lock`, so searches in this
        process keep answering meanwhile. Nested calls in the writing thread are free.
        """
        if self._writer == threading.get_ident():
            yield
            return
        with self._write_gate:
            if self._folder_lock is not None:
                self._folder_lock.acquire(self.lock_timeout, self._on_lock_wait)
            try:
                with self.lock:
                    self._writer = threading.get_ident()
                    self._write_depth += 1
                    try:
                        if self._folder_lock is not None:
                            self._catch_up(opening=False, replay=False)
                        yield
                    finally:
                        self._write_depth -= 1
                        self._writer = None
            finally:
                if self._folder_lock is not None:
                    self._folder_lock.release()

    def rebuild(self, *, reuse_vectors: bool = False) -> int:
        """Rebuild every index from SQLite (inside :meth:`writing`); returns the chunks.
        ``reuse_vectors``: the dense index embeds only rows whose text it does not hold
        (see :meth:`SearchEngineImpl.rebuild`).

        The indexes are marked stale first, so a rebuild cut short by a crash (which
        leaves an index partly rebuilt) is done again by the next open or write.
        """
        self.storage.set_meta(_FINGERPRINT_KEY, "")
        count = self.engine.rebuild(reuse_vectors=reuse_vectors)
        self.storage.set_meta(_FINGERPRINT_KEY, self.fingerprint())
        return count

    def close(self) -> None:
        """Index this process's deferred writes, then release both indexes; safe to call
        twice. With another process writing, the deferred writes are left to it: its
        commit replays the whole journal."""
        with self.lock:
            if self._deferred and self._folder_lock is None:
                self._apply()
            elif self._deferred and self._folder_lock is not None:
                if self._folder_lock.try_acquire():
                    self._caught_up_under_lock(opening=False)
                else:
                    logger.info("%d changes are left to the writing process", self._deferred)
        for _, index in self._indexes():
            index.close()
