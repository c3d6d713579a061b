"""Checksums of index files, and JSON files that carry their own.

Every file an index relies on has its size and CRC-32 recorded when it is written, in the
file that names the generation it belongs to (a TF-IDF or dense manifest, a Whoosh
generation's sums file); the small JSON files that name generations (manifests, sums,
``state.json``) are *sealed*: they carry the CRC-32 of their own content. So damage to any
byte of an index is found by :func:`verify_files` (what ``check`` runs), and the cheap part
of it on every open: sizes, every sealed file, and the other files in full as long as those
not yet verified by the process total at most :data:`VERIFY_ON_OPEN_BYTES`
(:class:`VerifiedFiles`).

**Why CRC-32.** It is what Lucene's codec footers use, zlib computes it at about 2 GB/s here
(BLAKE2b: 0.5 GB/s), and it finds every error burst of up to 32 bits and any other damage
but for one chance in 4·10⁹. It is not a defence against someone who writes the data folder
on purpose: they can write checksums too. That is what the restricted unpickler and the
pickle-free array files are for.

A sealed JSON file is itself JSON — ``{"crc32":"0a1b2c3d","body":{…}}`` with the body's
bytes checksummed as written — so it stays readable with any JSON tool. Reading one is
bounded in size, and anything that fails to load it (a bad checksum, invalid JSON, nesting
deeper than the parser's recursion limit) raises :class:`ValueError`.

**Files of the previous release.** It wrote the same files as plain JSON, and no sums:
:func:`read_json_file` reads either form and says which it found, so that each index can
accept its own previous format exactly (and nothing looser) and have a writer upgrade it
in place: the sums of the files a legacy generation names are computed once, when the
generation has been loaded as the previous release loaded it, and sealed.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_SEALED_BYTES",
    "VERIFY_ON_OPEN_BYTES",
    "Damage",
    "FileSum",
    "VerifiedFiles",
    "file_sum",
    "read_json_file",
    "read_sealed_json",
    "seal_json",
    "unseal_json",
    "verify_file",
    "verify_files",
]

MAX_SEALED_BYTES = 64 << 20
"""The largest sealed JSON file read: a manifest's dead-row bitmaps take 1.3 bits a row,
so this holds some 400 million rows."""

VERIFY_ON_OPEN_BYTES = 64 << 20
"""The most bytes of index files an open checksums whole (about 40,000 chunks of keyword
index): at 2 GB/s, 30 ms at most. A larger generation is checked for sizes only on opening
(the queries of a large index read a small part of it: reading all of it would cost more
than they do) and for checksums by ``check``."""

_BLOCK = 1 << 20  # bytes checksummed at a time
_SEAL = re.compile(rb'\{"crc32":"([0-9a-f]{8})","body":')
_END = b"}\n"


@dataclass(frozen=True)
class FileSum:
    """A file's size and CRC-32, as recorded when it was written."""

    size: int
    crc32: int

    def to_json(self) -> dict[str, int]:
        return {"size": self.size, "crc32": self.crc32}

    @classmethod
    def from_json(cls, entry: Any) -> FileSum:
        """A recorded sum; ``ValueError`` for anything else."""
        if not isinstance(entry, dict):
            raise ValueError("a file's checksum entry is not an object")
        size, crc = entry.get("size"), entry.get("crc32")
        for value in (size, crc):
            if type(value) is not int or value < 0:
                raise ValueError(f"bad size or crc32 {value!r}")
        if crc >= 1 << 32:
            raise ValueError(f"bad crc32 {crc!r}")
        return cls(size, crc)


@dataclass(frozen=True)
class Damage:
    """One damaged (or missing) file of an index, and what is wrong with it."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def file_sum(path: str | os.PathLike[str]) -> FileSum:
    """The size and CRC-32 of the file at ``path`` as it is now."""
    crc, size = 0, 0
    buffer = bytearray(_BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buffer)
            if not n:
                break
            crc = zlib.crc32(view[:n], crc)
            size += n
    return FileSum(size, crc)


def verify_file(path: Path, expected: FileSum, *, full: bool) -> str | None:
    """What is wrong with ``path`` against its recorded sum (None: nothing): its size
    always, its CRC-32 too with ``full``."""
    try:
        size = os.stat(path).st_size
        if size != expected.size:
            return f"{size} bytes, {expected.size} when written"
        if full and file_sum(path).crc32 != expected.crc32:
            return "checksum mismatch (its bytes changed since it was written)"
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None


def verify_files(
    directory: Path, sums: Iterable[tuple[str, FileSum]], *, full: bool
) -> list[Damage]:
    """:func:`verify_file` for each (name in ``directory``, recorded sum)."""
    found = []
    for name, expected in sums:
        problem = verify_file(directory / name, expected, full=full)
        if problem is not None:
            found.append(Damage(str(directory / name), problem))
    return found


class VerifiedFiles:
    """The files a process has checksummed whole (or written), by path and version (a
    rename gives a file a new inode), so that opening a generation again, or the next
    one, reads none of them twice."""

    def __init__(self, budget: int = VERIFY_ON_OPEN_BYTES) -> None:
        self.budget = budget
        self._seen: set[tuple[str, int, int, int]] = set()

    @staticmethod
    def _key(path: Path) -> tuple[str, int, int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)

    def add(self, path: Path) -> None:
        """``path`` as it is now was checksummed (or written) by this process."""
        key = self._key(path)
        if key is not None:
            self._seen.add(key)

    def check(self, directory: Path, sums: Iterable[tuple[str, FileSum]]) -> list[Damage]:
        """Checksum the files of ``sums`` not verified yet, when they total at most the
        budget (else none: their sizes are checked elsewhere); the damaged ones."""
        pending = [(name, s) for name, s in sums if self._key(directory / name) not in self._seen]
        if sum(s.size for _, s in pending) > self.budget:
            return []
        found = verify_files(directory, pending, full=True)
        if not found:
            for name, _ in pending:
                self.add(directory / name)
        return found


# -- sealed JSON ---------------------------------------------------------------------------


def seal_json(value: Any) -> bytes:
    """``value`` as a sealed JSON file's bytes."""
    body = json.dumps(value, separators=(",", ":")).encode("utf-8")
    return b'{"crc32":"%08x","body":' % zlib.crc32(body) + body + _END


def unseal_json(data: bytes) -> Any:
    """The value a sealed JSON file holds; ``ValueError`` when its checksum or JSON is bad."""
    match = _SEAL.match(data)
    if match is None or not data.endswith(_END):
        raise ValueError("not a sealed JSON file (damaged, or written by an older version)")
    body = data[match.end() : -len(_END)]
    if zlib.crc32(body) != int(match.group(1), 16):
        raise ValueError("checksum mismatch (its bytes changed since it was written)")
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc}") from None


def read_sealed_json(path: str | os.PathLike[str], limit: int = MAX_SEALED_BYTES) -> Any:
    """The value of the sealed JSON file at ``path``, read only up to ``limit`` bytes;
    ``ValueError`` for a larger file or one that fails to load, ``OSError`` from reading."""
    return unseal_json(_read_bounded(path, limit))


def read_json_file(path: str | os.PathLike[str], limit: int = MAX_SEALED_BYTES) -> tuple[Any, bool]:
    """The value of the JSON file at ``path``, sealed or plain (as the previous release
    wrote it), and whether it was plain; read and refused as :func:`read_sealed_json`
    does. A file that begins as a sealed one is read as one: damage to it never makes it
    pass for a plain file."""
    data = _read_bounded(path, limit)
    if _SEAL.match(data) is not None:
        return unseal_json(data), False
    try:
        return json.loads(data.decode("utf-8")), True
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc}") from None


def _read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes")
    return data
