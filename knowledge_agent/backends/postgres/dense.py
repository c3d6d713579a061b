"""Dense-vector cosine search in pgvector: the dense index of the PostgreSQL backend.

The same rows, texts and scores as the local :class:`~knowledge_agent.backends.local.dense.
index.DenseIndex`::

    chunk row   embed(chunk_text(chunk))     heading path and content, MAX_TEXT_CHARS at most
    item row    embed(item_text(item))       title and content, only for an item without chunks
    score       query · row                  exact: every allowed row is scored (no ANN index)

An item scores as its best row. Scores of 1e-6 or less (an unrelated text), or below
``min_similarity``, are never returned; a score is at most 1. Filters restrict the rows in
the statement, before the top k is taken (:mod:`.filters`, on the row's own filter columns);
ties are ranked by row number (writing order), as the local index ranks them by row order.
There is no approximate (HNSW) index: it would change answers, and at a few thousand rows it
gains nothing (5,000 rows of 384 dimensions: exact top 10 in 11 ms, HNSW 7–12 ms at a
recall@10 of 0.64–0.86 with ``ef_search`` 40–100).

**Tables.** ``dense_embedders`` names the embedder (name, dimensions and text recipe) whose
vectors the database holds, and the table holding them, ``dense_vectors_{id}``: one row per
chunk (and per item without chunks) with its key, item, chunk index, the 64-bit hash of its
text, its item's filter columns and a ``vector(dimensions)`` column. Opening a writable
database with another embedder drops the other embedder's table and starts an empty one
(which the backend fills from the stored items), as the local index made with another
embedder is rebuilt; a read-only server (a hot standby) refuses an embedder its primary has
not indexed with. The ``kb`` column leads the primary key, as in the keyword tables, so the
table can be distributed by knowledge base.

**Writes** go through :class:`DenseWriter`, one of the storage's index writers: the vectors
of an item are written in the transaction that writes its chunks, so they commit together
and a killed writer leaves nothing to catch up with. The embedding happens inside that
transaction, before the item's previous rows are touched. Embedding before the transaction
was weighed and left: a write group (``collect``) opens its transaction before its items are
known, so there is no "before" for most writes without restructuring every writer, and rows
committed without their vectors would need a journal to be embedded later — the very thing
this backend does without. The cost is bounded: only texts that changed are embedded (a row
whose item held the same text keeps its vector), and the writer runs first, so a single
write holds only its own item's rows while an HTTP embedder answers. In a write group the
writer runs once per batch of writes (:mod:`.batches`): the batch's changed texts go to the
embedder together, while the group holds its rows (and the keyword statistics of the
knowledge bases written before the batch). An embedder failure rolls the whole write back
and reaches the caller as its :class:`~knowledge_agent.errors.EmbeddingError` (in a write
group: the writes whose texts fail, replayed one by one, in a
:class:`~knowledge_agent.errors.WriteGroupError`): no item is ever stored without its
vectors.

The query is embedded outside the index's lock and outside any transaction.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from knowledge_agent.backends.local.dense.index import (
    MAX_TEXT_CHARS,
    chunk_text,
    embed_rows,
    item_text,
)
from knowledge_agent.backends.local.dense.segments import text_hash
from knowledge_agent.backends.postgres.filters import filter_condition
from knowledge_agent.backends.postgres.indexes import IndexConnection, load_psycopg
from knowledge_agent.backends.postgres.schema import MIGRATION_LOCK, migrate, server_of
from knowledge_agent.embeddings.base import Embedder, normalize_rows
from knowledge_agent.errors import ConfigError, EmbeddingError, SearchIndexError
from knowledge_agent.models.knowledge_chunk import KnowledgeChunk
from knowledge_agent.models.knowledge_item import KnowledgeItem
from knowledge_agent.search.analysed_batch import AnalysedBatch, latest_pairs
from knowledge_agent.search.filters import SearchFilters, to_epoch
from knowledge_agent.search.hits import ChunkHit, ItemHit

if TYPE_CHECKING:
    import psycopg

__all__ = ["COMPONENT", "MIGRATIONS", "DenseWriter", "PostgresDenseIndex", "PostgresDenseRefit"]

logger = logging.getLogger(__name__)

COMPONENT = "dense"
"""The dense index's name in ``schema_versions``."""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE EXTENSION IF NOT EXISTS vector",
        "CREATE SEQUENCE dense_rows_seq",
        """
        CREATE TABLE dense_embedders (
            id serial PRIMARY KEY,
            name text NOT NULL,
            dimensions integer NOT NULL,
            recipe text NOT NULL,
            complete boolean NOT NULL DEFAULT false,
            UNIQUE (name, dimensions, recipe)
        )
        """,
    ),
)
"""The dense component's schema (``schema.migrate``); the vector tables themselves are made
per embedder when it is first used (their column type depends on its dimensions)."""

RECIPE = f"chunk: heading\\ncontent; item without chunks: title\\ncontent; {MAX_TEXT_CHARS} chars"
"""What a row's text is: vectors made from other texts are not comparable."""

MIN_SCORE = 1e-6  # as the local index: an orthogonal row's float32 dot is rounding noise
_BATCH_SPAN = 1 << 24  # row numbers: (write number) × this + position in the write
_FIT_ROWS = 4096  # rows embedded and sent at once by fit_chunks

_CREATE_TABLE = """
    CREATE TABLE {table} (
        kb text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        key text NOT NULL,
        item_id text NOT NULL,
        chunk_index integer NOT NULL,
        is_chunk boolean NOT NULL,
        hash bigint NOT NULL,
        source_type text NOT NULL,
        doc_type text NOT NULL,
        language text NOT NULL,
        path text COLLATE "C" NOT NULL,
        updated_at double precision NOT NULL,
        embedding vector({dimensions}) NOT NULL,
        PRIMARY KEY (kb, seq)
    )
"""
_COLUMNS = (
    "kb, seq, key, item_id, chunk_index, is_chunk, hash, source_type, doc_type, language, "
    "path, updated_at, embedding"
)
_COPY_TYPES = ["text", "int8", "text", "text", "int4", "bool", "int8", *["text"] * 4, "float8"]

_Pair = tuple[KnowledgeItem, Sequence[KnowledgeChunk]]


def _pairs(upserts: Iterable[_Pair] | AnalysedBatch) -> list[tuple[KnowledgeItem, list]]:
    """One (item, chunks) pair per item id, its last version."""
    if isinstance(upserts, AnalysedBatch):
        return upserts.pairs
    return latest_pairs(upserts)


def _text(value: object) -> str:
    """A value PostgreSQL text can hold (None is "", NUL replaced), as the keyword tables
    store the filter columns."""
    text = "" if value is None else value if isinstance(value, str) else str(value)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


# -- vectors on the wire ---------------------------------------------------------------------


class _Binary:
    """A vector already in pgvector's binary format (dimensions, 0, big-endian float32)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _to_binary(vectors: np.ndarray) -> list[_Binary]:
    header = struct.pack(">HH", vectors.shape[1], 0)
    big = np.ascontiguousarray(vectors, dtype=">f4")
    return [_Binary(header + row.tobytes()) for row in big]


def _prepare(conn: psycopg.Connection) -> int:
    """Teach ``conn`` pgvector's binary format, once: :class:`_Binary` parameters, and
    ``vector`` columns read as float32 arrays. Only these two types are registered, so the
    connection's other adapters (the storage's) are untouched. Returns the type's oid."""
    from psycopg.adapt import Dumper, Loader, PyFormat
    from psycopg.pq import Format

    try:
        return int(conn.adapters.get_dumper(_Binary, PyFormat.BINARY).oid)
    except load_psycopg().ProgrammingError:
        pass  # not taught yet

    row = conn.execute("SELECT 'vector'::regtype::oid").fetchone()
    assert row is not None
    oid = int(row[0])

    class BinaryDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return obj.data  # type: ignore[no-any-return]

    class BinaryLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> np.ndarray:
            return np.frombuffer(bytes(data), dtype=">f4", offset=4).astype(np.float32)

    BinaryDumper.oid = oid
    conn.adapters.register_dumper(_Binary, BinaryDumper)
    conn.adapters.register_loader(oid, BinaryLoader)
    return oid


# -- rows -------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Rows:
    """The new rows of some items, with their vectors."""

    item_ids: list[str]
    columns: list[tuple[Any, ...]]  # per row: everything but seq and the vector
    vectors: np.ndarray
    embedded: int


class _Embedding:
    """An embedder's vectors, checked (it is someone else's code) and normalised."""

    def __init__(self, embedder: Embedder, batch_size: int) -> None:
        if not isinstance(embedder, Embedder):
            raise ConfigError(f"embedder must be an Embedder, got {type(embedder).__name__}")
        name, dimensions = embedder.name, embedder.dimensions
        if not isinstance(name, str) or not name:
            raise ConfigError(f"the embedder's name must be a non-empty string, got {name!r}")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigError(f"the embedder's dimensions must be positive, got {dimensions!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.embedder = embedder
        self.name = name
        self.dimensions = dimensions
        self.batch_size = batch_size

    def embed(self, texts: list[str], kind: str) -> np.ndarray:
        vectors = self.embedder.embed(texts, kind=kind)  # type: ignore[arg-type]
        try:
            matrix = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(self.name, f"unusable vectors: {exc}") from exc
        if matrix.shape != (len(texts), self.dimensions):
            raise EmbeddingError(
                self.name,
                f"returned shape {matrix.shape} for {len(texts)} texts, "
                f"not ({len(texts)}, {self.dimensions})",
            )
        matrix = normalize_rows(matrix)
        if not np.isfinite(matrix).all():
            raise EmbeddingError(self.name, "returned a vector that is not finite")
        return matrix

    def rows(self, pairs: Sequence[_Pair], known: dict[int, np.ndarray]) -> _Rows:
        """The rows of ``pairs``, embedding each distinct text once and none whose hash is
        in ``known`` (hash → vector)."""
        heads: list[tuple[Any, ...]] = []  # kb, key, item id, chunk index, is a chunk
        metas: list[tuple[Any, ...]] = []  # the item's filter columns
        texts: list[str] = []
        for item, chunks in pairs:
            kb = _text(item.kb)
            meta = (
                _text(item.source_type),
                _text(item.doc_type),
                _text(item.language),
                _text(item.source_uri),
                to_epoch(item.updated_at),
            )
            if chunks:
                for chunk in chunks:
                    texts.append(chunk_text(chunk))
                    heads.append((kb, chunk.id, item.id, int(chunk.chunk_index), True))
                    metas.append(meta)
            else:
                texts.append(item_text(item))
                heads.append((kb, item.id, item.id, -1, False))
                metas.append(meta)
        hashes = [text_hash(text) for text in texts]
        vectors, embedded = embed_rows(
            texts,
            hashes,
            known,
            self.dimensions,
            self.batch_size,
            lambda batch: self.embed(batch, "document"),
        )
        signed = np.array(hashes, np.uint64).view(np.int64).tolist()
        columns = [
            (*head, digest, *meta) for head, digest, meta in zip(heads, signed, metas, strict=True)
        ]
        return _Rows([item.id for item, _ in pairs], columns, vectors, embedded)


def _known(cur: psycopg.Cursor[Any], table: str, item_ids: list[str]) -> dict[int, np.ndarray]:
    """Text hash → vector of the rows these items have now."""
    if not item_ids:
        return {}
    cur.execute(
        f"SELECT hash, embedding FROM {table} WHERE item_id = ANY(%s::text[])",
        (item_ids,),
        binary=True,
    )
    return {int(digest) & 0xFFFF_FFFF_FFFF_FFFF: vector for digest, vector in cur.fetchall()}


def _write(cur: psycopg.Cursor[Any], table: str, rows: _Rows) -> None:
    """Insert ``rows`` (numbered in their order after every row written before)."""
    if not rows.columns:
        return
    if len(rows.columns) >= _BATCH_SPAN:
        raise SearchIndexError(
            f"a write of {len(rows.columns)} rows is over {_BATCH_SPAN}: split it"
        )
    cur.execute("SELECT nextval('dense_rows_seq')")
    found = cur.fetchone()
    assert found is not None
    base = int(found[0]) * _BATCH_SPAN
    oid = _prepare(cur.connection)
    with cur.copy(f"COPY {table} ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types([*_COPY_TYPES, oid])
        for position, (column, vector) in enumerate(
            zip(rows.columns, _to_binary(rows.vectors), strict=True)
        ):
            copy.write_row((column[0], base + position, *column[1:], vector))


class DenseWriter:
    """Writes the vectors of items and chunks inside the storage's write transaction (an
    :class:`~knowledge_agent.backends.postgres.storage.IndexWriter`); see the module
    docstring for when it embeds."""

    def __init__(self, index: PostgresDenseIndex) -> None:
        self._index = index

    def replace(self, conn: psycopg.Connection, pairs: Sequence[_Pair] | AnalysedBatch) -> None:
        """(Re)write the rows of these items: only texts they did not hold are embedded,
        and nothing changes before every vector is made."""
        index = self._index
        found = _pairs(pairs)
        if not found:
            return
        _prepare(conn)
        ids = [item.id for item, _ in found]
        table = index.table
        with index._table_missing(), conn.cursor() as cur:
            rows = index._embedding.rows(found, _known(cur, table, ids))
            cur.execute(f"DELETE FROM {table} WHERE item_id = ANY(%s::text[])", (ids,))
            _write(cur, table, rows)
        logger.debug(
            "dense rows: %d embedded, %d reused", rows.embedded, len(rows.columns) - rows.embedded
        )

    def remove(self, conn: psycopg.Connection, item_ids: Sequence[str]) -> None:
        """Drop every row of these items."""
        ids = [item_ids] if isinstance(item_ids, str) else list(dict.fromkeys(item_ids))
        if not ids:
            return
        with self._index._table_missing(), conn.cursor() as cur:
            cur.execute(f"DELETE FROM {self._index.table} WHERE item_id = ANY(%s::text[])", (ids,))


class PostgresDenseRefit:
    """A rebuild of a :class:`PostgresDenseIndex` in one transaction of its connection, fed
    batch by batch into a temporary table and swapped in by :meth:`finish`.

    The vector table is locked against writers (not readers) from the start: searches keep
    answering from the old rows until the commit, and writes wait for it, so none is lost
    by the swap. With ``reuse``, a row whose item holds the same text now keeps its vector.
    """

    def __init__(self, index: PostgresDenseIndex, *, reuse: bool = False) -> None:
        self._index = index
        self._db = index._db
        self._reuse = reuse
        self._started = time.perf_counter()
        self._embedded = 0
        # This connection to the end: another one would not be in the transaction.
        self._conn = self._db.live("rebuild the dense index")
        self._db.lock.acquire()
        self._tx: Any = None
        try:
            self._tx = self._conn.transaction()
            self._tx.__enter__()
            self._run(
                lambda cur: (
                    cur.execute(f"LOCK TABLE {index.table} IN SHARE ROW EXCLUSIVE MODE"),
                    cur.execute(
                        f"CREATE TEMP TABLE dense_refit (LIKE {index.table}) ON COMMIT DROP"
                    ),
                )
            )
        except BaseException:
            self.cancel()
            raise

    def _run(self, step: Callable[[psycopg.Cursor[Any]], object]) -> None:
        if self._tx is None:
            raise SearchIndexError("the rebuild is over")
        try:
            with self._index._table_missing(), self._conn.cursor() as cur:
                step(cur)
        except BaseException as exc:
            self.cancel()
            if isinstance(exc, self._db.error):
                raise SearchIndexError(f"cannot rebuild the dense index: {exc}") from exc
            raise

    def add(self, upserts: Sequence[_Pair] | AnalysedBatch) -> None:
        pairs = _pairs(upserts)
        if not pairs:
            return
        ids = [item.id for item, _ in pairs]
        table = self._index.table

        def step(cur: psycopg.Cursor[Any]) -> None:
            known = _known(cur, table, ids) if self._reuse else {}
            rows = self._index._embedding.rows(pairs, known)
            self._embedded += rows.embedded
            # An item given twice: the last wins.
            cur.execute("DELETE FROM dense_refit WHERE item_id = ANY(%s::text[])", (ids,))
            _write(cur, "dense_refit", rows)

        self._run(step)

    def finish(self) -> int:
        """Swap the new rows in; the number of chunks."""
        index = self._index

        def step(cur: psycopg.Cursor[Any]) -> None:
            cur.execute(f"DELETE FROM {index.table}")
            cur.execute(f"INSERT INTO {index.table} SELECT * FROM dense_refit")
            cur.execute("UPDATE dense_embedders SET complete = true WHERE id = %s", (index._id,))

        self._run(step)
        tx, self._tx = self._tx, None
        try:
            tx.__exit__(None, None, None)
        except self._db.error as exc:
            raise SearchIndexError(f"cannot rebuild the dense index: {exc}") from exc
        finally:
            self._db.lock.release()
        count = index.chunk_count()
        logger.info(
            "dense index rebuilt: %d chunks, %d embedded, in %.1f s",
            count,
            self._embedded,
            time.perf_counter() - self._started,
        )
        return count

    def cancel(self) -> None:
        """Leave the index as it was (if :meth:`finish` has not committed); idempotent."""
        if self._tx is None:
            return
        tx, self._tx = self._tx, None
        try:
            rollback = self._db.rollback
            tx.__exit__(rollback, rollback(), None)
        finally:
            self._db.lock.release()


_CHUNKS_SQL = """
    SELECT key, item_id, chunk_index, least(score, 1.0::float8) FROM (
        SELECT d.key, d.item_id, d.chunk_index, d.seq,
            ((d.embedding <#> %(q)b) * -1)::float8 AS score
        FROM {table} d WHERE d.is_chunk {condition}
    ) s
    WHERE score > %(floor)s AND score >= %(min)s
    ORDER BY score DESC, seq LIMIT %(k)s
"""
_CAPPED_CHUNKS_SQL = """
    SELECT key, item_id, chunk_index, least(score, 1.0::float8) FROM (
        SELECT s.*, row_number() OVER (PARTITION BY item_id ORDER BY score DESC, seq) AS rank
        FROM (
            SELECT d.key, d.item_id, d.chunk_index, d.seq,
                ((d.embedding <#> %(q)b) * -1)::float8 AS score
            FROM {table} d WHERE d.is_chunk {condition}
        ) s
        WHERE score > %(floor)s AND score >= %(min)s
    ) r
    WHERE rank <= %(cap)s
    ORDER BY score DESC, seq LIMIT %(k)s
"""
_ITEMS_SQL = """
    SELECT item_id, least(score, 1.0::float8) FROM (
        SELECT DISTINCT ON (item_id) item_id, score, seq FROM (
            SELECT d.item_id, d.seq, ((d.embedding <#> %(q)b) * -1)::float8 AS score
            FROM {table} d WHERE true {condition}
        ) s
        WHERE score > %(floor)s AND score >= %(min)s
        ORDER BY item_id, score DESC, seq
    ) b
    ORDER BY score DESC, seq LIMIT %(k)s
"""


class PostgresDenseIndex:
    """Cosine search over an embedder's vectors of chunks (and items without chunks) in a
    PostgreSQL database with pgvector (the :class:`~knowledge_agent.protocols.
    DenseVectorIndex` protocol).

    ``source``: a database URL (a connection is opened and owned), a callable returning a
    connection, or a connection (used, not closed). Opening creates the tables, or picks
    this embedder's (see the module docstring); :attr:`writer` is the storage's index
    writer for these vectors. Thread-safe; database errors are :class:`SearchIndexError`.
    """

    def __init__(
        self,
        source: str | psycopg.Connection | Callable[[], psycopg.Connection],
        embedder: Embedder,
        *,
        batch_size: int = 256,
    ) -> None:
        self._embedding = _Embedding(embedder, batch_size)
        self.embedder = embedder
        self.dimensions = self._embedding.dimensions
        self._db = IndexConnection(source)
        try:
            with self._db.lock:
                self._id = self._open_table(self._db.conn)
                _prepare(self._db.conn)
                self._db.link.setup = _prepare  # and every connection after a break
        except BaseException:
            self._db.close()
            raise
        self.table = f"dense_vectors_{self._id}"
        self.writer = DenseWriter(self)

    @property
    def embedder_name(self) -> str:
        """The name of the embedder the stored vectors were made with (this one's)."""
        return self._embedding.name

    def _open_table(self, conn: psycopg.Connection) -> int:
        """The id of this embedder's table. On a writable
        server a missing one is created and the tables of other embedders dropped."""
        psycopg = load_psycopg()
        name, dimensions = self._embedding.name, self.dimensions
        find = "SELECT id FROM dense_embedders WHERE name = %s AND dimensions = %s AND recipe = %s"
        server = server_of(conn)
        try:
            migrate(conn, COMPONENT, MIGRATIONS)
            row = conn.execute(find, (name, dimensions, RECIPE)).fetchone()
            if row is not None:
                return int(row[0])
            if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:  # type: ignore[index]
                raise SearchIndexError(
                    f"{server} holds no vectors made with the embedder {name} ({dimensions} "
                    "dimensions): open the primary with this embedder first"
                )
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                row = conn.execute(find, (name, dimensions, RECIPE)).fetchone()
                if row is not None:  # another process made it meanwhile
                    return int(row[0])
                for other, other_name, other_dimensions in conn.execute(
                    "SELECT id, name, dimensions FROM dense_embedders ORDER BY id"
                ).fetchall():
                    logger.warning(
                        "%s: dropping the vectors made with %s (%d dimensions): this "
                        "embedder is %s (%d dimensions); every chunk is embedded again",
                        server, other_name, other_dimensions, name, dimensions,
                    )  # fmt: skip
                    conn.execute(f"DROP TABLE IF EXISTS dense_vectors_{int(other)}")
                    conn.execute("DELETE FROM dense_embedders WHERE id = %s", (other,))
                made = conn.execute(
                    "INSERT INTO dense_embedders (name, dimensions, recipe) VALUES (%s, %s, %s) "
                    "RETURNING id",
                    (name, dimensions, RECIPE),
                ).fetchone()
                assert made is not None
                table = f"dense_vectors_{int(made[0])}"
                conn.execute(_CREATE_TABLE.format(table=table, dimensions=dimensions))
                conn.execute(f"CREATE INDEX {table}_item ON {table} (item_id)")
                conn.execute(f"CREATE INDEX {table}_path ON {table} (path)")
                return int(made[0])
        except psycopg.Error as exc:
            raise SearchIndexError(f"cannot open the dense index on {server}: {exc}") from exc

    @contextmanager
    def _table_missing(self) -> Iterator[None]:
        """Around statements on the table: its absence (another process opened the database
        with another embedder, which drops it) becomes a clear error."""
        try:
            yield
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc, SearchIndexError) else exc
            if isinstance(cause, load_psycopg().errors.UndefinedTable):
                raise SearchIndexError(
                    f"the vectors of {self.embedder_name} are gone: another process opened "
                    "the database with another embedder (one embedder at a time)"
                ) from exc
            raise

    # -- state ---------------------------------------------------------------------------

    @property
    def applied_seq(self) -> int:
        """Always 0: writes are transactions, there is no journal to catch up with."""
        return 0

    def set_applied_seq(self, seq: int) -> None:
        """Nothing to record (see :attr:`applied_seq`)."""

    def _scalar(self, sql: str) -> int:
        with self._table_missing(), self._db.cursor("read the dense index") as cur:
            cur.execute(sql.format(table=self.table))
            row = cur.fetchone()
            return int(row[0]) if row else 0

    def chunk_count(self) -> int:
        """Chunk rows."""
        return self._scalar("SELECT count(*) FROM {table} WHERE is_chunk")

    def item_count(self) -> int:
        """Indexed items (with chunks or not)."""
        return self._scalar("SELECT count(DISTINCT item_id) FROM {table}")

    def has_chunks(self) -> bool:
        """True when the index holds at least one chunk row."""
        return bool(
            self._scalar("SELECT count(*) FROM (SELECT 1 FROM {table} WHERE is_chunk LIMIT 1) x")
        )

    def indexed_item_ids(self, *, chunks: bool = False) -> set[str]:
        """The id of every indexed item (``chunks``: of every item with chunk rows)."""
        where = "WHERE is_chunk" if chunks else ""
        with self._table_missing(), self._db.cursor("read the dense index") as cur:
            cur.execute(f"SELECT DISTINCT item_id FROM {self.table} {where}")
            return {item_id for (item_id,) in cur.fetchall()}

    def is_complete(self) -> bool:
        """Whether the table was ever filled from the stored items (a rebuild or fit
        finished), as opposed to made new for this embedder."""
        with self._db.cursor("read the dense index") as cur:
            cur.execute("SELECT complete FROM dense_embedders WHERE id = %s", (self._id,))
            row = cur.fetchone()
            return bool(row and row[0])

    # -- updates -------------------------------------------------------------------------

    def update(
        self, upserts: Sequence[_Pair] | AnalysedBatch = (), deletes: Iterable[str] = ()
    ) -> None:
        """Replace the rows of each upserted item and drop those of each deleted id, in one
        transaction; only texts that changed are embedded, before anything is written (an
        embedder failure changes nothing). An id both upserted and deleted ends up deleted."""
        gone = [deletes] if isinstance(deletes, str) else list(deletes)
        doomed = set(gone)
        pairs = [pair for pair in _pairs(upserts) if pair[0].id not in doomed]
        with self._db.transaction("update the dense index") as conn:
            if pairs:
                self.writer.replace(conn, pairs)
            if gone:
                self.writer.remove(conn, gone)

    def refit(self, *, reuse: bool = False) -> PostgresDenseRefit:
        """A rebuild fed batch by batch (:class:`PostgresDenseRefit`). With ``reuse``, a
        row whose item holds the same text as now keeps its vector."""
        return PostgresDenseRefit(self, reuse=reuse)

    def fit_chunks(self, pairs: Iterable[_Pair | AnalysedBatch]) -> int:
        """Embed every pair into the index in place of what it held; the number of chunks."""
        refit = self.refit()
        try:
            batch: list[_Pair] = []
            rows = 0
            for entry in pairs:
                if isinstance(entry, AnalysedBatch):
                    refit.add(entry)
                    continue
                batch.append(entry)
                rows += len(entry[1]) or 1
                if rows >= _FIT_ROWS:
                    refit.add(batch)
                    batch, rows = [], 0
            refit.add(batch)
            return refit.finish()
        except BaseException:
            refit.cancel()
            raise

    # -- queries -------------------------------------------------------------------------

    def search_chunks(
        self,
        query: str,
        /,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
        *,
        per_item: int | None = None,
    ) -> list[ChunkHit]:
        """The ``top_k`` chunks whose vectors are closest to the query text's, best first;
        at most ``per_item`` of one item when it is given."""
        sql = _CHUNKS_SQL if per_item is None else _CAPPED_CHUNKS_SQL
        return [
            ChunkHit(chunk_id=key, item_id=item_id, chunk_index=int(index), score=float(score))
            for key, item_id, index, score in self._search(
                sql, query, top_k, min_similarity, filters, per_item
            )
        ]

    def search_items(
        self,
        query: str,
        /,
        top_k: int,
        min_similarity: float = 0.0,
        filters: SearchFilters | None = None,
    ) -> list[ItemHit]:
        """The ``top_k`` items closest to the query text, each scored by its best chunk
        (or by its own row when it has no chunks), best first."""
        return [
            ItemHit(item_id=item_id, score=float(score))
            for item_id, score in self._search(
                _ITEMS_SQL, query, top_k, min_similarity, filters, None
            )
        ]

    def _search(
        self,
        sql: str,
        query: str,
        top_k: int,
        min_similarity: float,
        filters: SearchFilters | None,
        cap: int | None,
    ) -> list[tuple[Any, ...]]:
        if top_k <= 0 or not isinstance(query, str) or not query.strip():
            return []
        if not self._scalar("SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT 1) x"):
            return []  # no embedding call for an empty index
        vector = self._embedding.embed([query[:MAX_TEXT_CHARS]], "query")[0]
        if not np.any(vector):
            return []
        threshold = float(min_similarity) if min_similarity == min_similarity else 0.0  # NaN
        with self._table_missing(), self._db.snapshot("search the dense index") as cur:
            found = filter_condition(cur, filters, None, self.table)
            if found is None:
                return []
            condition, params = found
            cur.execute(
                sql.format(table=self.table, condition=f"AND {condition}" if condition else ""),
                {
                    **params,
                    "q": _to_binary(vector[None, :])[0],
                    "floor": MIN_SCORE,
                    "min": threshold,
                    "k": int(top_k),
                    "cap": cap,
                },
            )
            return cur.fetchall()

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (when it was opened here); calling it again does nothing."""
        self._db.close()

    def __enter__(self) -> PostgresDenseIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresDenseIndex({self.embedder_name!r}, table={self.table!r})"
