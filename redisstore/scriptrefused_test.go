package redisstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// TestScriptRefusedByACL: a user that may run the scripts but not publish
// on baton's channels (ACLRules without &baton:*; users made on Redis 7
// have no channels unless given some) is refused at its first acquire,
// with ErrForbidden naming PUBLISH: a Lock returns, it does not retry for
// ever. The claim the script wrote before Redis refused its PUBLISH is
// released, so another contender takes the lock at once, not after the
// claim's TTL.
func TestScriptRefusedByACL(t *testing.T) {
	rules := slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "&baton:*" })
	srv := testenv.StartRedis(t, testenv.RedisArgs(append([]string{"--user", "nochannels", "on", ">pw"}, rules...)...))
	ctx := testCtx(t, 30*time.Second)
	s, err := redisstore.Open(fmt.Sprintf("redis://nochannels:pw@%s", srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := baton.NewMutex(s, "job", baton.WithTTL(time.Minute), baton.WithIdentity("refused"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if l != nil {
		l.Unlock(ctx)
	}
	if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "PUBLISH baton:{job}:notify") {
		t.Errorf("Lock by a user without channels: %v; want ErrForbidden naming PUBLISH baton:{job}:notify", err)
	}
	if err := s.Close(); err != nil { // waits for the claim's release
		t.Fatal(err)
	}
	admin := newStore(t, srv.Addr(), redisstore.DefaultPrefix)
	if _, err := admin.TryAcquire(ctx, "job", request("other", time.Minute)); err != nil {
		t.Errorf("another contender after the refused Lock: %v; want the lock free", err)
	}
}
