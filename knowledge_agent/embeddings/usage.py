"""What an embedding or rerank provider was asked for: requests, texts and tokens.

Every provider keeps a :class:`UsageCounter` (its ``usage`` attribute) for the life of the
object — for a core built from settings, since the core was opened; nothing is written to
disk. A service that reports its tokens (``usage.total_tokens`` or ``prompt_tokens`` in its
answer, as OpenAI, vLLM and Jina do) is counted by its report; a request whose answer
reports none adds the local estimate (:func:`~knowledge_agent.tokens.estimate_tokens`) to
``estimated_tokens`` instead, so the figures go on when a service leaves the field out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from knowledge_agent.tokens import estimate_tokens

__all__ = ["ServiceUsage", "UsageCounter", "reported_tokens"]


@dataclass(frozen=True)
class ServiceUsage:
    """One provider's figures: ``requests`` (HTTP requests to a service, calls of a local
    model), of which ``failed`` failed; ``texts`` embedded or scored; ``tokens`` the service
    reported, and ``estimated_tokens`` for the requests whose answer reported none."""

    name: str = ""
    requests: int = 0
    failed: int = 0
    texts: int = 0
    tokens: int = 0
    estimated_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def reported_tokens(answer: Any) -> int | None:
    """The tokens a service's answer says it used (``usage.total_tokens``, else
    ``usage.prompt_tokens``), or None when it does not say."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return None
    for key in ("total_tokens", "prompt_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


class UsageCounter:
    """Counts a provider's requests, texts and tokens; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests = self._failed = self._texts = self._tokens = self._estimated = 0

    def record(self, texts: Iterable[str], answer: Any = None, *, local: bool = False) -> None:
        """One request that sent ``texts`` and got ``answer``; a ``local`` model's call
        counts no tokens."""
        sent = list(texts)
        tokens = None if local else reported_tokens(answer)
        estimated = 0 if local or tokens is not None else sum(map(estimate_tokens, sent))
        with self._lock:
            self._requests += 1
            self._texts += len(sent)
            self._tokens += tokens or 0
            self._estimated += estimated

    def record_failure(self) -> None:
        """One request that failed (its texts are not counted)."""
        with self._lock:
            self._requests += 1
            self._failed += 1

    def snapshot(self, name: str = "") -> ServiceUsage:
        """The figures so far, under the provider's ``name``."""
        with self._lock:
            return ServiceUsage(
                name, self._requests, self._failed, self._texts, self._tokens, self._estimated
            )
