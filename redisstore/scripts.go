package redisstore

import "github.com/redis/go-redis/v9"

// Every state change is one Lua script: Redis runs a script atomically, so
// no other command sees or changes the keys between its reads and writes.
//
// Replies never contain Lua false (RESP2 and RESP3 convert it differently):
// missing values are returned as "".
//
// A key of the wrong type, a hash without its fields, a non-numeric counter
// or a lock key without expiry is reported with an error reply starting
// with corruptCode; the scripts never overwrite such keys.

const corruptCode = "BATON_CORRUPT"

const prelude = `
local function corrupt(msg) return redis.error_reply('` + corruptCode + ` ' .. msg) end
local function isuint(v) return type(v) == 'string' and #v <= 15 and string.match(v, '^%d+$') ~= nil end
local function num(n) return string.format('%.0f', n) end
local function nowms()
  local t = redis.call('TIME')
  return t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
end
-- readlock returns {holder, nonce, token} of the lock hash, nil if there is
-- none, or nil and an error reply. A key of another type raises WRONGTYPE.
local function readlock(k)
  local v = redis.call('HMGET', k, 'holder', 'nonce', 'token')
  if not v[1] and not v[2] and not v[3] then return nil end
  if not v[1] or v[1] == '' or not v[2] or v[2] == '' or not isuint(v[3]) then
    return nil, corrupt(k .. ' lacks a holder, a nonce or a numeric token')
  end
  return v
end
-- readfence returns the fence hash's token, transitions and last holder
-- ('0', '0', '' if there is none), or nil and an error reply.
local function readfence(k)
  local v = redis.call('HMGET', k, 'token', 'transitions', 'holder')
  if (v[1] and not isuint(v[1])) or (v[2] and not isuint(v[2])) then
    return nil, corrupt(k .. ' has a token or transitions field that is not a number')
  end
  return v[1] or '0', v[2] or '0', v[3] or ''
end
`

// acquireScript takes the lock if it is free and not reserved for another
// waiter, and publishes a notice. A contender that is refused and says it
// waits (a blocking Lock, or a watch open) joins the FIFO of waiters, or refreshes its
// place there; see releaseScript for how the FIFO is served.
//
// KEYS: lock, fence, queue (list of waiting holders), queued (hash: holder
// -> registration deadline, ms), next (the holder the lock is reserved for).
// ARGV: holder, nonce, ttl in ms, notice channel, waits ("1" or "0").
// Reply: {1, token} when acquired; {0, holder, token, pttl} when held (or
// reserved: then holder is the waiter it is reserved for and pttl the
// reservation's).
var acquireScript = redis.NewScript(prelude + `
local function enqueue()
  if ARGV[5] ~= '1' then return end
  local ttl = tonumber(ARGV[3])
  if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 0 then
    if redis.call('LLEN', KEYS[3]) >= ` + maxWaitersLua + ` then return end
    redis.call('RPUSH', KEYS[3], ARGV[1])
  end
  redis.call('HSET', KEYS[4], ARGV[1], num(tonumber(nowms()) + ttl))
  if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
  if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end
end
local lock, err = readlock(KEYS[1])
if err then return err end
if lock then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then return corrupt(KEYS[1] .. ' has no expiry') end
  enqueue()
  -- PTTL is rounded down: 0 means less than a millisecond is left.
  return {0, lock[1], tonumber(lock[3]), math.max(pttl, 1)}
end
local ftoken, ftrans, flast = readfence(KEYS[2])
if not ftoken then return ftrans end
local nxt = redis.call('GET', KEYS[5])
if nxt and nxt ~= ARGV[1] then
  enqueue()
  return {0, nxt, tonumber(ftoken), math.max(redis.call('PTTL', KEYS[5]), 1)}
end
if nxt then redis.call('DEL', KEYS[5]) end
if ARGV[5] == '1' and redis.call('HDEL', KEYS[4], ARGV[1]) == 1 then redis.call('LREM', KEYS[3], 0, ARGV[1]) end
local token = tonumber(ftoken) + 1
local trans = tonumber(ftrans)
if ftoken ~= '0' and flast ~= ARGV[1] then trans = trans + 1 end
local now = nowms()
redis.call('HSET', KEYS[2], 'token', num(token), 'transitions', num(trans), 'holder', ARGV[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'nonce', ARGV[2], 'token', num(token),
  'ttl_ms', ARGV[3], 'acquired_ms', now, 'renewed_ms', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], 'acquired ' .. num(token))
return {1, token}
`)

// maxWaitersLua caps the FIFO of waiters; contenders beyond it compete
// without a place until there is room.
const maxWaitersLua = "64"

// renewScript extends the claim if holder and nonce still own it.
//
// KEYS: lock. ARGV: holder, nonce, ttl in ms.
// Reply: {1, token} when renewed; {0, holder, token} when the lock is
// another owner's, {0, "", 0} when it is free.
var renewScript = redis.NewScript(prelude + `
local lock, err = readlock(KEYS[1])
if err then return err end
if not lock then return {0, '', 0} end
if lock[1] ~= ARGV[1] or lock[2] ~= ARGV[2] then return {0, lock[1], tonumber(lock[3])} end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[1], 'ttl_ms', ARGV[3], 'renewed_ms', nowms())
return {1, tonumber(lock[3])}
`)

// releaseScript frees the lock if holder and nonce still own it, keeps the
// fence, reserves the lock for the longest-waiting live waiter other than
// the releaser (for the handover window), and publishes a release notice:
// "released <token>", or "released <token> <window ms> <waiter>" when the
// lock is reserved for waiter (see hub.notify). Waiters whose registration
// ran out are dropped on the way.
//
// KEYS: lock, fence, queue, queued, next. ARGV: holder, nonce, notice
// channel, handover window in ms (0: no reservation).
// Reply: as renewScript.
var releaseScript = redis.NewScript(prelude + `
local lock, err = readlock(KEYS[1])
if err then return err end
if not lock then return {0, '', 0} end
if lock[1] ~= ARGV[1] or lock[2] ~= ARGV[2] then return {0, lock[1], tonumber(lock[3])} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'holder', '')
local window = tonumber(ARGV[4])
local reserved = ''
if window > 0 then
  local waiting = redis.call('LRANGE', KEYS[3], 0, -1)
  local now = #waiting > 0 and tonumber(nowms())
  for _, h in ipairs(waiting) do
    local deadline = tonumber(redis.call('HGET', KEYS[4], h) or '0') or 0
    if deadline < now or h ~= ARGV[1] then
      redis.call('LREM', KEYS[3], 0, h)
      redis.call('HDEL', KEYS[4], h)
      if deadline >= now then
        redis.call('SET', KEYS[5], h, 'PX', window)
        reserved = h
        break
      end
    end
  end
end
if reserved ~= '' then
  redis.call('PUBLISH', ARGV[3], 'released ' .. lock[3] .. ' ' .. ARGV[4] .. ' ' .. reserved)
else
  redis.call('PUBLISH', ARGV[3], 'released ' .. lock[3])
end
return {1, tonumber(lock[3])}
`)

// forceReleaseScript frees the lock whoever holds it, keeps the fence, and
// publishes a release notice.
//
// KEYS: lock, fence. ARGV: notice channel.
// Reply: {found, wasHeld}: found is 0 if neither key exists.
var forceReleaseScript = redis.NewScript(prelude + `
local lock, err = readlock(KEYS[1])
if err then return err end
local ftoken, ferr = readfence(KEYS[2])
if not ftoken then return ferr end
local fexists = redis.call('EXISTS', KEYS[2])
if not lock and fexists == 0 then return {0, 0} end
if lock then redis.call('DEL', KEYS[1]) end
if fexists == 1 then redis.call('HSET', KEYS[2], 'holder', '') end
redis.call('PUBLISH', ARGV[1], 'released ' .. ftoken)
if lock then return {1, 1} end
return {1, 0}
`)

// getScript reads both keys at one instant. It does not judge them; the Go
// side does, so that it can say precisely what is wrong.
//
// KEYS: lock, fence.
// Reply: {lockType, fenceType, holder, nonce, token, ttl_ms, acquired_ms,
// renewed_ms, pttl, fenceToken, transitions, lastHolder}.
var getScript = redis.NewScript(`
local function s(v) if v then return v end return '' end
local lt = redis.call('TYPE', KEYS[1])['ok']
local ft = redis.call('TYPE', KEYS[2])['ok']
local r = {lt, ft, '', '', '', '', '', '', -2, '', '', ''}
if lt == 'hash' then
  local v = redis.call('HMGET', KEYS[1], 'holder', 'nonce', 'token', 'ttl_ms', 'acquired_ms', 'renewed_ms')
  for i = 1, 6 do r[2 + i] = s(v[i]) end
  r[9] = redis.call('PTTL', KEYS[1])
end
if ft == 'hash' then
  local v = redis.call('HMGET', KEYS[2], 'token', 'transitions', 'holder')
  for i = 1, 3 do r[9 + i] = s(v[i]) end
end
return r
`)

// raiseScript (Redlock) raises this instance's fencing counter and the
// token of the owner's claim to at least ARGV[3], if holder and nonce still
// own the lock, so that every later acquisition on this instance gets a
// larger token.
//
// KEYS: lock, fence. ARGV: holder, nonce, token.
// Reply: 1 if raised (or already there), 0 if the lock is not the owner's.
var raiseScript = redis.NewScript(prelude + `
local lock, err = readlock(KEYS[1])
if err then return err end
if not lock or lock[1] ~= ARGV[1] or lock[2] ~= ARGV[2] then return 0 end
local ftoken, ferr = readfence(KEYS[2])
if not ftoken then return ferr end
local want = tonumber(ARGV[3])
if tonumber(ftoken) < want then redis.call('HSET', KEYS[2], 'token', ARGV[3]) end
if tonumber(lock[3]) < want then redis.call('HSET', KEYS[1], 'token', ARGV[3]) end
return 1
`)
