"""The settings files of the tools the specs describe, read as this project's settings.

:mod:`.agentos` reads 001's ``.agentos/kb_config.json``, :mod:`.knowledge_toml` 002's
``config.toml`` and its ``knowledge/<kb>/`` folders, :mod:`.chunk_sizes` maps their chunk
settings; each reader returns a :class:`~.model.SpecFile` (settings, the key each came from,
the keys not used, what was left out as untrusted). :mod:`knowledge_agent.settings` finds the
files and merges them.
"""
