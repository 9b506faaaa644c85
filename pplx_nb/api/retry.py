"""When to retry a failed request, and how long to wait first.

Like Perplexity's official SDK: exponential backoff with jitter from 0.5 s, capped at 8 s, on
408/409/429/5xx and connection errors; a ``Retry-After`` / ``retry-after-ms`` hint of up to 60 s
is honoured instead. 400/401/403/404 and timeouts are never retried.

Paid requests (a background submission, a deep-research answer) are stricter: they are sent again
only when the failure proves the request never reached the server (:func:`not_sent`). Any other
failure after sending leaves the outcome unknown (:func:`outcome_unknown`): the run may exist
and be billed, so it is reported, never re-sent.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from pplx_nb._errors import APIError, APITimeoutError, NetworkError

__all__ = [
    "RATE_LIMIT_WAIT",
    "TOO_LARGE",
    "UNREADABLE",
    "RetryPolicy",
    "not_sent",
    "outcome_unknown",
    "retry_after_seconds",
    "seconds_until_date",
    "unread",
]

_RETRY_STATUSES = frozenset({408, 409, 429})
_REFUSED_STATUSES = frozenset({429, 503})
"""Statuses by which a server says it did not take the request on (rate limit, overload)."""
RATE_LIMIT_WAIT = "RateLimitWait"
"""The ``reason`` of a TIMEOUT_ERROR for a request whose turn under the rate limit would come
after its timeout (``api._throttle``): it was never sent."""
_UNSENT_REASONS = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout", RATE_LIMIT_WAIT})
"""httpx2 failures that happen before a byte of the request is sent, and a turn too late."""
TOO_LARGE = "TooLarge"
"""The ``reason`` of a reply refused unread for its size (``PPLX_NB_MAX_RESPONSE_MB``)."""
UNREADABLE = "Unreadable"
"""The ``reason`` of a reply that arrived whole but cannot be read (not the API's format)."""
_UNREAD_REASONS = frozenset({TOO_LARGE, UNREADABLE})


def not_sent(error: APIError) -> bool:
    """Whether ``error`` proves the request never reached the server, or was refused unread.

    A refused or timed-out connection, no free connection in the pool, a turn under the rate
    limit that would come too late, or a 429 / 503 reply.
    """
    status = error.status_code
    if status is not None:
        return status in _REFUSED_STATUSES
    return error.reason in _UNSENT_REASONS


def outcome_unknown(error: APIError) -> bool:
    """Whether the server may have acted on a request that failed with ``error``.

    True for a broken connection or a timeout after sending, for a reply that cannot be read
    (too large, not the API's format: :func:`unread`), and for 408, 409 and 5xx replies other
    than 503; a 4xx rejection or a run the API reports failed is a known outcome.
    """
    if not_sent(error):
        return False
    status = error.status_code
    if status is None:
        return isinstance(error, NetworkError | APITimeoutError) or unread(error)
    return status in _RETRY_STATUSES or status >= 500


def unread(error: APIError) -> bool:
    """Whether ``error`` is a reply that arrived and could not be read: over
    ``PPLX_NB_MAX_RESPONSE_MB``, or not in the API's format. The server did answer, so it
    says nothing of the server failing; for a paid request it leaves the outcome unknown."""
    return error.reason in _UNREAD_REASONS


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's wait hint in seconds (``retry-after-ms`` first), or ``None``."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return seconds_until_date(value)


def seconds_until_date(value: str) -> float | None:
    """Seconds from now until an HTTP date (``Wed, 21 Oct 2026 07:28:00 GMT``), or ``None``."""
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times to retry and how to space the attempts (all times in seconds)."""

    max_retries: int = 3
    base: float = 0.5
    cap: float = 8.0
    max_retry_after: float = 60.0

    def should_retry(self, error: APIError, retries_done: int) -> bool:
        """Whether ``error`` is worth another attempt after ``retries_done`` retries."""
        if retries_done >= self.max_retries:
            return False
        status = error.status_code
        if status is None:
            return isinstance(error, NetworkError)
        return status in _RETRY_STATUSES or status >= 500

    def should_resend_paid(self, error: APIError, retries_done: int) -> bool:
        """Whether a paid request that failed with ``error`` may be sent again (not sent)."""
        return retries_done < self.max_retries and not_sent(error)

    def delay(self, error: APIError, retries_done: int) -> float:
        """Seconds to wait before the next attempt: the server's hint, else jittered backoff."""
        hint = error.retry_after
        if hint is not None and 0 <= hint <= self.max_retry_after:
            return float(hint)
        backoff = min(self.base * 2.0**retries_done, self.cap)
        return backoff * (1 - 0.25 * random.random())
