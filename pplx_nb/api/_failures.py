"""The one place where HTTP failures become pplx_nb errors.

Request exceptions from httpx2 (transport, body decoding, redirects) become
:class:`APITimeoutError` / :class:`NetworkError` (raised ``from`` the original, redacted: a
malformed reply can be quoted in it), and error
responses become the :class:`APIError` subclass for their status with the API's own message —
never the key, and never choking on an HTML error page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TypedDict

import httpx2

from pplx_nb._errors import (
    APIError,
    APIKeyInvalid,
    APIQuotaExceeded,
    APIServerError,
    APITimeoutError,
    InvalidInput,
    NetworkError,
    SubmissionUnknown,
    redact,
)
from pplx_nb._redact import scrub_chain
from pplx_nb.api.retry import TOO_LARGE, retry_after_seconds, unread

__all__ = [
    "KEY_HELP",
    "from_status",
    "submission_unknown",
    "too_large",
    "transport_errors",
    "unread_words",
]

KEY_HELP = (
    "Set a valid key in the PERPLEXITY_API_KEY environment variable (or pass "
    "Settings(api_key=...)); to work without one, set PPLX_NB_OFFLINE=1 and pplx_nb answers "
    "from its built-in offline simulator."
)
_MAX_MESSAGE = 500
_SONAR_RETIRED = "chat_completions_not_available"
_CHECK_REQUEST = "Check the model name, the search options and PERPLEXITY_BASE_URL."
_FIXES = {
    400: "Check the model name and the search options.",
    402: "Check the credit and billing of the API key's account.",
    404: "Check the model name, the request id and PERPLEXITY_BASE_URL.",
    405: "Check that PERPLEXITY_BASE_URL and PERPLEXITY_API_STYLE match the server.",
    413: "Shorten the question or the attached files.",
    422: "Check the model name and the search options.",
}


class _Facts(TypedDict):
    """What every error for an HTTP response carries, as :class:`APIError` takes it."""

    status_code: int
    retry_after: float | None


@contextmanager
def transport_errors(what: str, timeout_s: float, *, secret: str | None) -> Iterator[None]:
    """Translate httpx2 request exceptions raised inside the block; ``what`` names the call."""
    try:
        yield
    except APIError:
        raise
    except (httpx2.TimeoutException, TimeoutError) as exc:
        scrub_chain(exc, secret)
        raise APITimeoutError(
            f"No answer from {what} within {timeout_s:g} s. Retry, or allow more time with "
            "PERPLEXITY_TIMEOUT (milliseconds; PERPLEXITY_DEEP_RESEARCH_TIMEOUT for deep "
            "research).",
            reason=type(exc).__name__,
        ) from exc
    except httpx2.HTTPError as exc:
        scrub_chain(exc, secret)
        detail = redact(str(exc) or type(exc).__name__, secret)
        raise NetworkError(
            f"The connection to {what} failed or broke off ({detail}). Check the network and "
            "PERPLEXITY_BASE_URL, then retry.",
            reason=type(exc).__name__,
        ) from exc


def _api_error(body: bytes) -> tuple[str, str]:
    """The message and type in an ``{"error": {"message": ..., "type": ...}}``-style body, each
    ``""`` when absent."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    error = data.get("error", data)
    kind = error.get("type") if isinstance(error, dict) else None
    kind = kind if isinstance(kind, str) else ""
    if isinstance(error, dict):
        for key in ("message", "detail", "error"):
            value = error.get(key)
            if isinstance(value, str) and value:
                return value, kind
    elif isinstance(error, str):
        return error, kind
    detail = data.get("detail")
    return (detail if isinstance(detail, str) else ""), kind


def from_status(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    what: str,
    retries: int,
    secret: str | None,
) -> APIError:
    """The error for an HTTP error response after ``retries`` retries."""
    message, kind = _api_error(body)
    message = redact(message, secret)[:_MAX_MESSAGE]
    # The API's own message often ends with a full stop; ours follows with the next sentence.
    said = f": {message.rstrip('. ')}" if message.rstrip(". ") else ""
    tried = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    details = _Facts(status_code=status, retry_after=retry_after_seconds(headers))
    if status == 403 and kind == _SONAR_RETIRED:
        return InvalidInput(
            f"This server no longer serves Sonar chat completions (HTTP 403 {kind}): Perplexity "
            "retired them on 2026-09-27 for the Agent API. Unset PERPLEXITY_API_STYLE or set it "
            "to agent (`%env PERPLEXITY_API_STYLE=agent` in a notebook, "
            "Settings(api_style='agent') in Python), then ask again; the old sonar model names "
            "still work there.",
            reason=kind,
            **details,
        )
    if status in (401, 403):
        return APIKeyInvalid(
            f"The API refused the API key (HTTP {status}){said}. {KEY_HELP}", **details
        )
    if status == 429:
        return APIQuotaExceeded(
            f"Rate limited by the API (HTTP 429){tried}{said}. Wait a minute before retrying, "
            "send fewer requests at once, or raise PERPLEXITY_MAX_RETRIES to wait it out.",
            **details,
        )
    if status >= 500:
        return APIServerError(
            f"The API failed on its side (HTTP {status}){tried}{said}. This is usually "
            "temporary: retry in a moment.",
            **details,
        )
    if status in (408, 409):
        return APIServerError(
            f"The API could not finish {what} (HTTP {status}){tried}{said}. Retry in a moment.",
            **details,
        )
    if status >= 400:
        fix = _FIXES.get(status, _CHECK_REQUEST)
        return InvalidInput(f"The API rejected {what} (HTTP {status}){said}. {fix}", **details)
    return NetworkError(
        f"Unexpected HTTP {status} redirect from {what}{said}. Check that PERPLEXITY_BASE_URL "
        "points at the Perplexity API or a compatible server (not a proxy or login page), then "
        "retry.",
        **details,
    )


def submission_unknown(
    what: str,
    cause: APIError | str,
    conversation_id: str | None = None,
    *,
    remote_id: str | None = None,
    unreadable: bool = False,
) -> SubmissionUnknown:
    """The error for a paid request that was sent and whose reply was lost or unreadable.

    ``cause``: the failure after sending (or a few words saying what happened);
    ``conversation_id``, when known, goes into the resubmit advice; ``remote_id``: the run
    the API named before its reply was lost (``cause`` names it too), the error's
    ``request_id``, so that the run can be read later; ``unreadable``: the reply arrived
    but could not be read (implied by such a ``cause``).
    """
    status = None
    if isinstance(cause, APIError):
        status = cause.status_code
        unreadable = unreadable or unread(cause)
        cause = unread_words(cause) or (
            f"HTTP {status}" if status is not None else (cause.reason or cause.code)
        )
    target = conversation_id or "CONVERSATION_ID"
    where = f" for conversation {conversation_id}" if conversation_id else ""
    lost = "could not be read" if unreadable else "was lost"
    return SubmissionUnknown(
        f"{what}{where} reached the API, but its reply {lost} ({cause}). The run may have "
        "started and may be billed, so pplx_nb does not send it again by itself. Check the "
        "usage page of your Perplexity account; to pay for a new run deliberately, resubmit "
        f"with `Researcher.retry({target!r})` (`%pplx_retry {target}` in a notebook).",
        what=what,
        cause=cause,
        status_code=status,
        conversation_id=conversation_id,
        request_id=remote_id,
    )


def unread_words(error: APIError, subject: str = "it") -> str:
    """A few words on a reply (``subject``) that could not be read, ``""`` for any other
    error: its size limit, or that it was not in the API's format."""
    if not unread(error):
        return ""
    limit = error.details.get("limit_bytes")
    if error.reason == TOO_LARGE and isinstance(limit, int):
        return (
            f"{subject} was over the {limit / 2**20:.3g} MiB limit, PPLX_NB_MAX_RESPONSE_MB, "
            "and was dropped unread"
        )
    return f"{subject} was not in the API's format"


def too_large(what: str, limit: int) -> APIServerError:
    """The error for a response body or stream over ``limit`` bytes (never retried)."""
    return APIServerError(
        f"{what} sent more than {limit / 2**20:.3g} MiB, the most pplx_nb reads from one response; "
        "the response was dropped unread. Check that PERPLEXITY_BASE_URL points at the "
        "Perplexity API or a compatible server, or raise PPLX_NB_MAX_RESPONSE_MB.",
        limit_bytes=limit,
        reason=TOO_LARGE,
    )
