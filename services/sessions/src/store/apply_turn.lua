-- One turn applied to a live session (the sessions service's Redis store, redis.rs), and the
-- load generator's sessions-redis-floor scenario runs this same file. Validation comes before
-- any write: Redis does not roll a script back when it fails midway.
-- KEYS: the session's hash, its message list.
-- ARGV: expected role, expected switch count, new role or '', '1' to count a turn, now (ms).
local function is_count(v) return v and string.match(v, '^%d+$') ~= nil end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing', {}, {}}
end
local s = redis.call('HMGET', KEYS[1], 'status', 'role', 'switches', 'turns', 'ttl')
if s[1] == 'closed' then
  return {'closed', {}, {}}
end
if not s[2] or not is_count(s[3]) or not is_count(s[4]) or not is_count(s[5]) or tonumber(s[5]) < 1 then
  return {'corrupt', {'missing or malformed role, switches, turns or ttl'}, {}}
end
if s[2] ~= ARGV[1] or tonumber(s[3]) ~= tonumber(ARGV[2]) then
  return {'conflict', {}, {}}
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'role', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'switches', 1)
end
if ARGV[4] == '1' then
  redis.call('HINCRBY', KEYS[1], 'turns', 1)
end
redis.call('HSET', KEYS[1], 'updated', ARGV[5])
redis.call('EXPIRE', KEYS[1], tonumber(s[5]))
redis.call('EXPIRE', KEYS[2], tonumber(s[5]))
return {'ok', redis.call('HGETALL', KEYS[1]), {}}
