package redisstore

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Every state change is one Lua script: Redis runs a script atomically, so
// no other command sees or changes the keys between its reads and writes.
//
// Replies never contain Lua false (RESP2 and RESP3 convert it differently):
// missing values are returned as "".
//
// A key of the wrong type, a lock value that does not parse, a fence
// without numeric fields or a lock key without expiry is reported with an
// error reply starting with corruptCode (or Redis's WRONGTYPE); the scripts
// never overwrite such keys.
//
// The scripts are kept short on purpose: an uncontended cycle is two of
// them, and in a cycle on one machine the server's time running them
// (each redis.call, each argument, each helper closure) shows beside the
// two round trips. Each script defines only the helpers it uses, and the
// two that every acquisition runs keep their common paths lean: Redis
// creates a script's closures anew on every run (about 0.15 µs each on
// the machine of docs/benchmarks.md), and helper calls, tables and reads
// of more than a path needs cost it too.
// acquireScript takes its two common paths before it defines the helpers
// of the others; releaseScript defines none outside the path that names
// another holder, parses the lock value and the places in place, and reads
// the queue from its head one place at a time.

const corruptCode = "BATON_CORRUPT"

// Lua helpers, assembled per script.
const (
	luaCorrupt = `
local function corrupt(msg) return redis.error_reply('` + corruptCode + ` ' .. msg) end
`
	luaNum = `
local function num(n) return string.format('%.0f', n) end
`
	luaNowms = `
local function nowms()
  local t = redis.call('TIME')
  return t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
end
`
	// luaLockValue splits the lock value v (see lockValue) into the
	// script's locals tok, ttl, acq and owner; luaBadLock is true if v
	// does not parse or its token is above 2^53 (a corrupt value).
	luaLockValue = `tok, ttl, acq, owner = string.match(v, '^(%d+) (%d+) (%d+) (%d+ .+)$')`
	luaBadLock   = `not tok or #tok > 16 or tonumber(tok) > 9007199254740992`

	// luaPlace splits a waiter's place p (see acquireScript) into the
	// script's locals d, pttl and powner; luaPlaceOwned is true if the
	// place records an owner and a valid TTL (a Store that collects
	// handed locks), false for a deadline alone (an earlier version's).
	luaPlace      = `d, pttl, powner = string.match(p, '^(%d+) (%d+) (.+)$')`
	luaPlaceOwned = `d and #pttl <= 12 and tonumber(pttl) >= 1`

	// readlock returns the lock key's value split into {token, ttl,
	// acquired, owner} (see lockValue), nil if there is no lock, or nil
	// and an error reply. A key of another type raises WRONGTYPE. It uses
	// corrupt (luaCorrupt).
	luaReadlock = `
local function readlock(k)
  local v = redis.call('GET', k)
  if not v then return nil end
  local tok, ttl, acq, owner
  ` + luaLockValue + `
  if ` + luaBadLock + ` then return nil, corrupt(k .. ' is not a lock value') end
  return {tok, ttl, acq, owner}
end
`
	// holderof and other name the holder of a lock that is not the
	// caller's. They use corrupt (luaCorrupt).
	luaHolder = `
-- holderof returns the holder an owner part names ("<n> <nonce of n bytes><holder>"), or nil.
local function holderof(owner)
  local n, rest = string.match(owner, '^(%d+) (.*)$')
  n = tonumber(n)
  if not n or n < 1 or n >= #rest then return nil end
  return string.sub(rest, n + 1)
end
-- other returns the reply for a lock that is not the caller's: {0, holder, token}.
local function other(k, l)
  local h = holderof(l[4])
  if not h then return corrupt(k .. ' does not name a holder') end
  return {0, h, tonumber(l[1])}
end
`
	// luaFence reads the fence (KEYS[2]) into the script's locals ftoken
	// and ftrans (decimal strings, "0" if absent), flast ("" if none), fexp
	// and fres (numbers, 0 if absent): the token, the transitions, the last
	// holder, the last claim's expiry and the end of the last reservation.
	// If one of its numeric fields is not an unsigned integer of at most
	// 2^53, the script ends with a corrupt error reply. It is text spliced
	// where a script reads the fence, not a function (see the top of this
	// file); it uses corrupt (luaCorrupt).
	luaFence = `
local f = redis.call('HMGET', KEYS[2], 'token', 'transitions', 'holder', 'expires', 'reserved')
for i = 1, 5 do
  local x = f[i]
  if i ~= 3 and x and (#x == 0 or #x > 16 or string.find(x, '%D') or tonumber(x) > 9007199254740992) then
    return corrupt(KEYS[2] .. ' has a token, transitions, expires or reserved field that is not a number')
  end
end
ftoken, ftrans, flast = f[1] or '0', f[2] or '0', f[3] or ''
fexp, fres = tonumber(f[4] or '0'), tonumber(f[5] or '0')
`
)

// ownerArg is the owner part of a lock value for holder and nonce: the
// nonce's length, a space, the nonce and the holder. The length makes the
// split unambiguous whatever bytes the two contain; the scripts compare it
// whole.
func ownerArg(holder, nonce string) string {
	return strconv.Itoa(len(nonce)) + " " + nonce + holder
}

// acquireScript takes the lock if it is free and not reserved for another
// waiter, and publishes a notice. A contender that is refused and says it
// waits (a blocking Lock, or a watch open) joins the FIFO of waiters, or refreshes its
// place there; see releaseScript for how the FIFO is served.
//
// The fence keeps the expiry of the last claim (server ms, field expires;
// written by acquire and renew, cleared by release and force-release). If
// the lock key is gone before then, someone deleted it (DEL by hand, a
// clean-up job) while its holder may still be working: the script refuses
// as if the claim were there, until it could have expired. The server's
// TIME is read first, so that the fence's expiry is at most a millisecond
// after the key's (which counts from the script's start); a key the
// server has expired is therefore never refused for the fence's sake.
//
// The fence also keeps the end of the last reservation (server ms, field
// reserved; see releaseScript). While the fence shows neither a live claim
// nor a reservation, the script writes the claim with SET NX without
// reading the lock key first (the uncontended path: five commands); if
// the key is there after all, it goes on with the full checks. While it
// shows another holder's live claim, the script refuses with the fence's
// holder, token and expiry, without reading the lock key either (the
// contended path): acquire, renew and release keep those fields with the
// key's, so the answer is the key's (its expiry within a millisecond). A
// lock value damaged under a live claim is then reported as corrupt once
// the claim's expiry has passed, not before.
//
// A place in the FIFO of a Store that collects handed locks (see
// releaseScript) also records the waiter's owner and TTL, so that a release
// can hand the lock to it; such a waiter collects a claim handed to it by
// its next attempt, if the notice did not let its Store collect it first
// (the fence's handed field names the token of the last handed claim; the
// attempt's owner must be the claim's). Its deadline is written with a
// leading zero, which says that its Store hears handoffs on the holder's
// own channel (see releaseScript); earlier versions read the same number.
//
// An acquisition records its call id (ARGV[7], random per TryAcquire call)
// in the fence's field attempt. go-redis sends a command again on a new
// connection when its connection broke before the reply came (CLIENT KILL,
// a proxy's reset); an acquisition it sends again after the first one ran
// finds its own claim, which nobody was granted, and takes it, its TTL
// counting from now, where it was refused as held by its own identity
// and the claim left to expire. Another TryAcquire call has an id of its
// own and is refused, as before.
//
// KEYS: lock, fence, queue (list of waiting holders), queued (hash: holder
// -> place: "<registration deadline ms>" or, with handoff,
// "0<deadline ms> <ttl ms> <owner>"), next (the holder the lock is
// reserved for). ARGV: holder, owner (ownerArg), ttl in ms, notice
// channel, waits ("1" or "0"), handoff ("1": the place records owner and
// TTL, and its Store follows the holder's handoff channel), call id ("" for
// none).
// Reply: {1, token} when acquired (or collected); {0, holder, token, pttl}
// when held (or reserved: then holder is the waiter it is reserved for and
// pttl the reservation's; or deleted before its expiry: then holder is the
// last holder and pttl the time left until that expiry).
var acquireScript = redis.NewScript(luaCorrupt + luaNum + `
local t = redis.call('TIME')
local nown = t[1] * 1000 + math.floor(t[2] / 1000)
local ftoken, ftrans, flast, fexp, fres
` + luaFence + `
local ttl = tonumber(ARGV[3])
-- enqueue gives the waiter a place, or refreshes it, lasting until its
-- next attempt is due, or one TTL of its own if that is longer, plus a
-- third of its TTL for that attempt to arrive late. The reply tells it
-- to retry when the claim or reservation that refused it can first end
-- (the lock key's PTTL w, or the fence's expires or reserved, which
-- follow the key's), and its watch wakes it before only for a handoff.
local function enqueue(w)
  if ARGV[5] ~= '1' then return end
  local span = math.max(ttl, w or 0, fexp - nown, fres - nown) + math.floor(ttl / 3)
  local place = num(nown + span)
  if ARGV[6] == '1' then place = '0' .. place .. ' ' .. ARGV[3] .. ' ' .. ARGV[2] end
  -- A new place joins the end of the queue, if there is room (RPUSH
  -- returns the length).
  if redis.call('HSET', KEYS[4], ARGV[1], place) == 1 and redis.call('RPUSH', KEYS[3], ARGV[1]) > ` + maxWaitersLua + ` then
    redis.call('RPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], ARGV[1])
    return
  end
  if redis.call('PTTL', KEYS[3]) < span then redis.call('PEXPIRE', KEYS[3], span) end
  if redis.call('PTTL', KEYS[4]) < span then redis.call('PEXPIRE', KEYS[4], span) end
end
-- take writes the claim if the lock key is absent (SET NX), and reports
-- whether it did.
local function take()
  -- The token is the counter plus one, or the server's clock in
  -- microseconds if that is larger: a server that lost the counter (a
  -- restart without a durable append-only file, a promoted replica that
  -- missed the last increments) still issues tokens above every earlier
  -- one, as long as its clock has not gone back by more than the outage
  -- lasted.
  local token = math.max(tonumber(ftoken) + 1, t[1] * 1000000 + t[2])
  local ts = num(token)
  if not redis.call('SET', KEYS[1], ts .. ' ' .. ARGV[3] .. ' ' .. num(nown) .. ' ' .. ARGV[2], 'NX', 'PX', ARGV[3]) then return nil end
  local trans = tonumber(ftrans)
  if ftoken ~= '0' and flast ~= ARGV[1] then trans = trans + 1 end
  redis.call('HSET', KEYS[2], 'token', ts, 'transitions', num(trans), 'holder', ARGV[1], 'expires', num(nown + ttl), 'attempt', ARGV[7])
  if ARGV[5] == '1' and redis.call('HDEL', KEYS[4], ARGV[1]) == 1 then redis.call('LREM', KEYS[3], 0, ARGV[1]) end
  redis.call('PUBLISH', ARGV[4], 'acquired ' .. ts)
  return token
end
-- The fence says the last claim has ended and nothing is reserved: the
-- key is most likely absent.
if fexp <= nown and fres <= nown then
  local token = take()
  if token then return {1, token} end
end
-- The fence says another holder's claim is live (or was deleted before
-- it could expire): refused, without reading the lock key.
if fexp > nown and flast ~= '' and flast ~= ARGV[1] then
  enqueue()
  return {0, flast, tonumber(ftoken), fexp - nown}
end
-- The other paths, and the helpers only they use.
` + luaReadlock + luaHolder + `
local l, err = readlock(KEYS[1])
if err then return err end
if l then
  if l[4] == ARGV[2] and ((ARGV[5] == '1' and redis.call('HGET', KEYS[2], 'handed') == l[1]) or
      (ARGV[7] ~= '' and redis.call('HGET', KEYS[2], 'attempt') == ARGV[7])) then
    -- Handed to this attempt's owner and not collected, or written by an
    -- earlier run of this very call whose reply was lost: collect it, its
    -- TTL counting from now, as for a claim written now.
    redis.call('HDEL', KEYS[2], 'handed')
    if l[2] == ARGV[3] then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
    else
      redis.call('SET', KEYS[1], l[1] .. ' ' .. ARGV[3] .. ' ' .. l[3] .. ' ' .. l[4], 'PX', ARGV[3])
    end
    redis.call('HSET', KEYS[2], 'expires', num(nown + ttl))
    return {1, tonumber(l[1])}
  end
  local h = holderof(l[4])
  if not h then return corrupt(KEYS[1] .. ' does not name a holder') end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then return corrupt(KEYS[1] .. ' has no expiry') end
  enqueue(pttl)
  -- PTTL is rounded down: 0 means less than a millisecond is left.
  return {0, h, tonumber(l[1]), math.max(pttl, 1)}
end
if fexp > nown then
  enqueue()
  return {0, flast, tonumber(ftoken), fexp - nown}
end
local nxt = redis.call('GET', KEYS[5])
if nxt and nxt ~= ARGV[1] then
  enqueue()
  return {0, nxt, tonumber(ftoken), math.max(redis.call('PTTL', KEYS[5]), 1)}
end
if nxt then redis.call('DEL', KEYS[5]) end
return {1, take()}
`)

// maxWaitersLua caps the FIFO of waiters; contenders beyond it compete
// without a place until there is room. Such a contender can wait without
// bound while the others lock again in loops (a place freed by a handover
// goes to the releaser's next attempt, which comes at once), so the cap is
// far above the contenders of one lock a fleet has; it bounds the places a
// release may step over or drop in one run (each an LREM of the list).
const maxWaitersLua = "1024"

// renewScript extends the claim if its owner (holder and nonce) still
// holds it, and records its new expiry in the fence (see acquireScript).
// The value is rewritten only if the TTL changed: when the claim was last
// renewed follows from its TTL and PTTL (see decodeRecord). A lock key
// that is gone stays gone: the claim is lost.
//
// KEYS: lock, fence. ARGV: owner (ownerArg), ttl in ms.
// Reply: {1, token} when renewed; {0, holder, token} when the lock is
// another owner's, {0, "", 0} when it is free.
var renewScript = redis.NewScript(luaCorrupt + luaReadlock + luaHolder + luaNum + `
local t = redis.call('TIME')
local l, err = readlock(KEYS[1])
if err then return err end
if not l then return {0, '', 0} end
if l[4] ~= ARGV[1] then return other(KEYS[1], l) end
if l[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], l[1] .. ' ' .. ARGV[2] .. ' ' .. l[3] .. ' ' .. l[4], 'PX', ARGV[2])
end
redis.call('HSET', KEYS[2], 'expires', num(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])))
return {1, tonumber(l[1])}
`)

// releaseScript frees the lock if its owner still holds it and keeps the
// fence. If waiters are queued (a handover window above 0), it serves the
// longest-waiting live waiter other than the releaser, dropping on the way
// the waiters whose registration ran out:
//
//   - a place that records an owner and TTL (a Store that collects handed
//     locks): the lock is handed to it in the same script, as an
//     acquisition by that owner would take it (next token, claim with the
//     waiter's TTL from now, the fence's fields, and handed = the token),
//     and the notice "handed <token> <ttl ms> <owner>" tells its Store: on
//     the handoff channel and the holder's own (<handoff channel>:<holder>)
//     if the place's deadline has a leading zero, so that only the Stores
//     waiting as that holder (and those observing the lock) receive it;
//     on the notice channel for an earlier version's waiter;
//   - a place without (an earlier version's waiter): the lock is freed and
//     reserved for that waiter for the window, with the notice
//     "released <token> <window ms> <waiter>";
//   - nobody: the lock is freed, with the notice "released <token>".
//
// With leaving = "1" (a waiter that gives up), the caller's own place is
// dropped first, if it is still this owner's; then, if the lock is this
// owner's (handed to it and never collected), it is released as above.
//
// Every release runs it, and every handover waits for it: its paths that
// free or hand the lock define no helper and call none (it writes its
// numbers with string.format and its corrupt replies in place), and it
// reads the four fence fields luaFence checks without the holder's.
//
// A release records its release id (ARGV[7], random per Release call) in
// the fence's field released. go-redis sends a command again on a new
// connection when its connection broke before the reply came (CLIENT KILL,
// a proxy's reset); a release it sends again after the first one ran finds
// the claim gone, or already another's, and answers as released if the
// fence names its id, where it said the lock was lost. A second Release
// call has an id of its own and still gets ErrLost.
//
// A Redlock attempt that failed releases what it may have taken with the
// call id of its acquisition on that server (ARGV[8]): the claim is
// released only if the fence's attempt field names that call, so that a
// release that comes late (go-redis sends it again after its reply was
// lost, or a straggling server reads it after the next attempt) spares a
// claim a later attempt of the same owner took.
//
// KEYS: lock, fence, queue, queued, next. ARGV: holder, owner (ownerArg),
// notice channel, handover window in ms (0: no FIFO), leaving, handoff
// channel, release id ("" for none), acquisition call id (none or "": any
// claim of the owner). Reply: as renewScript.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local tok, ttl, acq, owner
if v then
  ` + luaLockValue + `
  if ` + luaBadLock + ` then return redis.error_reply('` + corruptCode + ` ' .. KEYS[1] .. ' is not a lock value') end
end
if ARGV[5] == '1' then
  local p = redis.call('HGET', KEYS[4], ARGV[1]) or '0'
  local d, pttl, powner
  ` + luaPlace + `
  if ` + luaPlaceOwned + ` and powner == ARGV[2] then
    redis.call('LREM', KEYS[3], 0, ARGV[1])
    redis.call('HDEL', KEYS[4], ARGV[1])
  end
end
if (not v or owner ~= ARGV[2]) and ARGV[7] ~= '' and redis.call('HGET', KEYS[2], 'released') == ARGV[7] then return {1, 0} end
if not v then return {0, '', 0} end
if owner ~= ARGV[2] then
  -- The helpers that name the holder, defined on this path only.
  ` + luaCorrupt + luaHolder + `
  return other(KEYS[1], {tok, ttl, acq, owner})
end
if ARGV[8] and ARGV[8] ~= '' and redis.call('HGET', KEYS[2], 'attempt') ~= ARGV[8] then return {0, '', 0} end
local window = tonumber(ARGV[4])
-- The queue is read one place at a time from its head: a live head, the
-- common case, is one read. A dropped place leaves the queue, so the next
-- one takes its index; the releaser's own live place stays, stepped over.
local x = window > 0 and redis.call('LRANGE', KEYS[3], 0, 0)[1]
local h, wttl, wowner, own, t, now, f
if x then
  -- Read the fence before dropping places: a corrupt fence fails the
  -- script before it wrote anything. (The fields luaFence checks; the
  -- holder is not read.)
  f = redis.call('HMGET', KEYS[2], 'token', 'transitions', 'expires', 'reserved')
  for i = 1, 4 do
    local y = f[i]
    if y and (#y == 0 or #y > 16 or string.find(y, '%D') or tonumber(y) > 9007199254740992) then
      return redis.error_reply('` + corruptCode + ` ' .. KEYS[2] .. ' has a token, transitions, expires or reserved field that is not a number')
    end
  end
  t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  local i = 0
  while x do
    -- A place is "<deadline> <ttl> <owner>" (a Store that collects handed
    -- locks; a leading zero on the deadline: it hears the holder's own
    -- channel) or "<deadline>" (an earlier version's waiter).
    local p = redis.call('HGET', KEYS[4], x) or '0'
    local d, pttl, powner
    ` + luaPlace + `
    local xown = false
    if ` + luaPlaceOwned + ` then
      xown = string.byte(d) == 48
    else
      d, pttl, powner = d or p, nil, nil
    end
    d = tonumber(d) or 0
    if d < now or x ~= ARGV[1] then
      redis.call('LREM', KEYS[3], 0, x)
      redis.call('HDEL', KEYS[4], x)
      if d >= now then
        h, wttl, wowner, own = x, pttl, powner, xown
        break
      end
    else
      i = i + 1
    end
    x = redis.call('LRANGE', KEYS[3], i, i)[1]
  end
end
if wowner then
  local ts = string.format('%.0f', math.max(tonumber(f[1] or '0') + 1, t[1] * 1000000 + t[2]))
  redis.call('HSET', KEYS[2], 'token', ts, 'transitions', string.format('%.0f', tonumber(f[2] or '0') + 1), 'holder', h,
    'expires', string.format('%.0f', now + tonumber(wttl)), 'handed', ts, 'released', ARGV[7])
  redis.call('SET', KEYS[1], ts .. ' ' .. wttl .. ' ' .. string.format('%.0f', now) .. ' ' .. wowner, 'PX', wttl)
  local notice = 'handed ' .. ts .. ' ' .. wttl .. ' ' .. wowner
  if own then
    redis.call('PUBLISH', ARGV[6] .. ':' .. h, notice)
    redis.call('PUBLISH', ARGV[6], notice)
  else
    redis.call('PUBLISH', ARGV[3], notice)
  end
  return {1, tonumber(tok)}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'holder', '', 'expires', '0', 'released', ARGV[7])
if h then
  redis.call('SET', KEYS[5], h, 'PX', window)
  redis.call('HSET', KEYS[2], 'reserved', string.format('%.0f', now + window))
  redis.call('PUBLISH', ARGV[3], 'released ' .. tok .. ' ' .. ARGV[4] .. ' ' .. h)
else
  redis.call('PUBLISH', ARGV[3], 'released ' .. tok)
end
return {1, tonumber(tok)}
`)

// forceReleaseScript frees the lock whoever holds it, keeps the fence's
// counter, clears the claim's expiry in the fence (so a lock whose key was
// deleted by hand is free at once), and publishes a release notice.
//
// KEYS: lock, fence. ARGV: notice channel.
// Reply: {found, wasHeld}: found is 0 if neither key exists.
var forceReleaseScript = redis.NewScript(luaCorrupt + luaReadlock + `
local l, err = readlock(KEYS[1])
if err then return err end
local ftoken, ftrans, flast, fexp, fres
` + luaFence + `
local fexists = redis.call('EXISTS', KEYS[2])
if not l and fexists == 0 then return {0, 0} end
if l then redis.call('DEL', KEYS[1]) end
if fexists == 1 then redis.call('HSET', KEYS[2], 'holder', '', 'expires', '0') end
redis.call('PUBLISH', ARGV[1], 'released ' .. ftoken)
if l then return {1, 1} end
return {1, 0}
`)

// removeScript deletes every key of a lock (lock, fence, queue, queued,
// next) if nothing on it is live, for lock names that are used once
// (Store.Remove). It refuses, as the acquire script would refuse a
// contender, while
//
//   - the lock key exists (a claim, or one handed to a waiter and not
//     collected yet): the claim's holder, token and PTTL;
//   - the fence records a claim whose expiry has not passed on the
//     server's clock (a lock key deleted by hand, see acquireScript): the
//     last holder and token, and the time left until that expiry;
//   - the lock is reserved for a waiter (next): that waiter, the fence's
//     token and the reservation's PTTL;
//   - a waiter's place in the queue is live (its registration deadline
//     has not passed, as releaseScript judges it): the first such
//     waiter, the fence's token and the time left until its deadline.
//
// A place whose deadline has passed belongs to a waiter that stopped
// asking (releaseScript would drop it), and goes with the rest.
//
// It also keeps the fence while its counter is not below the server's
// clock in microseconds (TIME), so that the next token, which the clock
// gives once the fence is gone (see acquireScript), is larger than every
// token issued before, as long as the clock does not go back.
//
// A key of another type than the lock's keys have, a corrupt lock value
// or fence, or a fence without a token field (not one that baton wrote
// whole) fails the script before it deletes anything: none of the keys
// is deleted. It deletes no key but the five it is given (one hash slot).
//
// KEYS: lock, fence, queue, queued, next.
// Reply: {1} when removed, or when none of the keys existed;
// {0, holder, token, pttl} when refused; {2, token, now in µs} when the
// fence's counter is not below the server's clock.
var removeScript = redis.NewScript(luaCorrupt + luaReadlock + luaHolder + `
local t = redis.call('TIME')
local nown = t[1] * 1000 + math.floor(t[2] / 1000)
local want, found, fence = {'string', 'hash', 'list', 'hash', 'string'}, false, false
for i = 1, 5 do
  local ty = redis.call('TYPE', KEYS[i])['ok']
  if ty ~= 'none' then
    if ty ~= want[i] then return corrupt(KEYS[i] .. ' is a ' .. ty .. ', not a ' .. want[i]) end
    found, fence = true, fence or i == 2
  end
end
if not found then return {1} end
local ftoken, ftrans, flast, fexp, fres
` + luaFence + `
if fence and not f[1] then return corrupt(KEYS[2] .. ' has no token field') end
local l, err = readlock(KEYS[1])
if err then return err end
if l then
  local h = holderof(l[4])
  if not h then return corrupt(KEYS[1] .. ' does not name a holder') end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then return corrupt(KEYS[1] .. ' has no expiry') end
  return {0, h, tonumber(l[1]), math.max(pttl, 1)}
end
if fexp > nown then return {0, flast, tonumber(ftoken), fexp - nown} end
local nxt = redis.call('GET', KEYS[5])
if nxt then return {0, nxt, tonumber(ftoken), math.max(redis.call('PTTL', KEYS[5]), 1)} end
-- A place is "0<deadline> <ttl> <owner>" or "<deadline>" (see
-- releaseScript); anything else, or none, counts as run out.
for _, x in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local p = redis.call('HGET', KEYS[4], x) or '0'
  local d = tonumber(string.match(p, '^(%d+) ') or p) or 0
  if d >= nown then return {0, x, tonumber(ftoken), math.max(d - nown, 1)} end
end
local nowus = t[1] * 1000000 + t[2]
if tonumber(ftoken) >= nowus then return {2, tonumber(ftoken), nowus} end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return {1}
`)

// getScript reads both keys and the server's clock at one instant. It does
// not judge them; the Go side does (decodeRecord), so that it can say
// precisely what is wrong.
//
// KEYS: lock, fence.
// Reply: {lockType, fenceType, lockValue, pttl, now_ms, fenceToken,
// transitions, lastHolder, lastExpiry}.
var getScript = redis.NewScript(luaNowms + `
local function s(v) if v then return v end return '' end
local lt = redis.call('TYPE', KEYS[1])['ok']
local ft = redis.call('TYPE', KEYS[2])['ok']
local r = {lt, ft, '', -2, nowms(), '', '', '', ''}
if lt == 'string' then
  r[3] = redis.call('GET', KEYS[1])
  r[4] = redis.call('PTTL', KEYS[1])
end
if ft == 'hash' then
  local v = redis.call('HMGET', KEYS[2], 'token', 'transitions', 'holder', 'expires')
  for i = 1, 4 do r[5 + i] = s(v[i]) end
end
return r
`)

// raiseScript (Redlock) raises this instance's fencing counter and the
// token of the owner's claim to at least ARGV[2], if the owner still holds
// the lock, so that every later acquisition on this instance gets a larger
// token.
//
// KEYS: lock, fence. ARGV: owner (ownerArg), token.
// Reply: 1 if raised (or already there), 0 if the lock is not the owner's.
var raiseScript = redis.NewScript(luaCorrupt + luaReadlock + `
local l, err = readlock(KEYS[1])
if err then return err end
if not l or l[4] ~= ARGV[1] then return 0 end
local ftoken, ftrans, flast, fexp, fres
` + luaFence + `
local want = tonumber(ARGV[2])
if tonumber(ftoken) < want then redis.call('HSET', KEYS[2], 'token', ARGV[2]) end
if tonumber(l[1]) < want then
  -- Keep the expiry (SET's KEEPTTL needs Redis 6); PTTL rounds down.
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then return corrupt(KEYS[1] .. ' has no expiry') end
  redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. l[2] .. ' ' .. l[3] .. ' ' .. l[4], 'PX', math.max(pttl, 1))
end
return 1
`)

// renewManyScript is renewScript for many locks at once (see
// Store.renewSend): the same checks and writes for each lock in turn,
// with one TIME for all of them (a lock's fence expiry is at most a
// millisecond after its key's, as in renewScript). Each lock's renewal is
// run under pcall, so that a key of the wrong type or a corrupt record
// fails that lock only; as in renewScript, a fence that cannot be written
// fails the lock after its expiry was moved. The keys of one call must
// share a hash slot on a Cluster.
//
// KEYS: lock1, fence1, lock2, fence2, ... ARGV: owner1, ttl1 (ms), owner2,
// ttl2, ... Reply: one entry per lock: {1, token} renewed; {0, holder,
// token} another owner's; {0, "", 0} free; {2, error message} the error
// renewScript would have replied.
var renewManyScript = redis.NewScript(luaCorrupt + luaReadlock + luaHolder + luaNum + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function renew(lk, fk, owner, ttl)
  local l, err = readlock(lk)
  if err then return err end
  if not l then return {0, '', 0} end
  if l[4] ~= owner then return other(lk, l) end
  if l[2] == ttl then
    redis.call('PEXPIRE', lk, ttl)
  else
    redis.call('SET', lk, l[1] .. ' ' .. ttl .. ' ' .. l[3] .. ' ' .. l[4], 'PX', ttl)
  end
  redis.call('HSET', fk, 'expires', num(now + tonumber(ttl)))
  return {1, tonumber(l[1])}
end
local out = {}
for i = 1, #KEYS / 2 do
  local ok, r = pcall(renew, KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], ARGV[2 * i])
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = {2, tostring(r)}
  elseif r.err then
    r = {2, r.err}
  end
  out[i] = r
end
return out
`)
