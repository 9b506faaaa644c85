"""The error tree: stable codes, builtin bases, picklable with details, no secret in the text."""

from __future__ import annotations

import pickle

import pytest

from pplx_nb import _errors as errors

CODES = {
    errors.ValidationError: ("VALIDATION_ERROR", ValueError),
    errors.ConversationNotFound: ("CONVERSATION_NOT_FOUND", KeyError),
    errors.ConversationCorrupted: ("CONVERSATION_CORRUPTED", ValueError),
    errors.FilesystemError: ("FILESYSTEM_ERROR", OSError),
    errors.JobInProgress: ("JOB_IN_PROGRESS", RuntimeError),
    errors.LeaseLost: ("JOB_LEASE_EXPIRED", errors.PplxError),
    errors.CacheError: ("CACHE_ERROR", errors.PplxError),
    errors.APIKeyInvalid: ("API_KEY_INVALID", PermissionError),
    errors.APIQuotaExceeded: ("API_QUOTA_EXCEEDED", errors.APIError),
    errors.APIServerError: ("API_SERVER_ERROR", errors.APIError),
    errors.InvalidInput: ("INVALID_INPUT", ValueError),
    errors.APITimeoutError: ("TIMEOUT_ERROR", TimeoutError),
    errors.NetworkError: ("NETWORK_ERROR", ConnectionError),
}


@pytest.mark.parametrize("cls", list(CODES))
def test_each_error_has_its_code_and_builtin_base(cls: type[errors.PplxError]) -> None:
    code, base = CODES[cls]
    exc = cls("What went wrong. What to do next.", status_code=429, path="/x")
    assert exc.code == code
    assert isinstance(exc, errors.PplxError)
    assert isinstance(exc, base)
    assert str(exc) == "What went wrong. What to do next."
    assert code in repr(exc)


@pytest.mark.parametrize("cls", list(CODES))
def test_errors_survive_pickling_with_details(cls: type[errors.PplxError]) -> None:
    exc = cls("message", path="/x", attempt=2)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is cls
    assert copy.message == "message"
    assert copy.details == {"path": "/x", "attempt": 2}


API_CLASSES = [c for c in CODES if issubclass(c, errors.APIError)] + [
    errors.RemoteRunFailed,
    errors.RunTimedOut,
    errors.SubmissionUnknown,
]


@pytest.mark.parametrize("cls", API_CLASSES)
def test_api_error_facts_are_typed_attributes_that_survive_pickling(
    cls: type[errors.APIError],
) -> None:
    exc = cls(
        "message", status_code=429, retry_after=2.5, reason="idle", request_id="run-1", attempt=2
    )
    for copy in (exc, pickle.loads(pickle.dumps(exc))):
        assert type(copy) is cls
        assert (copy.status_code, copy.retry_after, copy.reason, copy.request_id) == (
            429,
            2.5,
            "idle",
            "run-1",
        )
        assert copy.details == {"attempt": 2}


def test_api_error_facts_default_to_none_and_keep_out_of_details() -> None:
    exc = errors.NetworkError("message")
    assert (exc.status_code, exc.retry_after, exc.reason, exc.request_id) == (None,) * 4
    assert exc.details == {}
    assert pickle.loads(pickle.dumps(exc)).details == {}


def test_stored_errors_are_rebuilt_by_code() -> None:
    exc = errors.error_from_code("API_QUOTA_EXCEEDED", "slow down")
    assert isinstance(exc, errors.APIQuotaExceeded)
    assert type(errors.error_from_code("SOMETHING_NEW", "x")) is errors.PplxError


def test_api_errors_expose_the_http_status() -> None:
    assert errors.APIServerError("x", status_code="502").status_code == 502
    assert errors.NetworkError("x").status_code is None


def test_redact_removes_given_and_key_shaped_secrets() -> None:
    text = (
        "sent Authorization: Bearer abcdefghijklmnop with pplx-1234567890abcdef and custom-secret"
    )
    cleaned = errors.redact(text, "custom-secret")
    assert "abcdefghijklmnop" not in cleaned
    assert "pplx-1234567890abcdef" not in cleaned
    assert "custom-secret" not in cleaned


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://h:6379/3?password=TopSecret99", "redis://h:6379/3?password=***"),
        ("redis://bob:Top@Secret99@h:6379/4", "redis://***@h:6379/4"),
        ("redis://:ab/cd@h/0", "redis://***@h/0"),
        ("redis://h/0?username=u&password=Top@Secret99", "redis://h/0?username=u&password=***"),
        ("redis://h/0?TopSecret99#TopSecret99", "redis://h/0?***#***"),
        ("rediss://h/0?ssl_password=TopSecret99&db=2", "rediss://h/0?ssl_password=***&db=2"),
        (
            "unix:///run/r.sock?db=3&pass%77ord=TopSecret99",
            "unix:///run/r.sock?db=3&pass%77ord=***",
        ),
        ("https://u:TopSecret99@proxy/v1?api_key=TopSecret99", "https://***@proxy/v1?api_key=***"),
        ("at 'redis://:p@TopSecret99@h/0' now", "at 'redis://***@h/0' now"),
        ("see https://medium.com/@someone/post", "see https://medium.com/@someone/post"),
    ],
)
def test_urls_are_shown_without_any_password_whatever_its_form(text: str, shown: str) -> None:
    assert errors.url_without_credentials(text) == shown
    assert errors.redact(text) == shown
