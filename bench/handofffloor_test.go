package bench

import "github.com/redis/go-redis/v9"

// handoffCommandsFloor is the raw FIFO handoff floor (fairFloor) with the
// commands baton's release script runs when it hands the lock over, and
// none of its logic: no parsing or checks of the lock value, the fence or
// the places, constant values. It is the handover table's measure of what
// those commands, each there for a guarantee, cost on the server.
var handoffCommandsFloor = library{
	name: "floor: baton's handoff commands, no logic",
	config: "the raw FIFO handoff with baton's commands: lock: SET NX PX, or RPUSH to the waiting list and HSET of the place; " +
		"unlock: one script of GET, LRANGE, HMGET of 5 fence fields, TIME, HGET of the place, LREM, HDEL, HSET of 5 fence fields, " +
		"SET PX for the waiter, two PUBLISHes (the waiter's channel and the lock's handoff channel), or DEL, HSET and PUBLISH",
	open: func(addr, key, id string) contender {
		return openFair(addr, key, id, commandsHandLock, commandsHandUnlock, key+":waiting", key+":places", key+":fence")
	},
}

// The scripts' KEYS: lock, waiting list, places, fence; ARGV: id, TTL in
// ms (see openFair).
var (
	commandsHandLock = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
redis.call('RPUSH', KEYS[2], ARGV[1]) redis.call('HSET', KEYS[3], ARGV[1], '0 10000 owner') return 0`)
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
