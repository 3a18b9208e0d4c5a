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
	goleak.VerifyTestMain(m)
}
