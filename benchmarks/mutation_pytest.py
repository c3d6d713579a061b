"""A pytest plugin for mutation runs (benchmarks/mutation.py loads it with ``-p``).

Hypothesis runs derandomised, without deadlines and without its example database: every
mutant meets the same examples (a score does not depend on luck or on which mutant ran
before), and a machine loaded by the parallel mutant runs fails no test by its clock.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("mutation", derandomize=True, deadline=None, database=None)
settings.load_profile("mutation")
