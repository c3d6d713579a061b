"""The keyword index's state file: the journal position its two Whoosh indexes reflect.

``{index_dir}/state.json`` is a sealed JSON file (:mod:`~knowledge_agent.backends.local.checksums`)
holding ``{"applied_seq": N}``, read bounded in size. The previous release wrote the same
object as plain JSON, and recorded no sums of its Whoosh generations: a state file in
exactly that form marks a keyword index of that release, whose latest generations are read
without sums until a writer records them and seals the state file
(:meth:`~knowledge_agent.backends.local.keyword.index.SearchIndexManager.upgrade`). Anything
else that is not a sealed state file is damage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from knowledge_agent.backends.local.atomic_files import write_sealed
from knowledge_agent.backends.local.checksums import read_json_file

__all__ = ["STATE_FILE", "KeywordState", "read_state", "write_state"]

STATE_FILE = "state.json"
_STATE_LIMIT = 1 << 16  # bytes: a state file holds one number


@dataclass(frozen=True)
class KeywordState:
    """What a state file records, and whether the previous release wrote it."""

    applied_seq: int
    legacy: bool


def read_state(path: Path) -> KeywordState:
    """The state file at ``path``; raises whatever stops it from loading
    (``FileNotFoundError`` when there is none, ``ValueError`` when it is not a state file)."""
    data, plain = read_json_file(path, _STATE_LIMIT)
    if plain and not (isinstance(data, dict) and set(data) == {"applied_seq"}):
        raise ValueError(
            "not a sealed JSON file, nor a state file of the previous release "
            "(damaged, or written by another version)"
        )
    seq = data.get("applied_seq") if isinstance(data, dict) else None
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise ValueError(f"bad applied_seq {seq!r}")
    return KeywordState(seq, plain)


def write_state(path: Path, applied_seq: int) -> None:
    """Write a state file (sealed, atomically)."""
    write_sealed(path, {"applied_seq": applied_seq})
