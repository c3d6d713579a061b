"""The checksums of a Whoosh index's generations.

Whoosh names a generation by its TOC file (``_MAIN_<gen>.toc``) and writes no checksum
anywhere. Beside each TOC this module keeps ``_MAIN_<gen>.sums``, a sealed JSON file
(:mod:`~knowledge_agent.backends.local.checksums`) recording the size and CRC-32 of the TOC and of
every file of the segments it lists — Lucene's ``segments_N`` with its files' checksums.

It is written by :class:`~knowledge_agent.backends.local.keyword.safe.SafeFileStorage` when a TOC is
renamed into place (every commit, and creating an index, goes through that rename): after
the segment files are written and synced, *before* the rename, and synced, so a TOC on disk
always has its sums (a crash in between leaves sums of a generation that never appeared,
overwritten by the next commit). A segment file recorded by the previous generation keeps
the recorded sum — segment files never change once written, and checksumming one again
would make damage look intended. Sums of older generations are deleted after the rename.

Reading a generation (:func:`verified_toc`, on every open of a reader, searcher or writer)
checks the TOC's checksum, every other file's size, and the checksums of the files the
process has not verified yet when they are few enough
(:class:`~knowledge_agent.backends.local.checksums.VerifiedFiles`); :func:`verify_index` (``check``)
checks every file's checksum.

**The previous release** wrote no sums. In an index of that release (its state file is plain
JSON: :mod:`~knowledge_agent.backends.local.keyword.state`), a latest generation without sums is
read as that release read it (``SafeFileStorage.legacy``) and :func:`verify_index` has
nothing to verify in it (``legacy``), until a writer records its sums
(:func:`~knowledge_agent.backends.local.keyword.safe.seal_legacy_generation`); anywhere else a
missing sums file is damage.
"""

from __future__ import annotations

import contextlib
import os
import re
import zlib
from collections.abc import Iterable
from pathlib import Path

from knowledge_agent.backends.local.atomic_files import fsync_directory, write_sealed
from knowledge_agent.backends.local.checksums import (
    Damage,
    FileSum,
    VerifiedFiles,
    file_sum,
    read_sealed_json,
    verify_file,
    verify_files,
)
from knowledge_agent.errors import DamagedIndexError

__all__ = [
    "remove_older_sums",
    "seal_generation",
    "toc_generation",
    "unsealed_generation",
    "verified_toc",
    "verify_index",
]

FORMAT = "knowledge_agent.whoosh-sums/1"
_TOC = re.compile(r"^_(.+)_([0-9]+)\.toc$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a name in the folder, no path
_ATTEMPTS = 5  # a writer may replace the generation while it is verified


def toc_generation(name: str) -> tuple[str, int] | None:
    """(index name, generation) of a TOC file name; None for any other name."""
    match = _TOC.match(name)
    return None if match is None else (match.group(1), int(match.group(2)))


def _toc_name(indexname: str, gen: int) -> str:
    return f"_{indexname}_{gen}.toc"


def _sums_name(indexname: str, gen: int) -> str:
    return f"_{indexname}_{gen}.sums"


def _sums_generations(names: Iterable[str], indexname: str) -> list[int]:
    pattern = re.compile(rf"^_{re.escape(indexname)}_([0-9]+)\.sums$")
    return [int(m.group(1)) for m in map(pattern.match, names) if m is not None]


def _latest_generation(names: Iterable[str], indexname: str) -> int:
    found = [found[1] for found in map(toc_generation, names) if found and found[0] == indexname]
    return max(found, default=-1)


def unsealed_generation(folder: Path, indexname: str) -> int | None:
    """The latest generation in ``folder`` when it has no sums (None: it has, or there is
    no index)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return None
    gen = _latest_generation(names, indexname)
    return gen if gen >= 0 and _sums_name(indexname, gen) not in names else None


def _read_sums(path: Path, gen: int) -> dict[str, FileSum]:
    """The recorded sums in ``path``; ``ValueError`` for anything but generation ``gen``'s."""
    value = read_sealed_json(path)
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        raise ValueError("not a Whoosh checksum file")
    if value.get("generation") != gen:
        raise ValueError(f"records generation {value.get('generation')!r}, not {gen}")
    files = value.get("files")
    if not isinstance(files, dict):
        raise ValueError("no file list")
    for name in files:
        if not _FILE_NAME.match(name):  # a recorded name never leads out of the folder
            raise ValueError(f"bad file name {name!r}")
    return {name: FileSum.from_json(entry) for name, entry in files.items()}


# -- writing -------------------------------------------------------------------------------


def seal_generation(
    folder: Path,
    indexname: str,
    gen: int,
    toc_file: str,
    segment_ids: Iterable[str],
    verified: VerifiedFiles,
) -> None:
    """Record the sums of generation ``gen``: its TOC, still at the temporary name
    ``toc_file``, and the files of each segment in ``segment_ids`` (those checksummed now,
    just written, join ``verified``)."""
    names = os.listdir(folder)
    previous: dict[str, FileSum] = {}
    older = [g for g in _sums_generations(names, indexname) if g < gen]
    if older:
        try:
            previous = _read_sums(folder / _sums_name(indexname, max(older)), max(older))
        except (OSError, ValueError):
            previous = {}  # the writer checked it on opening: only a race gets here
    files = {_toc_name(indexname, gen): file_sum(folder / toc_file)}
    for segid in segment_ids:
        prefix = f"{indexname}_{segid}."
        for name in names:
            if name.startswith(prefix):
                recorded = previous.get(name)
                if recorded is None:
                    recorded = file_sum(folder / name)
                    verified.add(folder / name)
                files[name] = recorded
    record = {
        "format": FORMAT,
        "generation": gen,
        "files": {name: value.to_json() for name, value in sorted(files.items())},
    }
    write_sealed(folder / _sums_name(indexname, gen), record)
    fsync_directory(folder)  # on disk before the TOC that needs it


def remove_older_sums(folder: Path, indexname: str, gen: int) -> None:
    """Delete the sums of generations before ``gen`` (their TOCs go the same way)."""
    for old in _sums_generations(os.listdir(folder), indexname):
        if old < gen:
            with contextlib.suppress(OSError):  # else deleted after the next commit
                os.unlink(folder / _sums_name(indexname, old))


# -- reading -------------------------------------------------------------------------------


def verified_toc(folder: Path, indexname: str, gen: int, verified: VerifiedFiles) -> bytes:
    """The TOC of generation ``gen``, its checksum verified and every other file of the
    generation checked for size, and for its checksum when ``verified`` says so.

    ``FileNotFoundError`` when the generation is gone (a newer commit deleted its files);
    :class:`DamagedIndexError` naming the file when anything is damaged or missing.
    """
    toc = folder / _toc_name(indexname, gen)
    sums_path = folder / _sums_name(indexname, gen)
    try:
        sums = _read_sums(sums_path, gen)
    except FileNotFoundError:
        if not toc.exists() or _latest_generation(os.listdir(folder), indexname) != gen:
            raise  # gone with its generation, whose TOC a newer commit is deleting
        raise DamagedIndexError(
            f"{sums_path}: missing (the checksums of generation {gen})"
        ) from None
    except (OSError, ValueError) as exc:
        raise DamagedIndexError(f"{sums_path}: {exc}") from exc
    data = toc.read_bytes()
    expected = sums.get(toc.name)
    if expected is None:
        raise DamagedIndexError(f"{sums_path}: does not record {toc.name}")
    if len(data) != expected.size or zlib.crc32(data) != expected.crc32:
        raise DamagedIndexError(f"{toc}: checksum mismatch (its bytes changed since written)")
    others = [(name, value) for name, value in sums.items() if name != toc.name]
    damage = verify_files(folder, others, full=False) or verified.check(folder, others)
    if damage:
        if _latest_generation(os.listdir(folder), indexname) != gen:
            raise FileNotFoundError(damage[0].path)  # swept by a newer commit: read that
        raise DamagedIndexError(str(damage[0]))
    return data


def verify_index(
    folder: Path, indexname: str, *, full: bool = True, legacy: bool = False
) -> list[Damage]:
    """The damaged files of the latest generation in ``folder`` (none when it holds no
    index): every file's size, and with ``full`` its checksum. With ``legacy``, a latest
    generation without sums has nothing to verify (opening it reads its files)."""
    for _ in range(_ATTEMPTS):
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        gen = _latest_generation(names, indexname)
        if gen < 0:
            return []
        sums_path = folder / _sums_name(indexname, gen)
        try:
            sums = _read_sums(sums_path, gen)
        except FileNotFoundError:
            names = os.listdir(folder)
            if _toc_name(indexname, gen) in names and _latest_generation(names, indexname) == gen:
                if legacy:
                    return []
                return [Damage(str(sums_path), f"missing (the checksums of generation {gen})")]
            continue
        except (OSError, ValueError) as exc:
            return [Damage(str(sums_path), str(exc))]
        damage = [
            Damage(str(folder / name), problem)
            for name, expected in sums.items()
            if (problem := verify_file(folder / name, expected, full=full)) is not None
        ]
        if not damage or _latest_generation(os.listdir(folder), indexname) == gen:
            return damage
    return []  # replaced on every attempt: a writer is busy, and it verified what it read
