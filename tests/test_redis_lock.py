"""The Redis plumbing every team backend shares: errors that name the URL, and the lock."""

from __future__ import annotations

import logging
import pickle
import time

import pytest
from support.redis_server import RedisServer

from pplx_nb import Settings
from pplx_nb._errors import FilesystemError, StoreUnavailable, ValidationError
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


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?foo=bar&password=TopSecret99",
        "redis://127.0.0.1:1/0?socket_timeout=abc",
        "REDIS://127.0.0.1:1/1/2",
    ],
)
def test_a_url_redis_cannot_read_is_a_validation_error_not_a_redis_py_exception(url: str) -> None:
    with pytest.raises(ValidationError, match="PPLX_NB_STORE") as caught:
        client(url)
    assert caught.value.code == "VALIDATION_ERROR"
    assert "TopSecret99" not in str(caught.value)


def test_the_database_of_the_url_is_the_one_written_whether_in_path_or_query(
    redis_server: RedisServer,
) -> None:
    for given, db in (("/9?db=9", 9), ("?db=10", 10), ("/11", 11), ("", 0)):
        redis_server.flush(db)
        url = Settings(store_url=f"redis://127.0.0.1:{redis_server.port}{given}").store_url
        assert url is not None
        client(url).set("pplx_nb:test:db", given)
        assert client(redis_server.url(db)).get("pplx_nb:test:db") == given.encode()


@pytest.mark.parametrize("left", ["string without expiry", "hash"])
def test_a_lock_key_no_holder_can_have_left_is_taken_over_at_once_with_a_warning(
    redis_url: str, left: str, caplog: pytest.LogCaptureFixture
) -> None:
    key = "pplx_nb:test:lock"
    if left == "hash":
        client(redis_url).hset(key, "x", "y")
    else:
        client(redis_url).set(key, "left by a tool")
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="pplx_nb.store"),
        RedisLock(redis_url, key, ttl=5.0, timeout=3.0) as lock,
    ):
        assert client(redis_url).get(key) == (lock.token or "").encode()
        assert 0 < client(redis_url).pttl(key) <= 5000
    assert time.monotonic() - started < 1
    assert client(redis_url).exists(key) == 0
    assert key in caplog.text and "taken over" in caplog.text
