package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quietRedis drops go-redis's own log lines (dial failures while servers
// are stopped on purpose).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{})
	// go-redis's pool redials a server that refused its connections in a
	// goroutine that looks once a second whether the pool was closed: it
	// ends up to a second after Close, longer than goleak waits. It is the
	// client's, not baton's, and ends with it.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
