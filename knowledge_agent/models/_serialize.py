"""Helpers shared by the models' to_dict / from_dict."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def copy_json(value: Any) -> Any:
    """A deep copy of nested dicts and lists, so a model never shares state with its dict."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [copy_json(item) for item in value]
    return value


def to_datetime(value: Any) -> datetime:
    """Accept a datetime, an ISO 8601 string or a POSIX timestamp."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    raise TypeError(f"not a datetime: {value!r}")
