"""The Lua scripts the Redis store writes with: each one round trip, atomic on the server.

Each write that follows a read checks what was read still holds (the list's length, a message)
and that the conversation lock is still its holder's (``ARGV[1]``, its token; ``''`` when this
thread holds no lock), so a holder paused past the lock's expiry writes nothing. They return -1
for a lock that expired, -2 for a conversation changed since the read, -3 for one gone.
"""

from __future__ import annotations

from pplx_nb.store._document import SUMMARY_KEY

__all__ = ["APPEND", "CREATE", "READ", "REPLACE", "UNDO"]

_CHUNK = 1000
"""Messages pushed per RPUSH inside a script (Lua's ``unpack`` has a stack limit)."""
CREATE = f"""
if redis.call('zscore', KEYS[1], ARGV[2]) or redis.call('exists', unpack(KEYS, 2)) > 0 then
  return 0
end
redis.call('zadd', KEYS[1], ARGV[1], ARGV[2])
local fields = tonumber(ARGV[3])
redis.call('hset', KEYS[2], unpack(ARGV, 4, 3 + 2 * fields))
for i = 4 + 2 * fields, #ARGV, {_CHUNK} do
  redis.call('rpush', KEYS[3], unpack(ARGV, i, math.min(i + {_CHUNK - 1}, #ARGV)))
end
return 1
"""
"""Claim the id ``ARGV[2]`` (index ``KEYS[1]``, scored ``ARGV[1]``) unless it or any key of the
conversation (``KEYS[2..]``) exists, and write ``ARGV[3]`` meta fields and the messages."""

APPEND = f"""
if ARGV[1] ~= '' and redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('exists', KEYS[2]) == 0 then return -3 end
if redis.call('llen', KEYS[3]) ~= tonumber(ARGV[2]) then return -2 end
for i = 7, #ARGV, {_CHUNK} do
  redis.call('rpush', KEYS[3], unpack(ARGV, i, math.min(i + {_CHUNK - 1}, #ARGV)))
end
redis.call('hset', KEYS[2], 'updatedAt', ARGV[3], 'messageCount', ARGV[4], '{SUMMARY_KEY}', ARGV[5])
if ARGV[6] == '1' then redis.call('del', KEYS[1]) end
return redis.call('llen', KEYS[3])
"""
"""Push messages if the lock is still this holder's (``ARGV[1]``) and the list as long as read
(``ARGV[2]``), with the fields that move; with ``ARGV[6]`` = 1, let go of the lock too."""

REPLACE = """
if ARGV[1] ~= '' and redis.call('get', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('exists', KEYS[2]) == 0 then return -3 end
if redis.call('llen', KEYS[3]) ~= tonumber(ARGV[2]) then return -2 end
local index = tonumber(ARGV[3])
if redis.call('lindex', KEYS[3], index) ~= ARGV[4] then return -2 end
redis.call('lset', KEYS[3], index, ARGV[5])
if #ARGV > 5 then redis.call('hset', KEYS[2], unpack(ARGV, 6)) end
return 1
"""
"""Replace one message, if the list is still as it was read (its length and that message),
and set the meta fields that follow (name, value, ...)."""

UNDO = """
if tonumber(ARGV[1]) > 0 then redis.call('ltrim', KEYS[2], 0, ARGV[1] - 1)
else redis.call('del', KEYS[2]) end
if #ARGV > 1 then redis.call('hset', KEYS[1], unpack(ARGV, 2)) end
return 1
"""
"""Put the messages list ``KEYS[2]`` back to its first ``ARGV[1]`` entries and the meta fields
that follow (name, value, ...) into ``KEYS[1]``: an append whose next step failed, undone."""

READ = "return {redis.pcall('hgetall', KEYS[1]), redis.pcall('lrange', KEYS[2], 0, -1)}"
"""A conversation's meta hash (field, value, ...) and messages, read at once; a key of another
type is its error in the reply, as in a pipeline's."""
