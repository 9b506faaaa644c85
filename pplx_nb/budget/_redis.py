"""The spend ledger in the Redis database of ``PPLX_NB_STORE``: one Lua script per step.

Keys, under the store's prefix::

    pplx_nb:budget:day:<YYYY-MM-DD>     hash {spent, reserved} (µUSD); expires after 3 days
    pplx_nb:budget:month:<YYYY-MM>      hash {spent, reserved}; expires after 64 days
    pplx_nb:budget:hold:<hold id>       hash {amount, state, day, month, kind} while it is
                                        reserved (deleted once settled; expires with its month)
    pplx_nb:budget:kinds                hash {<kind>:runs, <kind>:most}: the history of runs

A reservation reads both totals, checks both caps and writes the hold in one script (one round
trip), so two processes can never both take the last dollar; expiry prunes what no period
counts any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pplx_nb._caps import Period
from pplx_nb._errors import url_without_credentials
from pplx_nb._layout import RedisKeys
from pplx_nb._redis import Scripts, client, redis_errors
from pplx_nb.budget._ledger import History, Refusal, Totals, day_label, month_label

__all__ = ["RedisLedger"]

_DAY_SECONDS = 3 * 86400
_MONTH_SECONDS = 64 * 86400

_MOVE = """
local function move(hold, reserved, spent)
  for _, key in ipairs({hold[3], hold[4]}) do
    if key then
      redis.call('HINCRBY', key, 'reserved', reserved)
      if spent ~= 0 then redis.call('HINCRBY', key, 'spent', spent) end
    end
  end
end
"""
"""``move(hold, d_reserved, d_spent)``: a hold's change in its day's and month's totals; ``hold``
is HMGET amount, state, day key, month key, kind."""

_RESERVE = (
    _MOVE
    + """
local amount = tonumber(ARGV[1])
local old = redis.call('HMGET', KEYS[3], 'amount', 'state', 'day', 'month', 'kind')
if old[2] == 'reserved' then
  local was = tonumber(old[1]) or 0
  move(old, -was, was)
end
for i = 1, 2 do
  local cap = tonumber(ARGV[i + 1])
  if cap >= 0 then
    local totals = redis.call('HMGET', KEYS[i], 'spent', 'reserved')
    local used = (tonumber(totals[1]) or 0) + (tonumber(totals[2]) or 0)
    if used + amount > cap then return {0, i, used} end
  end
end
for i = 1, 2 do
  redis.call('HINCRBY', KEYS[i], 'reserved', amount)
  redis.call('EXPIRE', KEYS[i], ARGV[i + 4])
end
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'amount', amount, 'state', 'reserved', 'day', KEYS[1],
           'month', KEYS[2], 'kind', ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[6])
return {1, 0, 0}
"""
)
"""KEYS: the day's totals, the month's, the hold. ARGV: the amount, the day's and the month's
caps (-1: none), the kind, the day's and the month's expiry (s). Returns {1, 0, 0} reserved, or
{0, 1 day | 2 month, what that period had used}."""

_SETTLE = (
    _MOVE
    + """
local hold = redis.call('HMGET', KEYS[1], 'amount', 'state', 'day', 'month', 'kind')
if hold[2] ~= 'reserved' then return 0 end
local was = tonumber(hold[1]) or 0
local spent = tonumber(ARGV[1])
if spent < 0 then spent = was end
move(hold, -was, spent)
redis.call('DEL', KEYS[1])
if ARGV[2] == '1' and hold[5] then
  redis.call('HINCRBY', KEYS[2], hold[5] .. ':runs', 1)
  local most = tonumber(redis.call('HGET', KEYS[2], hold[5] .. ':most')) or 0
  if spent > most then redis.call('HSET', KEYS[2], hold[5] .. ':most', spent) end
end
return 1
"""
)
"""KEYS: the hold, the history. ARGV: what it spent (-1: its reservation), '1' to count it in
its kind's history. Returns 1 settled, 0 when no reserved hold has that id."""


class RedisLedger:
    """The ledger shared by every process on one Redis database (``PPLX_NB_STORE``).

    Blocking calls: the client runs them in a thread.
    """

    def __init__(self, url: str, keys: RedisKeys | None = None) -> None:
        self.url = url
        self.where = url_without_credentials(url)
        self._keys = keys or RedisKeys()
        self._scripts = Scripts(url)

    def _day(self, now: datetime) -> str:
        return self._keys.budget(f"day:{day_label(now)}")

    def _month(self, now: datetime) -> str:
        return self._keys.budget(f"month:{month_label(now)}")

    def reserve(
        self, hold: str, amount: int, limits: Mapping[Period, int], now: datetime, kind: str
    ) -> Refusal | None:
        """See :meth:`~pplx_nb.budget.Ledger.reserve`."""
        keys = [self._day(now), self._month(now), self._keys.budget(f"hold:{hold}")]
        caps = [limits.get("day", -1), limits.get("month", -1)]
        args = [amount, *caps, kind, _DAY_SECONDS, _MONTH_SECONDS]
        with redis_errors(self.url, "keep the spend ledger in"):
            granted, which, used = self._scripts.run(_RESERVE, keys, args)
        if granted:
            return None
        period: Period = "day" if int(which) == 1 else "month"
        return Refusal(period, int(used))

    def _settle(self, hold: str, amount: int, count: bool) -> bool:
        keys = [self._keys.budget(f"hold:{hold}"), self._keys.budget("kinds")]
        with redis_errors(self.url, "keep the spend ledger in"):
            return bool(self._scripts.run(_SETTLE, keys, [amount, "1" if count else "0"]))

    def settle(self, hold: str, amount: int | None) -> bool:
        """See :meth:`~pplx_nb.budget.Ledger.settle`."""
        return self._settle(hold, -1 if amount is None else amount, True)

    def release(self, hold: str) -> bool:
        """See :meth:`~pplx_nb.budget.Ledger.release`."""
        return self._settle(hold, 0, False)

    def totals(self, now: datetime) -> dict[Period, Totals]:
        """See :meth:`~pplx_nb.budget.Ledger.totals` (one round trip)."""
        with redis_errors(self.url, "read the spend ledger in"):
            pipe = client(self.url).pipeline(transaction=False)
            pipe.hmget(self._day(now), "spent", "reserved")
            pipe.hmget(self._month(now), "spent", "reserved")
            day, month = pipe.execute()
        return {"day": _totals(day), "month": _totals(month)}

    def history(self, kind: str) -> History:
        """See :meth:`~pplx_nb.budget.Ledger.history`."""
        with redis_errors(self.url, "read the spend ledger in"):
            runs, most = client(self.url).hmget(
                self._keys.budget("kinds"), f"{kind}:runs", f"{kind}:most"
            )
        return History(int(runs or 0), int(most or 0))


def _totals(pair: list[bytes | None]) -> Totals:
    return Totals(int(pair[0] or 0), int(pair[1] or 0))
