"""Redis for the team backends: one client per URL and process, errors as PplxError, a lock.

Every backend that keeps state in Redis (conversations, job statuses and the queue, the shared
rate limit) connects through :func:`client` and wraps its calls in :func:`redis_errors`, so an
unreachable server is a :class:`~pplx_nb._errors.StoreUnavailable` naming the URL (without its
credentials) within seconds, never a hang or a redis-py traceback. :class:`RedisLock` is the
conversation lock both the store and the job side take (``SET NX PX`` with a token, released
and extended only by its holder; a key there that no holder of ours can have left, one without
an expiry or not a string, is taken over with a warning).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from pplx_nb._errors import StoreUnavailable, ValidationError, redact, url_without_credentials
from pplx_nb._extras import require
from pplx_nb._logging import get_logger
from pplx_nb._store_url import check_store_url

if TYPE_CHECKING:
    import redis
    import redis.connection

__all__ = [
    "CONNECT_SECONDS",
    "KEY_PREFIX",
    "HeldLocks",
    "RedisLock",
    "Scripts",
    "client",
    "command",
    "hash_reply",
    "redis_errors",
    "run_script",
]

KEY_PREFIX = "pplx_nb"
"""Every key pplx_nb writes starts with ``pplx_nb:``, so one Redis database can hold other data."""

CONNECT_SECONDS = 3.0
"""How long connecting may take before the store is called unreachable."""

logger = get_logger("pplx_nb.store")

_READ_SECONDS = 10.0
_FEATURE = "PPLX_NB_STORE=redis://…"
_clients: dict[tuple[int, str], redis.Redis] = {}
_clients_lock = threading.Lock()


def client(url: str) -> redis.Redis:
    """The client for ``url`` in this process (created on first use; sockets time out).

    A URL :func:`~pplx_nb._store_url.check_store_url` refuses, or that redis-py cannot read, is a
    VALIDATION_ERROR naming PPLX_NB_STORE (never a TypeError or ValueError from redis-py).
    """
    require("redis", _FEATURE)
    import redis

    key = (os.getpid(), url)
    with _clients_lock:
        found = _clients.get(key)
        if found is None:
            try:
                checked = check_store_url(url)
            except ValueError as exc:
                raise ValidationError(str(exc)) from None
            with redis_errors(url, "connect to"):
                try:
                    found = redis.Redis.from_url(
                        checked,
                        socket_connect_timeout=CONNECT_SECONDS,
                        socket_timeout=_READ_SECONDS,
                        health_check_interval=30,
                    )
                except (TypeError, ValueError) as exc:
                    shown = url_without_credentials(url)
                    raise ValidationError(
                        f"PPLX_NB_STORE {shown!r} cannot be used ({redact(str(exc), url)}). "
                        "Correct it, such as redis://localhost:6379/0, or unset it to keep "
                        "conversations as files."
                    ) from None
            _clients[key] = found
        return found


@contextlib.contextmanager
def redis_errors(url: str, doing: str = "use") -> Iterator[None]:
    """Turn redis-py's errors inside the block into :class:`StoreUnavailable` naming ``url``."""
    require("redis", _FEATURE)
    import redis

    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        shown = url_without_credentials(url)
        raise StoreUnavailable(
            f"Could not {doing} the Redis store at {shown} ({redact(str(exc), url)}). Check that "
            "Redis is running there and reachable from this machine, or unset PPLX_NB_STORE to "
            "keep conversations as files.",
            url=shown,
        ) from None
    except redis.RedisError as exc:
        shown = url_without_credentials(url)
        raise StoreUnavailable(
            f"The Redis store at {shown} refused a command ({redact(str(exc), url)}). Check its "
            "configuration (authentication, read-only replica, memory limit).",
            url=shown,
        ) from None


class _Held:
    """One thread's own connections by URL (see :func:`command`), made in process ``pid``."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.connections: dict[str, redis.connection.AbstractConnection] = {}

    def __del__(self) -> None:
        # Its thread ended (or the process forked): close the sockets now rather than whenever
        # the garbage collector gets to the connections (redis-py's objects hold cycles).
        for connection in self.connections.values():
            with contextlib.suppress(Exception):
                connection.disconnect()  # type: ignore[no-untyped-call]


_OWN = threading.local()


def command(url: str, *args: Any) -> Any:
    """The raw reply of one command sent on this thread's own connection to ``url``.

    The hot path of the queue and the store. redis-py's client checks a connection out of its
    pool, times and records the call and looks up a reply callback for every command: on
    loopback that cost more than the round trip itself (about 100 µs of 160 per script call).
    A connection per thread needs none of it. It is made as the client's pool makes its own
    (same options, timeouts and retries), checked before each command as the pool checks one
    it hands out (closed by the server, it connects again), and closed when its thread ends.
    An error reply raises redis-py's error. Only for commands whose reply the client would not
    reshape (scripts, ``GET``, ``EXISTS``).
    """
    held: _Held | None = getattr(_OWN, "held", None)
    if held is None or held.pid != os.getpid():  # forked: the parent's sockets are not ours
        held = _OWN.held = _Held()
    connection = held.connections.get(url)
    if connection is None:
        pool = client(url).connection_pool
        connection = held.connections[url] = pool.connection_class(**pool.connection_kwargs)
    return connection.retry.call_with_retry(
        partial(_send, connection, args), lambda _error: connection.disconnect()
    )


def _send(connection: redis.connection.AbstractConnection, args: tuple[Any, ...]) -> Any:
    import redis

    connection.connect()  # type: ignore[no-untyped-call]  # once, or again after an error
    try:
        stale = connection.can_read()  # the server closed it, or an unread reply
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        stale = True
    if stale:
        connection.disconnect()  # type: ignore[no-untyped-call]
    connection.send_command(*args)  # type: ignore[no-untyped-call]
    return connection.read_response()


_DIGESTS: dict[str, str] = {}


def run_script(url: str, source: str, keys: list[str], args: list[Any]) -> Any:
    """The reply of the Lua script ``source`` run with ``keys`` and ``args``: sent by its digest
    (``EVALSHA``), loaded first if the server does not know it yet."""
    import redis

    digest = _DIGESTS.get(source)
    if digest is None:
        digest = _DIGESTS[source] = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
    try:
        return command(url, "EVALSHA", digest, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        command(url, "SCRIPT", "LOAD", source)
        return command(url, "EVALSHA", digest, len(keys), *keys, *args)


class Scripts:
    """Lua scripts run on ``url`` through :func:`run_script` (for a backend that keeps its URL
    beside them)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def run(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """The reply of ``source`` run with ``keys`` and ``args``."""
        return run_script(self.url, source, keys, args)


_ACQUIRE = """
local taken = 0
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  taken = 1
elseif redis.call('type', KEYS[1]).ok ~= 'string' or redis.call('pttl', KEYS[1]) == -1 then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  taken = 2
end
if taken == 0 or #KEYS == 1 then return {taken} end
if #KEYS == 2 then return {taken, redis.call('exists', KEYS[2])} end
local hash, list = redis.call('type', KEYS[2]).ok, redis.call('type', KEYS[3]).ok
if (hash ~= 'hash' and hash ~= 'none') or (list ~= 'list' and list ~= 'none') then
  return {taken}
end
return {taken, redis.call('hgetall', KEYS[2]), redis.call('lrange', KEYS[3], 0, -1)}
"""
"""Take the lock ``KEYS[1]`` for the token ``ARGV[1]`` for ``ARGV[2]`` ms: 1 taken, 0 held by
another, 2 taken over from a key no live holder can have left (every lock of ours carries an
expiry, so one without, or a key of another type, would block every writer forever). Once taken,
the hash ``KEYS[2]`` and the list ``KEYS[3]`` when given (a conversation's meta and messages)
are read in the same round trip, unless either holds another type of value; with ``KEYS[2]``
alone, whether it exists."""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""
_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""


class RedisLock:
    """A lock on one Redis key held by one token: not re-entrant, expires if its holder dies.

    Args:
        url: the store's URL (for errors).
        key: the lock's key.
        ttl: seconds the lock lives without :meth:`extend` (a holder that died frees it then).
        timeout: seconds :meth:`acquire` waits before a FILESYSTEM_ERROR naming the key.
    """

    def __init__(self, url: str, key: str, *, ttl: float = 30.0, timeout: float = 30.0) -> None:
        self.url = url
        self.key = key
        self.ttl = ttl
        self.timeout = timeout
        self.token: str | None = None
        self.read: tuple[dict[bytes, bytes], list[bytes]] | None = None
        """What :meth:`acquire` read with the lock: the hash as a dict and the list."""
        self.found: bool | None = None
        """Whether the one key :meth:`acquire` was given to look at exists."""

    def acquire(self, *read: str) -> None:
        """Take the lock, waiting up to ``timeout`` seconds; with ``read`` (a hash's key and a
        list's), read both in the same round trip (:attr:`read`); with one key, whether it
        exists (:attr:`found`)."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + self.timeout
        pause = 0.002
        with redis_errors(self.url, "lock a conversation in"):
            keys, ttl = [self.key, *read], self._ttl_ms
            while not (found := run_script(self.url, _ACQUIRE, keys, [token, ttl]))[0]:
                if time.monotonic() >= deadline:
                    raise StoreUnavailable(
                        f"Another process has held the lock {self.key} in the Redis store at "
                        f"{url_without_credentials(self.url)} for over {self.timeout:g} s. Try "
                        "again in a minute; it expires on its own if that process died.",
                        url=url_without_credentials(self.url),
                    )
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        if found[0] == 2:
            logger.warning(
                "The lock %s in the Redis store at %s had no expiry or was not a lock, so no "
                "pplx_nb process held it (something else wrote it): taken over",
                self.key,
                url_without_credentials(self.url),
            )
        self.token = token
        self.read = None if len(found) < 3 else (hash_reply(found[1]), list(found[2]))
        self.found = bool(found[1]) if len(found) == 2 else None

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    def extend(self) -> bool:
        """Push the expiry ``ttl`` ahead; False if the lock is no longer this holder's."""
        if self.token is None:
            return False
        with redis_errors(self.url, "extend a lock in"):
            return bool(run_script(self.url, _EXTEND, [self.key], [self.token, self._ttl_ms]))

    def release(self) -> None:
        """Let go (only if still held by this token; an expired lock is left to its new holder)."""
        token, self.token = self.token, None
        if token is not None:
            with redis_errors(self.url, "unlock a conversation in"):
                run_script(self.url, _RELEASE, [self.key], [token])

    def __enter__(self) -> RedisLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class HeldLocks:
    """Conversation locks taken through one backend, their tokens seen by every backend.

    A write made under a lock passes :meth:`token` to its script, which checks that the lock key
    still holds it, so a holder paused past the lock's expiry writes nothing. The token is this
    thread's whichever backend took the lock (the job side holding the store's key, or the
    reverse), so both sides' writes are fenced.

    Args:
        url: the store's URL.
        ttl: seconds a lock lives if its holder dies.
        timeout: seconds taking a lock may wait before a FILESYSTEM_ERROR.
    """

    def __init__(self, url: str, *, ttl: float = 30.0, timeout: float = 30.0) -> None:
        self.url = url
        self.ttl = ttl
        self.timeout = timeout

    @contextlib.contextmanager
    def hold(self, key: str, *read: str) -> Iterator[RedisLock]:
        """Hold the lock ``key`` for the block (``read`` as for :meth:`RedisLock.acquire`)."""
        lock = RedisLock(self.url, key, ttl=self.ttl, timeout=self.timeout)
        lock.acquire(*read)
        held: dict[tuple[str, str], list[tuple[HeldLocks, RedisLock]]]
        held = _HELD.__dict__.setdefault("locks", {})
        holders = held.setdefault((self.url, key), [])
        holders.append((self, lock))
        try:
            yield lock
        finally:
            holders.remove((self, lock))
            if not holders:
                held.pop((self.url, key), None)
            lock.release()

    def token(self, key: str) -> str:
        """The token of the lock ``key`` this thread holds, or ``""``."""
        lock = self.held(key)
        return (lock.token or "") if lock is not None else ""

    def held(self, key: str) -> RedisLock | None:
        """The lock ``key`` this thread holds through this backend, else through another one
        (the lock is not re-entrant: a second holder in one thread stands for another
        process), or ``None``."""
        held: dict[tuple[str, str], list[tuple[HeldLocks, RedisLock]]]
        held = getattr(_HELD, "locks", {})
        holders = held.get((self.url, key), [])
        mine = [lock for owner, lock in holders if owner is self]
        return (mine or [lock for _, lock in holders] or [None])[-1]


_HELD = threading.local()
"""The locks each thread holds, by URL and key, with the backend that took each: what
:meth:`HeldLocks.token` answers from."""


def hash_reply(flat: list[bytes]) -> dict[bytes, bytes]:
    """A hash as a script returns it (field, value, field, value, ...) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
