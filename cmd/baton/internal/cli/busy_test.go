package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// While a Redis Cluster moves the hash slot of a lock and its keys are
// split between the two nodes, Redis refuses every script on the lock with
// TRYAGAIN: the store answers, at the address given, but cannot serve the
// lock until the move ends. doctor's store row called that "unreachable"
// with the fix "start the store or correct its address", and baton lock
// said it "cannot reach the redis store" and to check that it runs and
// that its address is right. Both now say the store answered and cannot
// serve the lock now; the exit codes stay (doctor 1, lock 69).
func TestRedisAnsweredButBusy(t *testing.T) {
	t.Parallel()
	c := testenv.StartRedisCluster(t, 3)
	s, err := redisstore.Open(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.TryAcquire(ctx, "job", backend.Request{Holder: "a", Nonce: "n", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	lock, _, _ := s.Keys("job")
	m := c.StartSlotMove(t, lock, (c.SlotServer(t, lock)+1)%len(c.Nodes))
	if m.MoveKeys(t, 1) != 1 {
		t.Fatal("no key of the lock moved")
	}

	code, out, stderr := runCLI(t, "doctor", "--backend", "redis", "--redis-url", c.URL(), "--name", "job")
	row := doctorTable(t, out)["store"]
	if code != 1 || row.result != "FAIL" || !strings.HasPrefix(row.detail, "busy: ") || !strings.Contains(row.detail, "TRYAGAIN") {
		t.Errorf("doctor: exit %d, store row %+v; want exit 1 and a FAIL saying busy: ... TRYAGAIN\n%s%s", code, row, out, stderr)
	}
	if fix := doctorFix(out, "store"); strings.Contains(fix, "start the store") || !strings.Contains(fix, "the store answered") {
		t.Errorf("doctor's fix for the store row: %q; want one saying the store answered, not to start it", fix)
	}

	code, _, stderr = runCLI(t, "lock", "--backend", "redis", "--redis-url", c.URL(), "--name", "job", "--wait", "0", "--", "true")
	if code != 69 || strings.Contains(stderr, "cannot reach") || !strings.Contains(stderr, "answered, but cannot serve the lock now") || !strings.Contains(stderr, "TRYAGAIN") {
		t.Errorf("lock --wait 0: exit %d, stderr %q; want 69 saying the store answered but cannot serve the lock now (TRYAGAIN)", code, stderr)
	}
}
