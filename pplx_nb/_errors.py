"""The pplx_nb exception tree.

Every failure that reaches a user is a :class:`PplxError` with a stable ``code`` and a message that
says what to do next. Each class also derives from the builtin a user would naturally catch::

    PplxError (Exception)                      code
    ├── ValidationError (ValueError)           VALIDATION_ERROR     (wordings)
    ├── ConversationNotFound (KeyError)        CONVERSATION_NOT_FOUND
    ├── ConversationCorrupted (ValueError)     CONVERSATION_CORRUPTED
    ├── FilesystemError (OSError)              FILESYSTEM_ERROR
    │   └── StoreUnavailable (ConnectionError) FILESYSTEM_ERROR     Redis cannot be reached
    ├── JobInProgress (RuntimeError)           JOB_IN_PROGRESS
    ├── LeaseLost                              JOB_LEASE_EXPIRED    a job's worker lost its lease
    ├── CacheError                             CACHE_ERROR
    ├── MissingExtra (ImportError)             MISSING_EXTRA        an extra is not installed
    ├── BudgetExceeded                         BUDGET_EXCEEDED      over a PPLX_NB_BUDGET cap
    └── APIError                               (status_code, retry_after, reason, request_id)
        ├── APIKeyInvalid (PermissionError)    API_KEY_INVALID      401 / 403
        ├── APIQuotaExceeded                   API_QUOTA_EXCEEDED   429 after retries
        ├── APIServerError                     API_SERVER_ERROR     5xx after retries, failed runs
        │   └── RemoteRunFailed                API_SERVER_ERROR     a run that ended unanswered
        │       └── RunRequiresAction          RUN_REQUIRES_ACTION  a run waiting for an action
        ├── InvalidInput (ValueError)          INVALID_INPUT        other 4xx from the API
        ├── APITimeoutError (TimeoutError)     TIMEOUT_ERROR
        │   └── RunTimedOut                    TIMEOUT_ERROR        a run past its deadline
        ├── NetworkError (ConnectionError)     NETWORK_ERROR        no connection, 3xx redirects
        └── SubmissionUnknown                  SUBMISSION_UNKNOWN   paid request sent, reply lost

:class:`APIError` carries what a caller decides on as typed attributes (``status_code``,
``retry_after``, ``reason``, ``request_id``), as :class:`ValidationError` does its ``wordings``;
``details`` holds other context. Errors are picklable with both (jobs carry them across
processes) and never contain the API key: each message, and each text attribute or detail, is
redacted (:mod:`pplx_nb._redact`) as the error is made, so a server that echoes the key back shows
it nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pplx_nb._redact import redact, url_without_credentials

if TYPE_CHECKING:
    from datetime import datetime

    from pplx_nb._models import Answer, Cost, Usage

__all__ = [
    "APIError",
    "APIKeyInvalid",
    "APIQuotaExceeded",
    "APIServerError",
    "APITimeoutError",
    "BudgetExceeded",
    "CacheError",
    "ConversationCorrupted",
    "ConversationNotFound",
    "FilesystemError",
    "InvalidInput",
    "JobInProgress",
    "LeaseLost",
    "MissingExtra",
    "NetworkError",
    "PplxError",
    "RemoteRunFailed",
    "RunRequiresAction",
    "RunTimedOut",
    "StoreUnavailable",
    "SubmissionUnknown",
    "ValidationError",
    "error_from_code",
    "not_unicode",
    "redact",
    "url_without_credentials",
]


class PplxError(Exception):
    """Base of every pplx_nb error: a stable ``code`` and a message saying what to do next."""

    code: ClassVar[str] = "PPLX_ERROR"

    def __init__(self, message: str, **details: Any) -> None:
        message = redact(message)
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = {
            name: redact(value) if isinstance(value, str) else value
            for name, value in details.items()
        }

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, {**self.details, **self._facts()}))

    def _facts(self) -> dict[str, Any]:
        """The typed attributes a subclass adds, as its constructor takes them (for pickling)."""
        return {}

    def to_dict(self) -> dict[str, str]:
        """The ``{code, message}`` shape stored in status.json and returned to MCP clients."""
        return {"code": self.code, "message": self.message}


def _rebuild(cls: type[PplxError], message: str, arguments: dict[str, Any]) -> PplxError:
    return cls(message, **arguments)


class ValidationError(PplxError, ValueError):
    """Input that pplx_nb refuses before doing any work (bad id, empty query, bad option).

    An option's error has ``wordings``: its message in each surface's names for the options
    (``python``, ``mcp``, ``notebook``; see :mod:`pplx_nb._option_names`), empty otherwise.
    """

    code = "VALIDATION_ERROR"

    def __init__(
        self, message: str, *, wordings: Mapping[str, str] | None = None, **details: Any
    ) -> None:
        super().__init__(message, **details)
        self.wordings: dict[str, str] = {
            surface: redact(text) for surface, text in (wordings or {}).items()
        }

    def _facts(self) -> dict[str, Any]:
        return {"wordings": self.wordings} if self.wordings else {}


class ConversationNotFound(PplxError, KeyError):
    """No conversation with that id exists in the store."""

    code = "CONVERSATION_NOT_FOUND"


class ConversationCorrupted(PplxError, ValueError):
    """A conversation file exists but cannot be parsed or does not match the schema."""

    code = "CONVERSATION_CORRUPTED"


class FilesystemError(PplxError, OSError):
    """Reading or writing the store failed (permissions, disk full...); names path and reason.

    When it failed after an answer was paid for, :attr:`answer` holds that answer (also kept
    on disk outside the store until it can be stored without paying again).
    """

    code = "FILESYSTEM_ERROR"

    def __init__(self, message: str, *, answer: Answer | None = None, **details: Any) -> None:
        PplxError.__init__(self, message, **details)
        self.answer = answer
        """The paid answer the store could not take, or ``None`` when nothing was paid."""

    def __str__(self) -> str:
        return self.message

    def _facts(self) -> dict[str, Any]:
        return {"answer": self.answer} if self.answer is not None else {}


class StoreUnavailable(FilesystemError, ConnectionError):
    """The store's server (Redis, PPLX_NB_STORE) could not be reached or answered with an error.

    Its message names the URL without credentials. Like any FILESYSTEM_ERROR it comes before a
    paid request where it can: nothing is sent that could not be stored.
    """

    def __init__(self, message: str, *, answer: Answer | None = None, **details: Any) -> None:
        FilesystemError.__init__(self, message, answer=answer, **details)


class JobInProgress(PplxError, RuntimeError):
    """A follow-up was asked while the conversation's research job is still pending or running."""

    code = "JOB_IN_PROGRESS"


class LeaseLost(PplxError):
    """A job's attempt lost its worker: the lease expired (the worker stopped heartbeating).

    The worker that lost it gets this error instead of writing (its job was requeued, cancelled or
    already answered), so a worker that stalled and came back cannot complete, fail or report on
    a job another worker now runs; a job whose last attempt ended this way fails with this code.
    """

    code = "JOB_LEASE_EXPIRED"


class CacheError(PplxError):
    """The response cache could not store or return an entry."""

    code = "CACHE_ERROR"


class MissingExtra(PplxError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the
    ``pip install`` line of the extra that brings it (see :mod:`pplx_nb._extras`)."""

    code = "MISSING_EXTRA"


class BudgetExceeded(PplxError):
    """A request that would pass a ``PPLX_NB_BUDGET`` cap: refused, nothing sent or stored.

    ``cap`` (USD) is the cap of ``period`` (``"request"``, ``"day"`` or ``"month"``) it would
    pass; ``spent`` what that period had spent and reserved before it; ``estimate`` what the
    request would reserve (its worst case); ``resets_at`` when the period starts again (UTC;
    ``None`` for the per-request cap). One rebuilt from a stored ``{code, message}`` (a job's
    status) has the figures in its message only.
    """

    code = "BUDGET_EXCEEDED"

    def __init__(
        self,
        message: str,
        *,
        cap: float = 0.0,
        period: str = "request",
        spent: float = 0.0,
        estimate: float = 0.0,
        resets_at: datetime | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, **details)
        self.cap = cap
        self.period = period
        self.spent = spent
        self.estimate = estimate
        self.resets_at = resets_at

    def _facts(self) -> dict[str, Any]:
        return {
            "cap": self.cap,
            "period": self.period,
            "spent": self.spent,
            "estimate": self.estimate,
            "resets_at": self.resets_at,
        }


class APIError(PplxError):
    """A failure talking to the Perplexity API (or the simulator).

    What a caller decides on is an attribute, ``None`` when unknown: ``status_code`` (the HTTP
    status of the failed response), ``retry_after`` (the seconds the server asked to wait),
    ``reason`` (what failed when no response came: the transport error's name, ``"deadline"``,
    ``"idle"``, or the API's error type) and ``request_id`` (the run it is about). ``details``
    holds any other context.
    """

    code = "API_ERROR"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | str | None = None,
        retry_after: float | None = None,
        reason: str | None = None,
        request_id: str | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, **details)
        self.status_code: int | None = int(status_code) if status_code is not None else None
        self.retry_after = retry_after
        self.reason = redact(reason) if reason is not None else None
        self.request_id = redact(request_id) if request_id is not None else None

    def _facts(self) -> dict[str, Any]:
        facts = {
            "status_code": self.status_code,
            "retry_after": self.retry_after,
            "reason": self.reason,
            "request_id": self.request_id,
        }
        return {name: value for name, value in facts.items() if value is not None}


class APIKeyInvalid(APIError, PermissionError):
    """The API refused the key (401/403)."""

    code = "API_KEY_INVALID"


class APIQuotaExceeded(APIError):
    """Rate limited (429) even after the retries."""

    code = "API_QUOTA_EXCEEDED"


class APIServerError(APIError):
    """The API failed on its side (5xx after retries, or a run that ended ``failed``)."""

    code = "API_SERVER_ERROR"


class RemoteRunFailed(APIServerError):
    """A run ended ``failed``, ``cancelled`` or incomplete without an answer (``request_id``).

    Polling it again cannot help: a retry must submit a new run.
    """


class RunRequiresAction(RemoteRunFailed):
    """A run stopped ``requires_action``: it waits for something pplx_nb does not give (a
    tool call's approval, a function's output), so it is not waited for.

    ``cost`` and ``usage`` are what the run reported doing up to then (``None`` when it did
    not say): it is billed for that work, and the question's closing turn records it.
    """

    code = "RUN_REQUIRES_ACTION"

    def __init__(
        self,
        message: str,
        *,
        cost: Cost | None = None,
        usage: Usage | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, **details)
        self.cost = cost
        self.usage = usage

    def _facts(self) -> dict[str, Any]:
        facts = {**super()._facts(), "cost": self.cost, "usage": self.usage}
        return {name: value for name, value in facts.items() if value is not None}


class InvalidInput(APIError, ValueError):
    """The API rejected the request (400, 404 unknown id, 413 too large, any other 4xx)."""

    code = "INVALID_INPUT"


class APITimeoutError(APIError, TimeoutError):
    """No answer within the configured timeout."""

    code = "TIMEOUT_ERROR"


class NetworkError(APIError, ConnectionError):
    """The connection failed or broke (a stream cut off midway, an unreadable body, a 3xx)."""

    code = "NETWORK_ERROR"


class RunTimedOut(APITimeoutError):
    """A run still unfinished at its deadline (PERPLEXITY_DEEP_RESEARCH_TIMEOUT); cancelled.

    Final: running it again would wait as long again, so a job that raises it is not retried.
    """


class SubmissionUnknown(APIError):
    """A paid request (deep research) reached the API but its reply was lost.

    The run may have started and may be billed, so it is never sent again automatically; the
    message says how to resubmit deliberately.
    """

    code = "SUBMISSION_UNKNOWN"


_BY_CODE: dict[str, type[PplxError]] = {
    cls.code: cls
    for cls in (
        PplxError,
        ValidationError,
        ConversationNotFound,
        ConversationCorrupted,
        FilesystemError,
        JobInProgress,
        LeaseLost,
        CacheError,
        MissingExtra,
        BudgetExceeded,
        APIError,
        APIKeyInvalid,
        APIQuotaExceeded,
        APIServerError,
        InvalidInput,
        APITimeoutError,
        NetworkError,
        SubmissionUnknown,
        RunRequiresAction,
    )
}


def error_from_code(code: str, message: str, **details: Any) -> PplxError:
    """Rebuild the error class for a stored ``{code, message}`` (unknown codes give PplxError)."""
    return _BY_CODE.get(code, PplxError)(message, **details)


def not_unicode(what: str, at: int | None = None) -> ValidationError:
    """The VALIDATION_ERROR for ``what`` holding a lone surrogate (at character ``at``)."""
    where = "" if at is None else f" at character {at}"
    return ValidationError(
        f"{what} holds a lone surrogate{where}, which is not valid Unicode text and cannot be "
        "sent or stored. Remove it: it usually comes from an emoji cut in half or a broken "
        "copy and paste.",
    )
