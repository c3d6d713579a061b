"""A testing hook: kill this process at a named step of a write, to test crash recovery.

Set ``KNOWLEDGE_AGENT_FAULT`` to ``STEP`` or ``STEP:N`` and a :class:`KnowledgeAgentCore`
opened in that process sends itself SIGKILL the N-th time (default: the first) it reaches
``STEP`` — no cleanup, no flush, exactly like ``kill -9`` at that moment, but on every
machine at the same point. The crash tests set it in a child process, then reopen the data
folder and check that nothing committed was lost. The steps (:data:`STEPS`):

``group-commit``
    a SQLite write group (a collect's or a crawl's group of files) has committed; the
    indexes have not seen it.
``before-commit``
    a PostgreSQL write group has written every file of its group, rows and postings, in its
    transaction, which is open: it has not committed.
``before-index``
    a replay of the journal into the indexes begins: SQLite and its journal hold writes
    that no index holds.
``between-indexes``
    the keyword index has committed an update, the semantic (and dense) index has not.
``before-applied``
    every index has committed an update, the journal position it reached is not recorded.
``mid-rebuild``
    a rebuild has handed a batch of items to the keyword index (which commits as it goes);
    the TF-IDF and dense indexes have not swapped their rebuilt rows in.
``before-manifest``
    new TF-IDF segment files (an update's, or a merge's) are on disk and the manifest that
    names them is not.

Unset, :meth:`Faults.reached` is one comparison. The variable is read once, when the core
is created (:meth:`Faults.from_environment`), and the object is handed to what writes.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping

from knowledge_agent.errors import ConfigError

__all__ = ["FAULT_ENV", "STEPS", "Faults"]

logger = logging.getLogger(__name__)

FAULT_ENV = "KNOWLEDGE_AGENT_FAULT"
STEPS = (
    "group-commit",
    "before-commit",
    "before-index",
    "between-indexes",
    "before-applied",
    "mid-rebuild",
    "before-manifest",
)
"""The steps ``KNOWLEDGE_AGENT_FAULT`` may name (see the module docstring)."""


class Faults:
    """Where this process kills itself on purpose (nowhere by default); a testing hook."""

    def __init__(self, spec: str = "") -> None:
        """``spec`` is ``""`` (never), ``STEP`` or ``STEP:N`` (the N-th time, N >= 1)."""
        self.step: str | None = None
        self.count = 1
        self._seen = 0
        if not spec:
            return
        step, _, count = spec.partition(":")
        if step not in STEPS:
            raise ConfigError(f"{FAULT_ENV}: unknown step {step!r}; one of {', '.join(STEPS)}")
        if count:
            if not count.isdigit() or int(count) < 1:
                raise ConfigError(f"{FAULT_ENV}: the count after ':' must be >= 1, got {count!r}")
            self.count = int(count)
        self.step = step

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Faults:
        """The faults ``KNOWLEDGE_AGENT_FAULT`` names (none when it is unset or empty)."""
        return cls((os.environ if environ is None else environ).get(FAULT_ENV, "").strip())

    def reached(self, step: str) -> None:
        """This process is at ``step``: kill it if this is the time the spec names."""
        if step != self.step:
            return
        self._seen += 1
        if self._seen == self.count:
            pid = os.getpid()
            logger.error("%s: killing process %d at %s:%d", FAULT_ENV, pid, step, self._seen)
            kill = getattr(signal, "SIGKILL", None)
            if kill is None:  # no SIGKILL (Windows): end at once all the same
                os._exit(137)
            os.kill(pid, kill)
