package bench

import "github.com/redis/go-redis/v9"

// handoffCommandsFloor is the raw FIFO handoff floor (fairFloor) with the
// commands baton's release script runs when it hands the lock over, and
// none of its logic: no parsing or checks of the lock value, the fence or
// the places, constant values; its lock script runs the commands of
// baton's acquire script, taking the free lock or, refused, a place. It
// is the handover and contended tables' measure of what those commands,
// each there for a guarantee, cost on the server.
var handoffCommandsFloor = library{
	name: "floor: baton's handoff commands, no logic",
	config: "the raw FIFO handoff with baton's commands: lock: one script of TIME, HMGET of 5 fence fields, SET NX PX, then HSET of 4 fence fields and PUBLISH, " +
		"or (refused from the fence) HSET of the place, RPUSH to the waiting list, and PTTL and PEXPIRE of both; " +
		"unlock: one script of GET, LRANGE, HMGET of 5 fence fields, TIME, HGET of the place, LREM, HDEL, HSET of 5 fence fields, " +
		"SET PX for the waiter, two PUBLISHes (the waiter's channel and the lock's handoff channel), or DEL, HSET and PUBLISH",
	open: func(addr, key, id string) contender {
		return openFair(addr, key, id, commandsHandLock, commandsHandUnlock, key+":waiting", key+":places", key+":fence")
	},
}

// The scripts' KEYS: lock, waiting list, places, fence; ARGV: id, TTL in
// ms (see openFair).
var (
	commandsHandLock = redis.NewScript(`local t = redis.call('TIME')
redis.call('HMGET', KEYS[4], 'token', 'transitions', 'holder', 'expires', 'reserved')
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('HSET', KEYS[4], 'token', t[1], 'transitions', '1', 'holder', ARGV[1], 'expires', t[2])
  redis.call('PUBLISH', KEYS[1] .. ':n', 'acquired 1')
  return 1
end
redis.call('HSET', KEYS[3], ARGV[1], '0 10000 owner')
redis.call('RPUSH', KEYS[2], ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 0`)
	commandsHandUnlock = redis.NewScript(`redis.call('GET', KEYS[1])
local waiting = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('HMGET', KEYS[4], 'token', 'transitions', 'holder', 'expires', 'reserved')
local t = redis.call('TIME')
local h = waiting[1]
if h then
  redis.call('HGET', KEYS[3], h)
  redis.call('LREM', KEYS[2], 0, h)
  redis.call('HDEL', KEYS[3], h)
  redis.call('HSET', KEYS[4], 'token', t[1], 'transitions', '1', 'holder', h, 'expires', t[2], 'handed', t[1])
  redis.call('SET', KEYS[1], h, 'PX', ARGV[2])
  redis.call('PUBLISH', KEYS[1] .. ':to:' .. h, 'handed 1 10000 owner')
  redis.call('PUBLISH', KEYS[1] .. ':handoffs', 'handed 1 10000 owner')
  return 1
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[4], 'holder', '', 'expires', '0')
redis.call('PUBLISH', KEYS[1] .. ':n', 'released 1')
return 1`)
)
