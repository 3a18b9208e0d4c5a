package redisstore_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestReplicaAcksWithACLRules: a user with exactly ACLRules takes and
// releases locks through WithReplicaAcks, which sends WAIT after each
// write, and CheckPermissions asks about WAIT; ACLRules had no +wait, so
// every acquisition failed with NOPERM while the error said to give the
// user ACLRules, which it had.
func TestReplicaAcksWithACLRules(t *testing.T) {
	locker := testenv.RedisArgs(append([]string{"--user", "locker", "on", ">pw"}, strings.Fields(redisstore.ACLRules)...)...)
	primary := testenv.StartRedis(t, locker)
	testenv.StartRedis(t, locker, testenv.RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))
	ctx := testCtx(t, 30*time.Second)
	admin := newClient(t, primary.Addr())
	if n, err := admin.Wait(ctx, 1, 20*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	c := redis.NewClient(&redis.Options{Addr: primary.Addr(), Username: "locker", Password: "pw"})
	s := mustNew(t, c, redisstore.WithReplicaAcks(1, 5*time.Second))
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	if err := s.CheckPermissions(ctx, "job"); err != nil {
		t.Errorf("CheckPermissions: %v", err)
	}
	g, err := s.TryAcquire(ctx, "job", request("holder", time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire with WithReplicaAcks as a user with ACLRules: %v", err)
	}
	if _, err := s.Renew(ctx, g); err != nil {
		t.Errorf("Renew: %v", err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Errorf("Release: %v", err)
	}
}
