"""Retry a flaky call with exponential backoff and full jitter.

Used by the payments service for calls to the database and the payment provider: a
transient failure (a timeout, a dropped connection) is retried a few times, waiting a
little longer before each attempt, instead of failing the customer's request at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

RETRYABLE = (TimeoutError, ConnectionError)


class RetryError(Exception):
    """Every attempt failed; ``last_error`` is the exception of the final attempt."""

    def __init__(self, attempts: int, last_error: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last_error}")
        self.attempts = attempts
        self.last_error = last_error


def backoff_delays(base: float = 0.1, cap: float = 5.0, attempts: int = 5) -> Iterator[float]:
    """Yield the wait before each retry: exponential growth capped at ``cap``, full jitter.

    Full jitter draws each delay uniformly between zero and the exponential bound, so
    clients that failed together do not retry together and overload the server again.
    """
    for attempt in range(attempts - 1):
        yield random.uniform(0, min(cap, base * 2**attempt))


def is_retryable(error: BaseException) -> bool:
    """Whether an error is transient: timeouts and dropped connections are, others are not."""
    return isinstance(error, RETRYABLE)


def retry_with_backoff(
    call: Callable[[], T],
    *,
    attempts: int = 5,
    base: float = 0.1,
    cap: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``call`` until it succeeds, sleeping a jittered, growing delay between attempts.

    A non-retryable error is raised at once; after ``attempts`` transient failures a
    ``RetryError`` carries the last one. Pass ``sleep`` to test without waiting.
    """
    delays = backoff_delays(base, cap, attempts)
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as error:
            if not is_retryable(error) or attempt == attempts:
                if is_retryable(error):
                    raise RetryError(attempts, error) from error
                raise
            sleep(next(delays))
    raise AssertionError("unreachable")
