"""The Lua scripts of the job side in Redis (:mod:`pplx_nb.jobs._redis`): each one round trip,
atomic on the server, its clock read with ``TIME`` so that no machine's clock matters."""

from __future__ import annotations

__all__ = [
    "ADD_CLAIMED",
    "AGE",
    "APPLY",
    "CLAIM",
    "CLAIM_VIEW",
    "EXPIRED",
    "GUARDED_WRITE",
    "RENEW",
    "REQUEUE",
    "VIEW",
]

_NOW_MS = "local t = redis.call('time') local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

GUARDED_WRITE = """
if ARGV[1] ~= '' and redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end
if ARGV[2] == 'set' then
  redis.call('set', KEYS[2], ARGV[3])
  if KEYS[3] then redis.call('sadd', KEYS[3], ARGV[4]) end
else
  redis.call('del', KEYS[2])
  if KEYS[3] then redis.call('srem', KEYS[3], ARGV[4]) end
end
return 1
"""

CLAIM = (
    _NOW_MS
    + """
local popped = redis.call('zpopmin', KEYS[1])
if #popped == 0 then return false end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[1]), popped[1])
return popped[1]
"""
)

CLAIM_VIEW = (
    CLAIM.removesuffix("return popped[1]\n")
    + """
local base = ARGV[2] .. string.sub(popped[1], -22) .. ':'
local status, job = redis.pcall('get', base .. 'status'), redis.pcall('get', base .. 'job')
if type(status) == 'table' and status.err or type(job) == 'table' and job.err then
  return {popped[1]}
end
return {popped[1], redis.call('exists', base .. 'meta'), status, job}
"""
)
""":data:`CLAIM`, then read what :data:`VIEW` reads for the marker's conversation (its id
the marker's last 22 characters, its keys built from the base ``ARGV[2]``, which a single server
allows): the marker alone if a key holds another type of value (the locked way reads it again
and says so)."""

ADD_CLAIMED = _NOW_MS + "redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1]) return 1"

RENEW = (
    _NOW_MS
    + """
local deadline = redis.call('zscore', KEYS[1], ARGV[1])
if not deadline or tonumber(deadline) < now then return 0 end
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
"""
)

REQUEUE = """
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zadd', KEYS[1], 0, ARGV[1])
return 1
"""

VIEW = (
    _NOW_MS
    + """
local live = 0
if ARGV[2] ~= '' then
  local deadline = redis.call('zscore', KEYS[4], ARGV[2])
  if deadline and tonumber(deadline) >= now then live = 1 end
end
local record = false
if ARGV[1] == '1' then record = redis.call('get', KEYS[3]) end
return {redis.call('exists', KEYS[1]), redis.call('get', KEYS[2]), record, live}
"""
)
"""Whether the conversation exists (``KEYS[1]`` its meta), its status, its request if ``ARGV[1]``
is 1, and whether the marker ``ARGV[2]`` is claimed with its lease not yet passed."""

APPLY = """
local holder = redis.pcall('get', KEYS[1])
if ARGV[1] ~= '' then
  if holder ~= ARGV[1] then return 0 end
elseif type(holder) == 'string' and redis.call('pttl', KEYS[1]) ~= -1 then
  return 0
end
if redis.call('exists', KEYS[2]) == 0 then return -3 end
local stored = redis.call('get', KEYS[3])
if ARGV[2] == 'idle' then
  if stored then
    local ok, found = pcall(cjson.decode, stored)
    if not ok or type(found) ~= 'table' or type(found.attempts or 0) ~= 'number' then return -2 end
    if found.status == 'pending' or found.status == 'in_progress' then return -5 end
    local ended = {completed = true, failed = true, cancelled = true}
    if type(found.status) ~= 'string' or not ended[found.status] then return -2 end
  end
elseif ARGV[2] == '1' then
  if stored ~= ARGV[3] then return -2 end
elseif stored then
  return -2
end
if ARGV[8] == '1' then
  local t = redis.call('time')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local deadline = redis.call('zscore', KEYS[7], ARGV[10])
  if not deadline or tonumber(deadline) < now then return -4 end
  redis.call('zadd', KEYS[7], now + tonumber(ARGV[11]), ARGV[10])
end
redis.call('set', KEYS[3], ARGV[4])
if ARGV[5] == 'set' then
  redis.call('set', KEYS[4], ARGV[6])
  redis.call('sadd', KEYS[5], ARGV[7])
elseif ARGV[5] == 'del' then
  redis.call('del', KEYS[4])
  redis.call('srem', KEYS[5], ARGV[7])
end
if ARGV[9] == 'pending' then
  redis.call('zadd', KEYS[6], 0, ARGV[10])
elseif ARGV[9] == 'requeue' then
  redis.call('zrem', KEYS[7], ARGV[10])
  redis.call('zadd', KEYS[6], 0, ARGV[10])
elseif ARGV[9] == 'drop' then
  redis.call('zrem', KEYS[6], ARGV[10])
  redis.call('zrem', KEYS[7], ARGV[10])
end
return 1
"""
"""One transition at once (see :class:`~pplx_nb.jobs._redis.RedisSteps`). KEYS: the lock, meta,
status, job, the queued set, pending, claimed. ARGV: this thread's lock token or '', whether a
status was read (1/0, or 'idle': any status but one of an active job will do) and its bytes, the
new status, 'set'/'del'/'' for the request and its bytes, the conversation id, whether to renew
the lease (1/0), the index move, the marker, the lease (ms). Returns 1 written, 0 locked by
another, -2 changed (or unreadable), -3 gone, -4 lease passed, -5 an active job there."""

EXPIRED = _NOW_MS + "return {now, redis.call('zrangebyscore', KEYS[1], '-inf', '(' .. now)}"

AGE = _NOW_MS + "return {now, redis.call('zscore', KEYS[1], ARGV[1]) or false}"
