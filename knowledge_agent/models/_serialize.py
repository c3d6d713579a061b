"""Helpers shared by the models' to_dict / from_dict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
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


def fields_to_json(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a JSON-ready dict, ``id`` first: datetimes in ISO 8601, nested
    containers copied."""
    data: dict[str, Any] = {"id": obj.id} if hasattr(obj, "id") else {}
    for spec in fields(obj):
        value = getattr(obj, spec.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, (dict, list, tuple)):
            value = copy_json(value)
        data[spec.name] = value
    return data


def fields_from_json(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of dataclass ``cls`` from :func:`fields_to_json` output: keys
    it lacks (or None datetimes) take the defaults; lists and dicts are copied, datetimes
    parsed."""
    kwargs: dict[str, Any] = {}
    for spec in fields(cls):
        value = data.get(spec.name)
        if spec.name not in data or (value is None and spec.type == "datetime"):
            continue
        if spec.type == "datetime":
            value = to_datetime(value)
        elif spec.type.startswith(("list", "dict")):
            value = copy_json(value or ({} if spec.type.startswith("dict") else []))
        kwargs[spec.name] = value
    return kwargs
