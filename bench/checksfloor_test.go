package bench

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// checksFloor is the floor of a fair lock that keeps baton's guarantees on
// Redis: handoffCommandsFloor's commands plus the checks and values those
// guarantees rest on, written as cheaply as the author of this row could
// (no helper closures, each value converted once, the fast paths only), so
// that what it costs beyond the commands floor is the price of the checks
// rather than of baton's code. If it falls short of a target in a run, a
// Redis lock with these guarantees cannot meet that target in that run.
//
// The checks, each for a guarantee:
//   - the fence's counter, transitions and expiry are unsigned integers of
//     at most 2^53 (a corrupt fence is reported, never overwritten);
//   - the fence's expiry refuses while the last claim may be live, even if
//     its key was deleted (the deleted-key guard), without reading the key;
//   - the token is the counter plus one or the server's clock in µs if that
//     is larger (tokens above any a restarted server issued), written as a
//     decimal integer;
//   - the claim's value records token, TTL, acquire time and owner (holder
//     and nonce), and a release parses it, reports a value that does not
//     parse (or a token above 2^53) as corrupt, and releases only its
//     owner's claim;
//   - a waiter's place records its deadline, TTL and owner; a release hands
//     the lock to the oldest live place with a valid TTL (next token, the
//     waiter's claim and TTL from now, the fence's fields, checked before
//     they are overwritten) and tells it on its own channel and on the
//     lock's handoff channel (observers send no requests), or frees the
//     lock with a notice;
//   - the FIFO is capped (64 places) and its keys expire.
//
// Left out, so the floor is if anything low: the paths the loops never take
// (the key present although the fence says free, a handed claim collected by
// a request, a waiter giving up its place, an earlier version's place or
// reservation, a releaser with a place of its own: the unlock pops the
// queue's head), and naming the holder in a refusal from the lock value
// (the fence names it).
var checksFloor = library{
	name: "floor: baton's handoff commands and checks, lean",
	config: "the handoff commands floor's commands plus the checks baton's guarantees need (fence fields numeric, deleted-key guard, " +
		"token floor from the server clock, claim value parsed and owner-checked, places with deadline, TTL and owner), written lean",
	open: func(addr, key, id string) contender {
		return &checksContender{openChecks(addr, key, id)}
	},
}

// openChecks opens a fair contender with the checks floor's scripts.
func openChecks(addr, key, id string) *fairContender {
	return openFair(addr, key, id, checksLock, checksUnlock, key+":fence", key+":queue", key+":places")
}

// checksWaitingFloor is checksFloor whose waiter waits as baton's engine
// does: not blocked on its own connection, which cannot be interrupted by
// the caller's context or woken when a dead holder's claim expires, but in
// a select on the notice (passed on by the connection's reader goroutine),
// the context and a timer, giving up its place when the context ends (see
// fairContender.waitSelect). That costs a goroutine hop per handover, which
// a blocking lock that keeps baton's guarantees pays, so what this row
// misses is out of reach for such a lock.
var checksWaitingFloor = library{
	name: "floor: checks floor, waiting in a select",
	config: "the checks floor with its waiter in a select on the notice (from a reader goroutine), the context " +
		"and a timer at the TTL, as a blocking lock that returns when its context ends or a dead holder's claim expires must wait",
	open: func(addr, key, id string) contender {
		f := openChecks(addr, key, id)
		f.readNotices(checksLeave)
		return &checksContender{f}
	},
}

// checksContender is a fairContender whose scripts also take the owner
// (holder and a fresh nonce, as baton's) and report a corrupt key as an
// error.
type checksContender struct{ *fairContender }

func (c *checksContender) lock(ctx context.Context) (func(context.Context) error, error) {
	unlock, err := c.lockWith(ctx, ownerOf(c.id, randomValue()))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		n, err := unlock(ctx)
		if err == nil && n != 1 {
			err = errors.New("checks floor: the lock is not this owner's")
		}
		return err
	}, nil
}

// ownerOf is baton's owner string: the nonce's length, a space, the nonce
// and the holder.
func ownerOf(holder, nonce string) string { return strconv.Itoa(len(nonce)) + " " + nonce + holder }

// The scripts' KEYS: lock, fence, queue, places; ARGV: holder, TTL in ms,
// owner. Lock: 1 acquired, 0 queued (the handoff comes on the holder's
// channel). Unlock: 1 released or handed, 0 not the owner's.
var (
	checksLock = redis.NewScript(`local t = redis.call('TIME')
local f = redis.call('HMGET', KEYS[2], 'token', 'transitions', 'holder', 'expires')
for i = 1, 4 do
  local v = f[i]
  if i ~= 3 and v and (#v > 16 or string.find(v, '%D') or (#v == 16 and tonumber(v) > 9007199254740992)) then
    return redis.error_reply('BATON_CORRUPT ' .. KEYS[2])
  end
end
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
local exp = tonumber(f[4] or '0')
if exp > now and f[3] ~= ARGV[1] then
  if redis.call('HSET', KEYS[4], ARGV[1], '0' .. string.format('%.0f', now + ttl) .. ' ' .. ARGV[2] .. ' ' .. ARGV[3]) == 1
    and redis.call('RPUSH', KEYS[3], ARGV[1]) > 64 then
    redis.call('RPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], ARGV[1])
  end
  if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
  if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end
  return 0
end
local ts = string.format('%.0f', math.max(tonumber(f[1] or '0') + 1, t[1] * 1000000 + t[2]))
if not redis.call('SET', KEYS[1], ts .. ' ' .. ARGV[2] .. ' ' .. string.format('%.0f', now) .. ' ' .. ARGV[3], 'NX', 'PX', ARGV[2]) then
  return redis.error_reply('checks floor: the key is there although the fence says free')
end
local trans = tonumber(f[2] or '0')
if f[1] and f[3] ~= ARGV[1] then trans = trans + 1 end
redis.call('HSET', KEYS[2], 'token', ts, 'transitions', string.format('%.0f', trans), 'holder', ARGV[1], 'expires', string.format('%.0f', now + ttl))
redis.call('PUBLISH', KEYS[1] .. ':notify', 'acquired ' .. ts)
return 1`)
	checksUnlock = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local tok, owner = string.match(v, '^(%d+) %d+ %d+ (%d+ .+)$')
if not tok or #tok > 16 or (#tok == 16 and tonumber(tok) > 9007199254740992) then return redis.error_reply('BATON_CORRUPT ' .. KEYS[1]) end
if owner ~= ARGV[3] then return 0 end
local h = redis.call('LPOP', KEYS[3])
if h then
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local d, ttl, wowner
  while h do
    local p = redis.call('HGET', KEYS[4], h)
    redis.call('HDEL', KEYS[4], h)
    if p then
      d, ttl, wowner = string.match(p, '^0(%d+) (%d+) (.+)$')
      if d and #ttl <= 12 and tonumber(ttl) >= 1 and tonumber(d) >= now then break end
    end
    h = redis.call('LPOP', KEYS[3])
  end
  if h then
    local f = redis.call('HMGET', KEYS[2], 'token', 'transitions', 'expires')
    for i = 1, 3 do
      local x = f[i]
      if x and (#x > 16 or string.find(x, '%D') or (#x == 16 and tonumber(x) > 9007199254740992)) then
        return redis.error_reply('BATON_CORRUPT ' .. KEYS[2])
      end
    end
    local ts = string.format('%.0f', math.max(tonumber(f[1] or '0') + 1, t[1] * 1000000 + t[2]))
    redis.call('HSET', KEYS[2], 'token', ts, 'transitions', string.format('%.0f', tonumber(f[2] or '0') + 1), 'holder', h,
      'expires', string.format('%.0f', now + tonumber(ttl)), 'handed', ts)
    redis.call('SET', KEYS[1], ts .. ' ' .. ttl .. ' ' .. string.format('%.0f', now) .. ' ' .. wowner, 'PX', ttl)
    local notice = 'handed ' .. ts .. ' ' .. ttl .. ' ' .. wowner
    redis.call('PUBLISH', KEYS[1] .. ':to:' .. h, notice)
    redis.call('PUBLISH', KEYS[1] .. ':handoffs', notice)
    return 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'holder', '', 'expires', '0')
redis.call('PUBLISH', KEYS[1] .. ':notify', 'released ' .. tok)
return 1`)
	// checksLeave gives up a waiter's place: 2 if the lock was handed to
	// it (its claim holds the owner; the waiter then releases it), else 1.
	checksLeave = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%d+ %d+ %d+ (.+)$') == ARGV[3] then return 2 end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('LREM', KEYS[3], 0, ARGV[1])
return 1`)
)
