"""The Redis plumbing every team backend shares: errors that name the URL, and the lock."""

from __future__ import annotations

import pickle
import time

import pytest

from pplx_nb._errors import FilesystemError, StoreUnavailable
from pplx_nb._redis import RedisLock, client, redis_errors

DOWN = "redis://user:hunter2secret@127.0.0.1:1/0"


def test_the_lock_is_held_by_one_token_and_expires_when_its_holder_dies(redis_url: str) -> None:
    first = RedisLock(redis_url, "pplx_nb:test:lock", ttl=1.0, timeout=0.3)
    second = RedisLock(redis_url, "pplx_nb:test:lock", ttl=1.0, timeout=0.3)
    with first:
        with pytest.raises(StoreUnavailable, match="pplx_nb:test:lock"):
            second.acquire()
        assert first.extend()
    second.acquire()
    assert not first.extend()
    first.release()  # not its lock any more: the holder keeps it
    assert client(redis_url).get("pplx_nb:test:lock") is not None
    second.release()
    abandoned = RedisLock(redis_url, "pplx_nb:test:lock", ttl=0.2, timeout=5)
    abandoned.acquire()
    started = time.monotonic()
    with RedisLock(redis_url, "pplx_nb:test:lock", timeout=5):
        assert time.monotonic() - started < 4


def test_an_unreachable_store_is_a_clear_error_within_seconds_without_credentials() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught, redis_errors(DOWN):
        client(DOWN).ping()
    assert time.monotonic() - started < 5
    error = caught.value
    assert isinstance(error, FilesystemError) and isinstance(error, ConnectionError)
    assert error.code == "FILESYSTEM_ERROR"
    assert "127.0.0.1:1" in str(error) and "PPLX_NB_STORE" in str(error)
    for text in (str(error), repr(error), repr(pickle.loads(pickle.dumps(error)).details)):
        assert "hunter2secret" not in text
