package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// keyTypes are the Redis types of a lock's keys, in the order of keys.all
// (lock, fence, queue, queued, next).
var keyTypes = [...]string{"string", "hash", "list", "hash", "string"}

// corruptFix says how an operator clears key, one of a lock's keys that
// holds what baton did not write, without tokens going backwards.
func corruptFix(key string) string {
	const never = "; baton never overwrites it: inspect it with redis-cli (TYPE, GET or HGETALL, PTTL), and if no other program uses the key, "
	switch {
	case strings.HasSuffix(key, ":lock"):
		return never + "DEL " + key + ": the fence beside it keeps the counter and the last claim's expiry, so tokens keep growing and nobody acquires before that claim could have ended"
	case strings.HasSuffix(key, ":fence"):
		return never + "DEL " + key + " once no process holds the lock: its counter goes with it, and the next token is the server's clock in microseconds, larger than every earlier one unless that clock went back (go doc redisstore, Fencing tokens)"
	}
	return never + "DEL " + key + ": it holds only waiters' places, which they take again"
}

// scriptCorrupt returns the key and the message of a script's corrupt
// reply (see luaCorrupt), which starts with the key at fault.
func scriptCorrupt(err error) (key, msg string, ok bool) {
	msg, ok = strings.CutPrefix(err.Error(), corruptCode+" ")
	if !ok {
		return "", "", false
	}
	key, _, _ = strings.Cut(msg, " ")
	return key, msg, true
}

// corruptErr reports key, one of lock name's keys, as a corrupt record,
// with what is wrong (msg) and the fix.
func corruptErr(op, name, key, msg string) error {
	return fmt.Errorf("redisstore: %s lock %q (key %s): %w: %s%s", op, name, key, backend.ErrCorruptRecord, msg, corruptFix(key))
}

// explain returns err, an error of a script run on lock k's keys (as
// wrap made it), or, for a WRONGTYPE reply, which names neither the key nor
// its type, an error naming the key of k that holds another type than
// baton writes, and the fix. (A renewal keeps wrap's error: a batched one,
// see renewManyOutcomes, has no request of its own to spare.)
func (s *Store) explain(ctx context.Context, k *keys, op string, err error) error {
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		return err
	}
	cmds, perr := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, key := range k.all {
			p.Type(ctx, key)
		}
		return nil
	})
	if perr != nil {
		return err
	}
	for i, c := range cmds {
		if ty := c.(*redis.StatusCmd).Val(); ty != "none" && ty != keyTypes[i] {
			return corruptErr(op, k.name, k.all[i], fmt.Sprintf("it is a %s, not a %s", ty, keyTypes[i]))
		}
	}
	return err
}
