package redisstore_test

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// cancelAfterAcquire is a go-redis hook that lets the acquire script run
// and then ends the caller's context and drops the reply, as a context
// that ends while the reply is on its way does.
type cancelAfterAcquire struct{ cancel context.CancelFunc }

func (cancelAfterAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelAfterAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && runs(cmd, redisstore.AcquireScriptHash) {
			h.cancel()
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return err
	}
}

// runs reports whether cmd runs the script whose SHA1 is hash (EVALSHA,
// or EVAL of its source after a NOSCRIPT).
func runs(cmd redis.Cmder, hash string) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	if args[1] == hash {
		return true
	}
	src, ok := args[1].(string)
	return ok && fmt.Sprintf("%x", sha1.Sum([]byte(src))) == hash
}

func (cancelAfterAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCancelledAcquireReleases: a TryLock whose context ends after Redis
// ran its acquire but before the reply came back leaves no claim behind:
// the Store releases it, and another process's TryLock succeeds without
// waiting out the TTL.
func TestCancelledAcquireReleases(t *testing.T) {
	srv := startRedis(t, 1)[0]
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := newClient(t, srv.Addr())
	c.AddHook(cancelAfterAcquire{cancel})
	s := mustNew(t, c, redisstore.WithPrefix(prefix))
	m, err := baton.NewMutex(s, "cut", baton.WithTTL(time.Minute), baton.WithIdentity("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(actx); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock whose reply was cut off: %v; want context.Canceled", err)
	}
	if err := s.Close(); err != nil { // waits for the clean-up
		t.Fatal(err)
	}
	other, err := baton.NewMutex(newStore(t, srv.Addr(), prefix), "cut", baton.WithTTL(time.Minute), baton.WithIdentity("b"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("the next TryLock: %v; want the lock (the cancelled acquire's claim released)", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
