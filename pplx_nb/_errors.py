"""The pplx_nb exception tree.

Every failure that reaches a user is a :class:`PplxError` with a stable ``code`` and a message that
says what to do next. Each class also derives from the builtin a user would naturally catch::

    PplxError (Exception)                      code
    ├── ValidationError (ValueError)           VALIDATION_ERROR
    ├── ConversationNotFound (KeyError)        CONVERSATION_NOT_FOUND
    ├── ConversationCorrupted (ValueError)     CONVERSATION_CORRUPTED
    ├── FilesystemError (OSError)              FILESYSTEM_ERROR
    │   └── StoreUnavailable (ConnectionError) FILESYSTEM_ERROR     Redis cannot be reached
    ├── JobInProgress (RuntimeError)           JOB_IN_PROGRESS
    ├── LeaseLost                              JOB_LEASE_EXPIRED    a job's worker lost its lease
    ├── CacheError                             CACHE_ERROR
    └── APIError                               (status_code, request_id)
        ├── APIKeyInvalid (PermissionError)    API_KEY_INVALID      401 / 403
        ├── APIQuotaExceeded                   API_QUOTA_EXCEEDED   429 after retries
        ├── APIServerError                     API_SERVER_ERROR     5xx after retries, failed runs
        │   └── RemoteRunFailed                API_SERVER_ERROR     a run that ended unanswered
        ├── InvalidInput (ValueError)          INVALID_INPUT        other 4xx from the API
        ├── APITimeoutError (TimeoutError)     TIMEOUT_ERROR
        │   └── RunTimedOut                    TIMEOUT_ERROR        a run past its deadline
        ├── NetworkError (ConnectionError)     NETWORK_ERROR        no connection, 3xx redirects
        └── SubmissionUnknown                  SUBMISSION_UNKNOWN   paid request sent, reply lost

Errors are picklable with their details (jobs carry them across processes) and never contain the
API key: :func:`redact` scrubs a message before it is stored.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar, cast
from urllib.parse import unquote_plus

if TYPE_CHECKING:
    from pplx_nb._models import Answer

__all__ = [
    "APIError",
    "APIKeyInvalid",
    "APIQuotaExceeded",
    "APIServerError",
    "APITimeoutError",
    "CacheError",
    "ConversationCorrupted",
    "ConversationNotFound",
    "FilesystemError",
    "InvalidInput",
    "JobInProgress",
    "LeaseLost",
    "NetworkError",
    "PplxError",
    "RemoteRunFailed",
    "RunTimedOut",
    "StoreUnavailable",
    "SubmissionUnknown",
    "ValidationError",
    "error_from_code",
    "not_unicode",
    "redact",
    "url_without_credentials",
]

_KEY_PATTERN = re.compile(r"pplx-[A-Za-z0-9_\-]{8,}")
_URL_START = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://")
_WHOLE_URL = re.compile(r"(?i)[a-z][a-z0-9+.\-]*://\S*")
_URL_END = re.compile(r"[\s'\"<>]")
_SECRET_NAME = re.compile(r"(?i)pass|pwd|secret|token|key|auth|cred")
_PREFIXED_PATTERNS = (
    # An Authorization header's value (after its scheme word), as text, JSON or a bytes repr.
    re.compile(r"(?i)(authorization['\"]?\s*[:=,]\s*(?:b?['\"])?(?:[a-z]+\s+)?)[^\s'\",)]+"),
    # A Bearer token has a digit: "Bearer authentication" in a question stays as it is.
    re.compile(r"(?i)(bearer\s+)(?=[A-Za-z0-9_\-\.~+/]*[0-9])[A-Za-z0-9_\-\.~+/]{8,}=*"),
)


def redact(text: str, *secrets: str | None) -> str:
    """Return ``text`` with secrets replaced by ``***``: the given ones and anything key-shaped.

    Key-shaped means a Perplexity key (``pplx-...``), a Bearer token, an Authorization header's
    value (Basic credentials included), or the ``user:password@`` of a URL.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _KEY_PATTERN.sub("***", text)
    for pattern in _PREFIXED_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return url_without_credentials(text)


def url_without_credentials(text: str) -> str:
    """``text`` with the secrets of every URL in it replaced by ``***``.

    A URL's ``user:password@`` becomes ``***@`` and the value of each query parameter whose name
    looks secret (``password``, ``ssl_password``, ``token``, ``api_key``, ``auth``...) becomes
    ``***``. When ``text`` is one URL and nothing else (a configured URL), its userinfo runs to
    the last ``@`` before the query, so a password holding an unencoded ``@`` or ``/`` is
    hidden whole, and a query part that is not ``name=value`` or a fragment is hidden too;
    inside other text a URL ends at a space or quote, and its userinfo at the last ``@``
    before its path, as URL parsers read it.
    """
    if _WHOLE_URL.fullmatch(text):
        return _url_shown(text, whole=True)
    parts: list[str] = []
    done = 0
    for found in _URL_START.finditer(text):
        if found.start() < done:
            continue
        end = _URL_END.search(text, found.end())
        stop = len(text) if end is None else end.start()
        parts += [text[done : found.start()], _url_shown(text[found.start() : stop], whole=False)]
        done = stop
    parts.append(text[done:])
    return "".join(parts)


def _url_shown(url: str, *, whole: bool) -> str:
    """One URL without its userinfo and secret query values (see url_without_credentials)."""
    scheme, _, rest = url.partition("://")
    before_query, mark, query = rest.partition("?")
    authority = before_query if whole else re.split(r"[/#]", before_query, maxsplit=1)[0]
    userinfo, at, _ = authority.rpartition("@")
    place = before_query[len(userinfo) + len(at) :]
    shown = f"{scheme}://" + ("***@" if at else "") + place
    if not mark:
        return shown
    query, hash_mark, fragment = query.partition("#")
    params = [_param_shown(param, whole) for param in re.split(r"([&;])", query)]
    return shown + "?" + "".join(params) + hash_mark + ("***" if whole and fragment else fragment)


def _param_shown(param: str, whole: bool) -> str:
    name, equals, value = param.partition("=")
    if equals and value and _SECRET_NAME.search(unquote_plus(name)):
        return f"{name}=***"
    if whole and not equals and param not in ("", "&", ";"):
        return "***"
    return param


class PplxError(Exception):
    """Base of every pplx_nb error: a stable ``code`` and a message saying what to do next."""

    code: ClassVar[str] = "PPLX_ERROR"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def to_dict(self) -> dict[str, str]:
        """The ``{code, message}`` shape stored in status.json and returned to MCP clients."""
        return {"code": self.code, "message": self.message}


def _rebuild(cls: type[PplxError], message: str, details: dict[str, Any]) -> PplxError:
    return cls(message, **details)


class ValidationError(PplxError, ValueError):
    """Input that pplx_nb refuses before doing any work (bad id, empty query, bad option)."""

    code = "VALIDATION_ERROR"


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

    def __init__(self, message: str, **details: Any) -> None:
        PplxError.__init__(self, message, **details)

    def __str__(self) -> str:
        return self.message

    @property
    def answer(self) -> Answer | None:
        """The paid answer the store could not take, or ``None`` when nothing was paid."""
        return cast("Answer | None", self.details.get("answer"))


class StoreUnavailable(FilesystemError, ConnectionError):
    """The store's server (Redis, PPLX_NB_STORE) could not be reached or answered with an error.

    Its message names the URL without credentials. Like any FILESYSTEM_ERROR it comes before a
    paid request where it can: nothing is sent that could not be stored.
    """

    def __init__(self, message: str, **details: Any) -> None:
        PplxError.__init__(self, message, **details)


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


class APIError(PplxError):
    """A failure talking to the Perplexity API (or the simulator); carries ``status_code``."""

    code = "API_ERROR"

    @property
    def status_code(self) -> int | None:
        """The HTTP status of the failed response, when there was one."""
        value = self.details.get("status_code")
        return int(value) if value is not None else None


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
        APIError,
        APIKeyInvalid,
        APIQuotaExceeded,
        APIServerError,
        InvalidInput,
        APITimeoutError,
        NetworkError,
        SubmissionUnknown,
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
