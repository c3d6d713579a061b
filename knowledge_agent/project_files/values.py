"""Checks of the values a settings file gives: each failure a ``ConfigError`` naming the key."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from knowledge_agent.errors import ConfigError

__all__ = ["boolean", "inside", "integer", "number", "string", "strings", "table"]


def table(value: object, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a table of keys and values, got {value!r}")
    return value


def string(value: object, key: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ConfigError(f"{key} must be a {'' if empty else 'non-empty '}string, got {value!r}")
    return value


def strings(value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise ConfigError(f"{key} must be a list of strings, got {value!r}")
    return tuple(value)


def integer(value: object, key: str, minimum: int) -> int:
    # bool is an int in Python but never a count here.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{key} must be a number >= 0, got {value!r}")
    return float(value)


def boolean(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    return value


def inside(path: str | os.PathLike[str], base: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (relative to ``base``), symlinks resolved, is ``base`` or below it."""
    real_base = os.path.normcase(os.path.realpath(base))
    real = os.path.normcase(os.path.realpath(os.path.join(real_base, os.fspath(path))))
    return real == real_base or real.startswith(real_base.rstrip(os.sep) + os.sep)
