"""RetryPolicy: which failures are retried, how long to wait, and the link to the settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from pplx_nb import Settings
from pplx_nb._errors import (
    APIError,
    APIKeyInvalid,
    APIServerError,
    APITimeoutError,
    InvalidInput,
    NetworkError,
)
from pplx_nb.api import AsyncClient, Request, RetryPolicy
from pplx_nb.api.retry import retry_after_seconds
from pplx_nb.sim import inject_faults, stats


def status_error(status: int, **details: object) -> APIError:
    return APIError(f"HTTP {status}", status_code=status, **details)


def test_retry_after_ms_wins_over_retry_after() -> None:
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    hint = retry_after_seconds({"retry-after": when})
    assert hint is not None and 28 <= hint <= 30


def test_unreadable_or_missing_hints_are_none() -> None:
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None


def test_a_hint_is_honoured_up_to_sixty_seconds_and_ignored_beyond() -> None:
    policy = RetryPolicy()
    assert policy.delay(status_error(429, retry_after=42.0), 0) == 42.0
    long_wait = policy.delay(status_error(429, retry_after=61.0), 0)
    assert long_wait <= policy.base


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(base=0.5, cap=8.0)
    error = status_error(503)
    for retries in range(8):
        ceiling = min(0.5 * 2**retries, 8.0)
        delays = {policy.delay(error, retries) for _ in range(50)}
        assert all(0.75 * ceiling <= d <= ceiling for d in delays)
        assert len(delays) > 1
    assert max(policy.delay(error, 20) for _ in range(50)) <= 8.0


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_until_the_limit(status: int) -> None:
    policy = RetryPolicy(max_retries=2)
    assert policy.should_retry(status_error(status), 0)
    assert policy.should_retry(status_error(status), 1)
    assert not policy.should_retry(status_error(status), 2)


@pytest.mark.parametrize(
    "error",
    [
        InvalidInput("bad", status_code=400),
        APIKeyInvalid("no", status_code=401),
        APIKeyInvalid("no", status_code=403),
        InvalidInput("unknown", status_code=404),
        APITimeoutError("slow"),
        APIServerError("a run failed"),
    ],
)
def test_client_errors_and_timeouts_are_not_retried(error: APIError) -> None:
    assert not RetryPolicy().should_retry(error, 0)


def test_a_connection_failure_is_retried() -> None:
    assert RetryPolicy().should_retry(NetworkError("refused"), 0)


@pytest.mark.anyio
@pytest.mark.sim_sonar
async def test_max_retries_from_settings_sets_the_default_policy(sim_url: str) -> None:
    settings = Settings(
        api_key="pplx-k-123456789",
        base_url=sim_url,
        api_style="sonar",
        offline=False,
        max_retries=2,
    )
    inject_faults(sim_url, {"status": 503, "retry_after_ms": 10, "times": 5})
    async with AsyncClient(settings) as client:
        assert client.retry.max_retries == 2
        with pytest.raises(APIServerError, match="after 2 retries"):
            await client.ask(
                Request(messages=[{"role": "user", "content": "Hi?"}], use_cache=False)
            )
    assert stats(sim_url)["requests"]["POST /chat/completions"] == 3
