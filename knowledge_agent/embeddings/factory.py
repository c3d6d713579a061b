"""Providers from a project file section such as ``{"provider": "wordllama", "dim": 256}``.

Every key is checked: an unknown provider or key, a missing required key or a value of the
wrong type is a ``ConfigError`` naming it and what is valid. ``api_key_env`` names the
environment variable that holds an API key; ``api_key``, the key itself, is taken for the
settings files that hold one (002's ``config.toml``) and the Python API — a
``.knowledge-agent.toml`` refuses it. Seed 002's ``query_instruction`` /
``document_instruction`` are read as ``query_prefix`` / ``document_prefix``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from knowledge_agent.embeddings.base import Embedder, Reranker
from knowledge_agent.embeddings.minilm import MiniLMEmbedder
from knowledge_agent.embeddings.openai_compat import OpenAIEmbedder, OpenAIReranker
from knowledge_agent.embeddings.wordllama_provider import WordLlamaEmbedder
from knowledge_agent.errors import ConfigError

__all__ = ["embedder_from_config", "provider_keys", "reranker_from_config"]

_NUMBER = (int, float)
_OPTIONAL_STR = (str, type(None))
_OPTIONAL_INT = (int, type(None))

# provider -> (class, {key: accepted types}, required keys)
_Spec = tuple[Callable[..., Any], dict[str, tuple[type, ...]], frozenset[str]]

_EMBEDDERS: dict[str, _Spec] = {
    "wordllama": (
        WordLlamaEmbedder,
        {"config": (str,), "dim": (int,), "batch_size": (int,), "cache_dir": (str,)},
        frozenset(),
    ),
    "minilm": (
        MiniLMEmbedder,
        {"model_dir": (str,), "max_tokens": (int,), "batch_size": (int,)},
        frozenset(),
    ),
    "openai": (
        OpenAIEmbedder,
        {
            "base_url": (str,),
            "model": (str,),
            "api_key_env": _OPTIONAL_STR,
            "api_key": (str,),
            "dimensions": _OPTIONAL_INT,
            "batch_size": (int,),
            "min_interval": _NUMBER,
            "query_prefix": (str,),
            "document_prefix": (str,),
            "timeout": _NUMBER,
        },
        frozenset({"base_url", "model"}),
    ),
}

_RERANKERS: dict[str, _Spec] = {
    "openai": (
        OpenAIReranker,
        {
            "base_url": (str,),
            "model": (str,),
            "api_key_env": _OPTIONAL_STR,
            "api_key": (str,),
            "batch_size": (int,),
            "min_interval": _NUMBER,
            "query_prefix": (str,),
            "timeout": _NUMBER,
        },
        frozenset({"base_url", "model"}),
    ),
}

# Seed 002's names for the instruction keys, read as this package's.
_ALIASES = {"query_instruction": "query_prefix", "document_instruction": "document_prefix"}


def embedder_from_config(config: Mapping[str, Any]) -> Embedder:
    """An :class:`Embedder` from a configuration mapping (``provider`` plus its options)."""
    embedder: Embedder = _build("embedding", _EMBEDDERS, config)
    return embedder


def reranker_from_config(config: Mapping[str, Any]) -> Reranker:
    """A :class:`Reranker` from a configuration mapping (``provider`` plus its options)."""
    reranker: Reranker = _build("reranker", _RERANKERS, config)
    return reranker


def provider_keys(kind: str, provider: str) -> frozenset[str]:
    """The keys a provider takes besides ``provider``: ``kind`` is "embeddings" or "rerank"
    (empty for an unknown provider)."""
    providers = _RERANKERS if kind == "rerank" else _EMBEDDERS
    spec = providers.get(provider)
    return frozenset(spec[1]) if spec is not None else frozenset()


def _build(what: str, providers: Mapping[str, _Spec], config: Mapping[str, Any]) -> Any:
    if not isinstance(config, Mapping):
        raise ConfigError(f"the {what} configuration must be a table, not {type(config).__name__}")
    provider = config.get("provider")
    if provider not in providers:
        valid = ", ".join(sorted(providers))
        if provider is None:
            raise ConfigError(f"the {what} configuration needs a 'provider' key; valid: {valid}")
        raise ConfigError(f"unknown {what} provider {provider!r}; valid: {valid}")
    factory, accepted, required = providers[provider]
    options = {key: value for key, value in config.items() if key != "provider"}
    given_as = {}  # a key read under seed 002's name is named so in errors
    for alias, key in _ALIASES.items():
        if alias in options and key in accepted:
            if key in options:
                raise ConfigError(f"{what} keys {alias!r} and {key!r} are one setting: give one")
            options[key] = options.pop(alias)
            given_as[key] = alias
    unknown = sorted(str(key) for key in options if key not in accepted)
    if unknown:
        raise ConfigError(
            f"unknown {what} key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"for provider {provider!r}; valid: provider, {', '.join(sorted(accepted))}"
        )
    missing = sorted(required - options.keys())
    if missing:
        raise ConfigError(f"the {what} provider {provider!r} needs {', '.join(map(repr, missing))}")
    for key, value in options.items():
        types = accepted[key]
        # bool is an int in Python but never a valid count, size or duration here.
        if isinstance(value, bool) or not isinstance(value, types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ConfigError(
                f"{what} key {given_as.get(key, key)!r} must be {names}, "
                f"not {type(value).__name__} ({value!r})"
            )
    return factory(**options)
