package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// cancelOnRaise is a go-redis hook that ends the caller's context just
// before a Redlock's raise of a fencing counter is sent: the moment
// between a quorum's acquire and its tokens being made equal.
type cancelOnRaise struct{ cancel context.CancelFunc }

func (cancelOnRaise) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelOnRaise) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[1] == redisstore.RaiseScriptHash {
			h.cancel()
		}
		return next(ctx, cmd)
	}
}

func (cancelOnRaise) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedlockCancelDuringRaise: a TryAcquire whose context ends after a
// quorum acquired, while the servers' fencing counters are being raised,
// fails with an error that matches the context's (TryLock's caller gave
// up; it is not a store fault), and leaves no claim: another owner
// acquires at once.
func TestRedlockCancelDuringRaise(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	const key = "cancel-raise"
	// Server 0's counter is ahead, so the other two raise theirs.
	s0 := newClient(t, servers[0].Addr())
	_, fence, _ := mustNew(t, s0, redisstore.WithPrefix(prefix)).Keys(key)
	ahead := uint64(time.Now().UnixMicro()) + 1e12
	if err := s0.HSet(ctx, fence, "token", ahead, "transitions", 0, "holder", "").Err(); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	hook := cancelOnRaise{cancel}
	r := newRedlock(t, servers, prefix, fastClient)
	clients := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		c := newClient(t, srv.Addr(), fastClient)
		c.AddHook(hook)
		clients[i] = c
	}
	hooked, err := redisstore.NewRedlock(clients, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer hooked.Close()
	_, err = hooked.TryAcquire(actx, key, request("a", time.Minute))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire cancelled during the raise: %v; want an error matching context.Canceled", err)
	}
	g, err := r.TryAcquire(ctx, key, request("b", time.Minute))
	if err != nil {
		t.Fatalf("the next owner's TryAcquire: %v; want the lock (the cancelled attempt releases its claims)", err)
	}
	if g.Token <= ahead {
		t.Errorf("token %d after a counter at %d", g.Token, ahead)
	}
}
