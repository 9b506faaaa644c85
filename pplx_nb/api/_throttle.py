"""Pacing API requests: ``PPLX_NB_RATE_LIMIT`` and the rate-limit headers the API sends.

The client awaits :meth:`Throttle.admit` before every request it sends (answers, streams,
background submissions, polls, cancels, searches, each retry and reconnect) and passes every
response's status and headers to :meth:`Throttle.observe`. Waiting is not an error: a request
waits for its turn with ``asyncio.sleep``, unless its turn comes after its own timeout, which is
a TIMEOUT_ERROR saying so at once (nothing is sent).

The limit is a sliding window: at most N requests start in any period. Each request reserves the
earliest instant ``s >= now`` at which fewer than N reserved instants fall in ``(s - period, s]``,
that is ``max(now, the N-th latest reservation + period)``; reservations only grow, so the last N
are all there is to keep. A hold from the API pushes every reservation past its end: a 429 or
503 with ``Retry-After``, or ``X-RateLimit-Remaining: 0`` with ``X-RateLimit-Reset``.

Where the state lives:

- :class:`LocalThrottle`: in this process, shared by every client, event loop and thread in it
  (no ``PPLX_NB_STORE``);
- :class:`RedisThrottle`: in the Redis database of ``PPLX_NB_STORE``, shared by every process on
  it (kernels, workers, MCP servers on any machine); one Lua script reserves atomically against
  the server's clock (``TIME``), so the machines' clocks do not matter.

Without ``PPLX_NB_RATE_LIMIT`` there is no window, but the API's holds still apply.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pplx_nb._config import Settings, parse_rate
from pplx_nb._errors import APITimeoutError, PplxError, url_without_credentials
from pplx_nb._layout import RedisKeys
from pplx_nb._logging import get_logger
from pplx_nb._redis import redis_errors, run_script
from pplx_nb.api.retry import RATE_LIMIT_WAIT, retry_after_seconds, seconds_until_date

__all__ = [
    "LocalThrottle",
    "RateLimitHeaders",
    "RedisThrottle",
    "Throttle",
    "read_headers",
    "throttle_for",
    "window",
]

logger = get_logger("pplx_nb.api")

MAX_HOLD = 3600.0
"""The longest pause one response can impose (a garbled header must not stop every process)."""

_HOLD_STATUSES = frozenset({429, 503})
Cause = Literal["none", "rate", "hold"]
_CAUSES: tuple[Cause, ...] = ("none", "rate", "hold")


def window(rate: str) -> tuple[int, float]:
    """``PPLX_NB_RATE_LIMIT`` as a whole number of requests per period (seconds).

    ``"20/s"`` -> ``(20, 1.0)``; a fractional count keeps its rate: ``"2.5/s"`` -> ``(2, 0.8)``,
    ``"0.5/s"`` -> ``(1, 2.0)``. Raises ``ValueError`` for text that is not a rate.
    """
    parsed = parse_rate(rate)
    if parsed is None:
        raise ValueError(f"not a rate: {rate!r}")
    count, period = parsed
    whole = max(1, math.floor(count))
    return whole, period * whole / count


@dataclass(frozen=True, slots=True)
class RateLimitHeaders:
    """What one response said about the API's rate limit (``None``: not said).

    ``reset`` and ``retry_after`` are seconds from ``seen_at`` (a UTC time).
    """

    status: int
    limit: int | None
    remaining: int | None
    reset: float | None
    retry_after: float | None
    seen_at: datetime

    def pause(self) -> float:
        """Seconds every request should wait from ``seen_at`` on (0: none), at most MAX_HOLD."""
        pause = 0.0
        if self.status in _HOLD_STATUSES and self.retry_after is not None:
            pause = self.retry_after
        if self.remaining is not None and self.remaining <= 0 and self.reset is not None:
            pause = max(pause, self.reset)
        return min(max(pause, 0.0), MAX_HOLD)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _reset_seconds(value: str, now: float) -> float | None:
    """Seconds until a reset given as seconds, an epoch time (s or ms), ``1m30s`` or a date."""
    text = value.strip().lower()
    try:
        number = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if parts and "".join(n + unit for n, unit in parts) == text:
            return sum(float(n) * _SECONDS[unit] for n, unit in parts)
        return seconds_until_date(value)
    if not math.isfinite(number):
        return None
    if number > 1e12:
        return number / 1000 - now
    if number > 1e9:
        return number - now
    return number


def _integer(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(f"x-ratelimit-{name}") or headers.get(f"ratelimit-{name}")
    if value is None:
        return None
    try:
        return int(float(value.strip()))
    except (ValueError, OverflowError):
        return None


def read_headers(status: int, headers: Mapping[str, str]) -> RateLimitHeaders | None:
    """The rate-limit part of a response (``X-RateLimit-*``, ``Retry-After``), or ``None``."""
    limit = _integer(headers, "limit")
    remaining = _integer(headers, "remaining")
    raw_reset = headers.get("x-ratelimit-reset") or headers.get("ratelimit-reset")
    retry_after = retry_after_seconds(headers) if status in _HOLD_STATUSES else None
    if limit is None and remaining is None and raw_reset is None and retry_after is None:
        return None
    now = time.time()
    reset = _reset_seconds(raw_reset, now) if raw_reset is not None else None
    return RateLimitHeaders(
        status=status,
        limit=limit,
        remaining=remaining,
        reset=reset,
        retry_after=retry_after,
        seen_at=datetime.fromtimestamp(now, UTC),
    )


@dataclass(frozen=True, slots=True)
class _Turn:
    """A request's turn: ``granted`` or too far away, in ``wait`` seconds, at ``at`` (the
    throttle's clock: ``time.monotonic`` in process, the Redis server's in Redis)."""

    granted: bool
    wait: float
    cause: Cause
    at: float


class Throttle:
    """Paces this process's API requests (see the module docstring); subclasses keep the state.

    Args:
        rate: ``PPLX_NB_RATE_LIMIT`` (``"20/s"``), or ``None`` for the API's holds alone.
    """

    where = "every client in this process"

    def __init__(self, rate: str | None) -> None:
        self.rate = rate
        self.window = window(rate) if rate is not None else None
        self.last: RateLimitHeaders | None = None
        """The rate-limit headers of the last response that had any."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rate={self.rate!r}, where={self.where!r})"

    async def admit(self, what: str, max_wait: float, *, run_left: float | None = None) -> float:
        """Wait for the turn of the request ``what``; return the seconds waited.

        ``run_left``: ``what`` reads (or stops) a paid run with that many seconds left before
        its deadline. An API pause that would leave no ``max_wait`` before that deadline is
        then not waited for (only ``PPLX_NB_RATE_LIMIT`` is): honouring it would lose a result
        already paid for, or leave the run billing, to save one request.

        Raises APITimeoutError (nothing sent) when the turn is more than ``max_wait`` seconds
        away, and StoreUnavailable when the shared state cannot be reached.
        """
        turn = await self._reserve(max(max_wait, 0.0))
        if (
            not turn.granted
            and turn.cause == "hold"
            and run_left is not None
            and turn.wait > run_left - max_wait
        ):
            logger.warning(
                "%s is sent despite the API's pause of %.1f s more: its paid run has %.1f s "
                "left before its deadline",
                what,
                turn.wait,
                max(run_left, 0.0),
            )
            turn = await self._reserve(max(max_wait, 0.0), past_hold=True)
        if not turn.granted:
            raise self._too_late(what, turn, max_wait)
        if turn.wait > 0:
            log = logger.info if turn.wait >= 1 else logger.debug
            log("%s waits %.2f s for its turn (%s)", what, turn.wait, self._because(turn.cause))
            await asyncio.sleep(turn.wait)
        return turn.wait

    async def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Note a response's rate-limit headers; hold every request when the API asks to.

        Never raises: the response is already here, and a hold that cannot be shared only
        makes the next requests meet the API's 429s (which are retried) sooner.
        """
        seen = read_headers(status, headers)
        if seen is None:
            return
        self.last = seen
        pause = seen.pause()
        if pause <= 0:
            return
        logger.info(
            "The API's rate limit was reached (HTTP %d, %s); holding the requests of %s for %.2f s",
            status,
            "Retry-After" if seen.retry_after else "X-RateLimit-Remaining 0",
            self.where,
            pause,
        )
        try:
            await self._hold(pause)
        except PplxError as error:
            logger.warning("Could not share the API's rate-limit pause: %s", error)

    def _because(self, cause: Cause) -> str:
        if cause == "hold":
            return "the API asked to pause: Retry-After / X-RateLimit-Reset"
        return f"PPLX_NB_RATE_LIMIT={self.rate} across {self.where}"

    def _too_late(self, what: str, turn: _Turn, max_wait: float) -> APITimeoutError:
        if turn.cause == "hold":
            why = (
                f"the API asked to pause requests (rate limit reached: Retry-After or "
                f"X-RateLimit-Reset) for {turn.wait:.1f} s more"
            )
            fix = (
                "Retry after that pause; set PPLX_NB_RATE_LIMIT a little under the account's "
                "limit so that requests are spaced out before the API refuses them."
            )
        else:
            why = (
                f"the rate limit PPLX_NB_RATE_LIMIT={self.rate} (shared by {self.where}) gives "
                f"it a turn in {turn.wait:.1f} s"
            )
            fix = (
                "Send fewer requests at once, raise PPLX_NB_RATE_LIMIT if the account allows "
                "more, or allow more time with PERPLEXITY_TIMEOUT (milliseconds)."
            )
        return APITimeoutError(
            f"{what} was not sent: {why}, past its {max_wait:.3g} s timeout. {fix}",
            reason=RATE_LIMIT_WAIT,
            wait_seconds=round(turn.wait, 3),
        )

    async def _reserve(self, max_wait: float, *, past_hold: bool = False) -> _Turn:
        """Reserve the next turn unless it is over ``max_wait`` away; ``past_hold``: ignoring
        the API's pause."""
        raise NotImplementedError

    async def _hold(self, seconds: float) -> None:
        raise NotImplementedError


class LocalThrottle(Throttle):
    """The throttle of one process: every client, event loop and thread in it take turns."""

    def __init__(self, rate: str | None) -> None:
        super().__init__(rate)
        self._slots: deque[float] = deque(maxlen=self.window[0] if self.window else 0)
        self._hold_until = 0.0
        self._guard = threading.Lock()

    async def _reserve(self, max_wait: float, *, past_hold: bool = False) -> _Turn:
        return self.reserve(max_wait, past_hold=past_hold)

    def reserve(self, max_wait: float, *, past_hold: bool = False) -> _Turn:
        """Reserve the next turn (``time.monotonic`` clock) unless it is over ``max_wait`` away
        (``past_hold``: ignoring the API's pause)."""
        with self._guard:
            now = time.monotonic()
            slot: float = now
            cause: Cause = "none"
            if self.window is not None and len(self._slots) == self.window[0]:
                edge = self._slots[0] + self.window[1]
                if edge > slot:
                    slot, cause = edge, "rate"
            if self._hold_until > slot and not past_hold:
                slot, cause = self._hold_until, "hold"
            wait = slot - now
            if wait > max_wait:
                return _Turn(False, wait, cause, slot)
            if self.window is not None:
                self._slots.append(slot)
            return _Turn(True, wait, cause, slot)

    async def _hold(self, seconds: float) -> None:
        with self._guard:
            self._hold_until = max(self._hold_until, time.monotonic() + seconds)


_MAX_AHEAD = 7 * 86400.0
"""The furthest ahead a turn is ever reserved (a longer wait is refused as too late), so a stored
instant further ahead than this, or a hold longer than MAX_HOLD, is damage, not a turn."""

_SANE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function sane(value, ahead)
  local number = tonumber(value)
  if number and number == number and number > -1e18 and number <= now + ahead then
    return number
  end
  return nil
end
local function readable(key, kind)
  local found = redis.call('TYPE', key).ok
  if found == kind or found == 'none' then return true end
  redis.call('DEL', key)
  return false
end
"""
"""What both scripts share: ``now`` (server clock, µs); ``sane(value, ahead)``, a stored instant
as a number or nil when it is not a number or lies over ``ahead`` µs ahead; ``readable(key,
kind)``, false after deleting a key of another type."""

_RESERVE = (
    _SANE
    + """
local count = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local slot, cause, repaired = now, 0, 0
if count > 0 then
  if not readable(KEYS[1], 'list') then
    repaired = 1
  elseif redis.call('LLEN', KEYS[1]) >= count then
    local oldest = sane(redis.call('LINDEX', KEYS[1], -count), tonumber(ARGV[4]))
    if oldest == nil then
      redis.call('DEL', KEYS[1])
      repaired = 1
    elseif oldest + period > slot then
      slot, cause = oldest + period, 1
    end
  end
end
local hold = 0
if not readable(KEYS[2], 'string') then
  repaired = repaired + 2
else
  local stored = redis.call('GET', KEYS[2])
  hold = stored and sane(stored, tonumber(ARGV[5]))
  if stored and not hold then redis.call('DEL', KEYS[2]) repaired = repaired + 2 end
  hold = hold or 0
end
if hold > slot and ARGV[6] ~= '1' then slot, cause = hold, 2 end
local wait = slot - now
local at = string.format('%.0f', slot)
if wait > tonumber(ARGV[3]) then return {0, wait, cause, at, repaired} end
if count > 0 then
  redis.call('RPUSH', KEYS[1], at)
  redis.call('LTRIM', KEYS[1], -count, -1)
  redis.call('PEXPIRE', KEYS[1], math.ceil((wait + period) / 1000) + 1000)
end
return {1, wait, cause, at, repaired}
"""
)
"""KEYS: the window's reservations (a list of server-clock µs, oldest first), the hold (µs).
ARGV: N (0: no window), the period, the longest wait, the furthest a reservation may lie ahead
and the longest hold (µs); '1' to ignore the hold.
Returns {granted, wait µs, cause (0 none, 1 rate, 2 hold), the turn's instant in µs (text),
repaired (1: the window was damaged, 2: the hold, 3: both; each is deleted, as if absent)}.
"""

_HOLD = (
    _SANE
    + """
local length = tonumber(ARGV[1])
local ends = now + length
local current = readable(KEYS[1], 'string') and sane(redis.call('GET', KEYS[1]), tonumber(ARGV[2]))
if ends > (current or 0) then
  redis.call('SET', KEYS[1], string.format('%.0f', ends), 'PX', math.ceil(length / 1000) + 1)
  return 1
end
return 0
"""
)
"""KEYS: the hold. ARGV: its length and the longest hold (µs). Pushes the hold's end out, never
in; a damaged hold (not a number, or further ahead than the longest hold) is replaced."""


class RedisThrottle(Throttle):
    """The throttle shared by every process on one Redis database (``PPLX_NB_STORE``).

    Each reservation is one script call against the server's clock; the calls run in a thread,
    so a slow Redis never blocks the event loop, and an unreachable one is StoreUnavailable
    naming the URL within the connect timeout.
    """

    def __init__(self, url: str, rate: str | None) -> None:
        super().__init__(rate)
        self.url = url
        self.where = f"every process on {url_without_credentials(url)}"
        keys = RedisKeys()
        name = f"{self.window[0]}/{self.window[1] * 1000:.0f}ms" if self.window else "none"
        self.keys = [keys.rate_limit(name), keys.rate_limit("hold")]

    async def _reserve(self, max_wait: float, *, past_hold: bool = False) -> _Turn:
        return await asyncio.to_thread(self.reserve, max_wait, past_hold=past_hold)

    def reserve(self, max_wait: float, *, past_hold: bool = False) -> _Turn:
        """Reserve the next turn (blocking; Redis server clock) unless it is over ``max_wait``
        away (``past_hold``: ignoring the API's pause)."""
        count, period = self.window if self.window else (0, 0.0)
        args = [count, round(period * 1e6), round(min(max_wait, _MAX_AHEAD) * 1e6)]
        limits = [round(_MAX_AHEAD * 1e6), round(MAX_HOLD * 1e6), 1 if past_hold else 0]
        with redis_errors(self.url, "pace API requests through"):
            granted, wait, cause, at, repaired = run_script(
                self.url, _RESERVE, self.keys, [*args, *limits]
            )
        if repaired:
            damaged = [
                key for bit, key in zip((1, 2), self.keys, strict=True) if int(repaired) & bit
            ]
            logger.warning(
                "The shared rate limit in the Redis store at %s held a damaged value (%s); it was "
                "deleted and counts as empty",
                url_without_credentials(self.url),
                " and ".join(damaged),
            )
        return _Turn(bool(granted), int(wait) / 1e6, _CAUSES[int(cause)], int(at) / 1e6)

    async def _hold(self, seconds: float) -> None:
        await asyncio.to_thread(self.hold, seconds)

    def hold(self, seconds: float) -> None:
        """Hold every process's requests for ``seconds`` (at most MAX_HOLD) from now (blocking)."""
        length = round(min(max(seconds, 0.0), MAX_HOLD) * 1e6)
        with redis_errors(self.url, "share a rate-limit pause through"):
            run_script(self.url, _HOLD, self.keys[1:], [length, round(MAX_HOLD * 1e6)])


_throttles: dict[tuple[int, str, str | None, str | None], Throttle] = {}
_throttles_lock = threading.Lock()


def throttle_for(settings: Settings) -> Throttle:
    """The throttle of this process for ``settings``' API, store and rate, made on first use.

    Every client with the same ``base_url``, ``store_url`` and ``rate_limit`` shares it,
    whatever its loop or thread (a forked child makes its own), so one API's pauses never hold
    requests to another (the simulator, a proxy).
    """
    rate = settings.rate_limit
    key = (os.getpid(), settings.base_url, settings.store_url, rate)
    with _throttles_lock:
        found = _throttles.get(key)
        if found is None:
            if settings.store_url:
                found = RedisThrottle(settings.store_url, rate)
            else:
                found = LocalThrottle(rate)
            _throttles[key] = found
        return found
