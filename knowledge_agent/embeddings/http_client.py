"""A small JSON-over-HTTP client for embedding services: throttled, retried, errors mapped.

Standard library only (``urllib.request``), so the HTTP providers need no extra. Every
failure becomes an :class:`~knowledge_agent.errors.EmbeddingError` naming the URL and the
reason; HTTP 429 and 503 are retried a bounded number of times, honouring ``Retry-After``.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from knowledge_agent.errors import ConfigError, EmbeddingError

__all__ = ["JsonClient", "Throttle", "check_base_url"]

logger = logging.getLogger(__name__)

MAX_RETRIES = 3  # retries after the first attempt, for 429 and 503 only
BACKOFF = 0.5  # seconds before the first retry without Retry-After; doubles each time
MAX_RETRY_AFTER = 30.0  # a server asking for a longer pause fails the call instead
MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # a larger answer is a broken or hostile server
_RETRY_STATUSES = frozenset({429, 503})
_MESSAGE_CHARS = 500

_USER_AGENT = "knowledge-agent"


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash; ``ConfigError`` unless it is http(s)://host…"""
    if not isinstance(base_url, str):
        raise ConfigError(f"base_url must be a string, not {type(base_url).__name__}")
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
    if parts.username is not None or parts.password is not None:
        # Not echoed: the URL holds a secret. Keys belong in the environment.
        raise ConfigError("base_url must not contain user info; name a key with api_key_env")
    if parts.query or parts.fragment:
        raise ConfigError(f"base_url must not have a query or fragment, got {base_url!r}")
    return base_url.strip().rstrip("/")


class Throttle:
    """Releases callers at least ``interval`` seconds apart, across threads.

    The sleep happens under the lock and the next slot is measured from the actual release,
    so a thread that wakes late pushes the next one back instead of crowding it.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._next = -math.inf

    def wait(self) -> float:
        """Block until this caller may start; the ``time.monotonic()`` of its release."""
        if self.interval <= 0:
            return time.monotonic()
        with self._lock:
            now = time.monotonic()
            while now < self._next:
                time.sleep(self._next - now)
                now = time.monotonic()
            self._next = now + self.interval
            return now


def _server_message(body: bytes) -> str:
    """The human part of an error answer: OpenAI/Jina/vLLM JSON shapes, else the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = None
    # {"error": {"message": …}} (OpenAI, vLLM), {"detail": …} (FastAPI), {"message": …}
    while isinstance(data, dict):
        data = next((data[key] for key in ("error", "detail", "message") if data.get(key)), None)
    if isinstance(data, str):
        text = data
    elif data is not None:  # a list of validation errors, a number
        text = json.dumps(data, ensure_ascii=False)
    text = " ".join(text.split())
    return text[:_MESSAGE_CHARS] + ("…" if len(text) > _MESSAGE_CHARS else "")


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), if any."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class JsonClient:
    """POSTs JSON to one service and returns the decoded answer.

    ``api_key_env`` names the environment variable holding the bearer token; it is read
    on every request (so a rotated key is picked up) and never stored or logged. An
    ``api_key`` given directly is used instead, and never shown (``repr``, errors).
    Thread-safe: the only shared state is the throttle.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key_env: str | None,
        timeout: float,
        min_interval: float,
        api_key: str | None = None,
    ) -> None:
        self.base_url = check_base_url(base_url)
        if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
            raise ConfigError("api_key_env must be the name of an environment variable or None")
        if api_key is not None and (not isinstance(api_key, str) or not api_key):
            raise ConfigError("api_key must be a non-empty string or None")
        self._api_key = api_key
        if not _positive(timeout):
            raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not _positive(min_interval, allow_zero=True):
            raise ConfigError(f"min_interval must be >= 0 seconds, got {min_interval!r}")
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.throttle = Throttle(float(min_interval))

    def url(self, endpoint: str) -> str:
        return f"{self.base_url}/{endpoint}"

    def post(self, endpoint: str, payload: dict[str, Any]) -> Any:
        """POST ``payload`` to ``{base_url}/{endpoint}``; the decoded JSON answer."""
        url = self.url(endpoint)
        body = json.dumps(payload).encode("ascii")  # \u escapes: any str is sendable
        for attempt in range(MAX_RETRIES + 1):
            self.throttle.wait()
            try:
                return self._send(url, body)
            except _Retryable as exc:
                if attempt == MAX_RETRIES:
                    raise EmbeddingError(
                        url,
                        f"HTTP {exc.status} after {MAX_RETRIES + 1} attempts: {exc.message}",
                        status=exc.status,
                    ) from None
                delay = exc.retry_after
                if delay is None:
                    delay = BACKOFF * 2**attempt
                elif delay > MAX_RETRY_AFTER:
                    raise EmbeddingError(
                        url,
                        f"HTTP {exc.status}, Retry-After {delay:g} s is longer than "
                        f"{MAX_RETRY_AFTER:g} s: {exc.message}",
                        status=exc.status,
                    ) from None
                logger.info("%s answered HTTP %d; retrying in %.2f s", url, exc.status, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": _USER_AGENT,
        }
        key = self._api_key
        if key is None and self.api_key_env:
            key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _send(self, url: str, body: bytes) -> Any:
        request = urllib.request.Request(url, data=body, headers=self._headers(), method="POST")
        try:
            # Built per request so proxy variables are read at call time, like the key.
            opener = urllib.request.build_opener(_NoRedirect)
            with opener.open(request, timeout=self.timeout) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            status = exc.code
            try:
                message = _server_message(exc.read(64 * 1024)) or (exc.reason or "")
            except (OSError, ValueError):
                message = str(exc.reason or "")
            finally:
                exc.close()
            if 300 <= status < 400:
                location = exc.headers.get("Location", "?")
                message = f"redirected to {location}; set base_url to the final address"
            if status in _RETRY_STATUSES:
                retry_after = _retry_after(exc.headers.get("Retry-After"))
                raise _Retryable(status, message, retry_after) from None
            raise EmbeddingError(url, f"HTTP {status}: {message}", status=status) from None
        except urllib.error.URLError as exc:
            raise EmbeddingError(url, _network_reason(exc.reason, self.timeout)) from exc
        except TimeoutError as exc:
            raise EmbeddingError(url, f"timed out after {self.timeout:g} s") from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:  # reset, bad status…
            raise EmbeddingError(url, _network_reason(exc, self.timeout)) from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise EmbeddingError(url, f"answer larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(raw)
        except ValueError as exc:
            snippet = raw[:80].decode("utf-8", "replace")
            raise EmbeddingError(url, f"malformed JSON in answer ({exc}): {snippet!r}") from exc


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuses redirects: urllib would forward the Authorization header to any host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Retryable(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def _network_reason(reason: object, timeout: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"timed out after {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the server running?)"
    if isinstance(reason, socket.gaierror):
        return f"host name not resolved ({reason})"
    return str(reason) or type(reason).__name__


def _positive(value: object, *, allow_zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not math.isfinite(value):
        return False
    return value >= 0 if allow_zero else value > 0
