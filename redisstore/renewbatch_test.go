package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// scriptLog records the script calls a go-redis client sends (EVALSHA and
// EVAL, alone or in a pipeline), the pipelines that carried any, and the
// keys the scripts were given. An EVALSHA answered NOSCRIPT (the server
// had not cached the script yet; the Store sends it again with EVAL) is
// not counted.
type scriptLog struct {
	mu        sync.Mutex
	scripts   int
	pipelines int
	keys      []string
}

func (l *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.record(cmd)
		return err
	}
}

func (l *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		counted := false
		for _, cmd := range cmds {
			counted = l.record(cmd) || counted
		}
		if counted {
			l.mu.Lock()
			l.pipelines++
			l.mu.Unlock()
		}
		return err
	}
}

func (l *scriptLog) record(cmd redis.Cmder) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" || redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return false
	}
	args := cmd.Args() // eval[sha], script or sha, numkeys, keys..., args...
	n, _ := strconv.Atoi(fmt.Sprint(args[2]))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.scripts++
	for _, k := range args[3 : 3+n] {
		l.keys = append(l.keys, fmt.Sprint(k))
	}
	return true
}

// since returns the scripts and pipelines sent since the snapshot before,
// and the keys they were given.
func (l *scriptLog) snapshot() (scripts, pipelines int, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.scripts, l.pipelines, slices.Clone(l.keys)
}

// batchStore returns a Store on a new client of addr whose scripts are
// logged, with its renewals held until FlushRenewals (see HoldRenewals),
// and a function that waits until n renewals are pending.
func batchStore(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option) (*redisstore.Store, *scriptLog, func(n int)) {
	t.Helper()
	log := &scriptLog{}
	c.AddHook(log)
	s := mustNew(t, c, append([]redisstore.Option{redisstore.WithPrefix(uniquePrefix())}, opts...)...)
	t.Cleanup(func() { _ = s.Close() })
	joined := make(chan int, 4096)
	redisstore.HoldRenewals(s, func(pending int) { joined <- pending })
	awaitPending := func(n int) {
		t.Helper()
		for p := range joined {
			if p == n {
				return
			}
		}
	}
	return s, log, awaitPending
}

// renewAll renews every grant in its own goroutine and returns a function
// that waits for the results, in the order of grants.
func renewAll(ctx context.Context, s backend.Backend, grants []backend.Grant) func() []error {
	errs := make([]error, len(grants))
	var wg sync.WaitGroup
	for i, g := range grants {
		wg.Go(func() { _, errs[i] = s.Renew(ctx, g) })
	}
	return func() []error { wg.Wait(); return errs }
}

// acquireN takes locks name-0 ... name-(n-1) for holder "a" with ttl.
func acquireN(t *testing.T, s backend.Backend, name string, n int, ttl time.Duration) []backend.Grant {
	t.Helper()
	grants := make([]backend.Grant, n)
	for i := range grants {
		g, err := s.TryAcquire(t.Context(), fmt.Sprintf("%s-%d", name, i), request("a", ttl))
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
	}
	return grants
}

// Renewals that share a window are sent as one script per
// MaxRenewsPerScript locks, in one pipeline, and every one of them is
// applied: each lock then has the new TTL and more than the old one left.
func TestRenewBatchFewScripts(t *testing.T) {
	srv := startRedis(t, 1)[0]
	s, log, awaitPending := batchStore(t, newClient(t, srv.Addr()))
	n := redisstore.MaxRenewsPerScript + 100
	grants := acquireN(t, s, "job", n, time.Minute)
	for i := range grants {
		grants[i].TTL = 2 * time.Minute
	}
	scripts0, pipes0, _ := log.snapshot()
	wait := renewAll(t.Context(), s, grants)
	awaitPending(n)
	redisstore.FlushRenewals(s)
	for i, err := range wait() {
		if err != nil {
			t.Fatalf("Renew %s: %v", grants[i].Key, err)
		}
	}
	scripts, pipes, _ := log.snapshot()
	if scripts-scripts0 != 2 || pipes-pipes0 != 1 {
		t.Errorf("%d renewals sent %d scripts in %d pipelines; want 2 scripts (at most %d locks each) in 1 pipeline",
			n, scripts-scripts0, pipes-pipes0, redisstore.MaxRenewsPerScript)
	}
	for _, g := range grants {
		rec, err := s.Get(t.Context(), g.Key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.TTL != 2*time.Minute || rec.Remaining <= time.Minute || rec.Nonce != g.Nonce {
			t.Fatalf("%s after a batched renewal: TTL %v, %v left, nonce %q; want TTL 2m, more than 1m left, nonce %q",
				g.Key, rec.TTL, rec.Remaining, rec.Nonce, g.Nonce)
		}
	}
}

// In one batch, a lock taken over by another owner, a released lock and
// three corrupt records each get the error a renewal of that lock alone
// gets, and only that lock: the others in the same script are renewed.
func TestRenewBatchOutcomes(t *testing.T) {
	srv := startRedis(t, 1)[0]
	c := newClient(t, srv.Addr())
	s, log, awaitPending := batchStore(t, c)
	ctx := t.Context()
	names := []string{"ok1", "stolen", "released", "wrongtype", "badvalue", "badfence", "ok2"}
	grants := make([]backend.Grant, len(names))
	for i, name := range names {
		g, err := s.TryAcquire(ctx, name, request("a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
	}
	key := func(name, kind string) string {
		lock, fence, _ := s.Keys(name)
		return map[string]string{"lock": lock, "fence": fence}[kind]
	}
	if err := s.ForceRelease(ctx, "stolen"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, "stolen", request("b", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, grants[2]); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		c.Del(ctx, key("wrongtype", "lock")).Err(),
		c.RPush(ctx, key("wrongtype", "lock"), "x").Err(),
		c.Set(ctx, key("badvalue", "lock"), "garbage", time.Minute).Err(),
		c.Del(ctx, key("badfence", "fence")).Err(),
		c.Set(ctx, key("badfence", "fence"), "x", 0).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	scripts0, _, _ := log.snapshot()
	wait := renewAll(ctx, s, grants)
	awaitPending(len(grants))
	redisstore.FlushRenewals(s)
	batched := wait()
	if scripts, _, _ := log.snapshot(); scripts-scripts0 != 1 {
		t.Errorf("%d renewals sent %d scripts; want 1", len(grants), scripts-scripts0)
	}
	// The same renewals one at a time, on a Store that does not hold them:
	// each is a batch of one, which runs the single-lock script.
	alone := mustNew(t, c, redisstore.WithPrefix(s.Prefix()))
	t.Cleanup(func() { _ = alone.Close() })
	want := map[string]error{"stolen": backend.ErrLost, "released": backend.ErrLost,
		"wrongtype": backend.ErrCorruptRecord, "badvalue": backend.ErrCorruptRecord, "badfence": backend.ErrCorruptRecord}
	for i, g := range grants {
		_, single := alone.Renew(ctx, g)
		err := batched[i]
		t.Logf("%s: batched: %v; alone: %v", g.Key, err, single)
		if w := want[g.Key]; (w == nil) != (err == nil) || w != nil && !errors.Is(err, w) {
			t.Errorf("batched renewal of %s: %v; want %v", g.Key, err, w)
		}
		if (err == nil) != (single == nil) || !sameError(err, single) {
			t.Errorf("%s: batched renewal says %v, a renewal alone %v", g.Key, err, single)
		}
	}
	if !strings.Contains(fmt.Sprint(batched[1]), `held by "b"`) {
		t.Errorf("renewal of the stolen lock: %v; want it to name holder b", batched[1])
	}
}

// sameError reports whether a and b say the same: the same message, up to
// the location Redis appends to an error raised by a script outside pcall.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	for _, sentinel := range []error{backend.ErrLost, backend.ErrCorruptRecord} {
		if errors.Is(a, sentinel) != errors.Is(b, sentinel) {
			return false
		}
	}
	as, bs := a.Error(), b.Error()
	return as == bs || strings.HasPrefix(bs, as) || strings.HasPrefix(as, bs) ||
		strings.Contains(as, "WRONGTYPE") && strings.Contains(bs, "WRONGTYPE")
}

// A renewal whose context ends while it waits for its batch returns the
// context's error and is left out of the batch; the others are sent.
func TestRenewBatchCancelledWhilePending(t *testing.T) {
	srv := startRedis(t, 1)[0]
	s, log, awaitPending := batchStore(t, newClient(t, srv.Addr()))
	grants := acquireN(t, s, "job", 2, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { _, err := s.Renew(ctx, grants[0]); first <- err }()
	awaitPending(1)
	wait := renewAll(t.Context(), s, grants[1:])
	awaitPending(2)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew cancelled while pending: %v; want context.Canceled", err)
	}
	_, _, keys0 := log.snapshot()
	redisstore.FlushRenewals(s)
	if err := wait()[0]; err != nil {
		t.Fatalf("the other Renew: %v", err)
	}
	_, _, keys := log.snapshot()
	sent := keys[len(keys0):]
	lock0, _, _ := s.Keys(grants[0].Key)
	lock1, _, _ := s.Keys(grants[1].Key)
	if slices.Contains(sent, lock0) || !slices.Contains(sent, lock1) {
		t.Errorf("the batch touched %v; want %s and not the cancelled %s", sent, lock1, lock0)
	}
}

// Close fails the renewals waiting for their batch with ErrClosed, sends
// nothing, and every later Renew fails the same way at once. The
// package's goleak check covers the batcher's goroutines.
func TestRenewBatchClosedWhilePending(t *testing.T) {
	srv := startRedis(t, 1)[0]
	s, log, awaitPending := batchStore(t, newClient(t, srv.Addr()))
	grants := acquireN(t, s, "job", 3, time.Minute)
	scripts0, _, _ := log.snapshot()
	wait := renewAll(t.Context(), s, grants)
	awaitPending(len(grants))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, err := range wait() {
		if !errors.Is(err, backend.ErrClosed) || !strings.Contains(fmt.Sprint(err), "closed") {
			t.Errorf("Renew %d pending at Close: %v; want ErrClosed saying the Store was closed", i, err)
		}
	}
	if _, err := s.Renew(t.Context(), grants[0]); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Renew after Close: %v; want ErrClosed", err)
	}
	if scripts, _, _ := log.snapshot(); scripts != scripts0 {
		t.Errorf("%d scripts sent after Close; want none", scripts-scripts0)
	}
}

// With WithReplicaAcks, one WAIT covers a batch: on a primary with a
// replica the batch is renewed; on a server with no replica to
// acknowledge, every renewal of the batch fails with ErrUnavailable.
func TestRenewBatchReplicaAcks(t *testing.T) {
	primary := startRedis(t, 1)[0]
	testenv.StartRedis(t, testenv.RedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)))
	lone := startRedis(t, 1)[0]
	for _, tc := range []struct {
		name    string
		addr    string
		timeout time.Duration
		want    error
	}{
		{"replica", primary.Addr(), 10 * time.Second, nil},
		{"no_replica", lone.Addr(), 50 * time.Millisecond, backend.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, awaitPending := batchStore(t, newClient(t, tc.addr), redisstore.WithReplicaAcks(1, tc.timeout))
			// Acquired without acks (with no replica they would fail).
			plain := mustNew(t, newClient(t, tc.addr), redisstore.WithPrefix(s.Prefix()))
			t.Cleanup(func() { _ = plain.Close() })
			grants := acquireN(t, plain, "job", 3, time.Minute)
			wait := renewAll(t.Context(), s, grants)
			awaitPending(len(grants))
			redisstore.FlushRenewals(s)
			for i, err := range wait() {
				if (tc.want == nil) != (err == nil) || tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("Renew %d: %v; want %v", i, err, tc.want)
				}
			}
		})
	}
}

// On a Cluster a script may only touch keys of one hash slot: a batch is
// one script per slot, all in one pipeline, and every lock is renewed.
// Lock names are their keys' hash tags; SlotOf agrees with the cluster.
func TestRenewBatchCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	s, log, awaitPending := batchStore(t, cc)
	ctx := t.Context()
	// Four names in one slot, and five more.
	names := []string{"job"}
	for i := 0; len(names) < 4; i++ {
		if n := fmt.Sprintf("job-%d", i); redisstore.SlotOf(n) == redisstore.SlotOf("job") {
			names = append(names, n)
		}
	}
	names = append(names, "a", "b", "c", "d", "e")
	slots := map[uint16]bool{}
	grants := make([]backend.Grant, len(names))
	for i, name := range names {
		lock, _, _ := s.Keys(name)
		got, err := cc.ClusterKeySlot(ctx, lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := redisstore.SlotOf(name); got != int64(want) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d; SlotOf(%q) = %d", lock, got, name, want)
		}
		slots[uint16(got)] = true
		if grants[i], err = s.TryAcquire(ctx, name, request("a", time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	scripts0, pipes0, _ := log.snapshot()
	wait := renewAll(ctx, s, grants)
	awaitPending(len(grants))
	redisstore.FlushRenewals(s)
	for i, err := range wait() {
		if err != nil {
			t.Errorf("Renew %s: %v", grants[i].Key, err)
		}
	}
	scripts, pipes, _ := log.snapshot()
	if scripts-scripts0 != len(slots) || pipes-pipes0 != 1 {
		t.Errorf("%d renewals in %d slots sent %d scripts in %d pipelines; want one script per slot in 1 pipeline",
			len(grants), len(slots), scripts-scripts0, pipes-pipes0)
	}
}

// The server time of one script renewing MaxRenewsPerScript locks, for
// the documentation (logged, not asserted: the machine may be busy).
func TestRenewBatchServerTime(t *testing.T) {
	srv := startRedis(t, 1)[0]
	c := newClient(t, srv.Addr())
	s, _, awaitPending := batchStore(t, c)
	n := redisstore.MaxRenewsPerScript
	grants := acquireN(t, s, "job", n, time.Minute)
	for range 2 { // the first batch loads the script
		wait := renewAll(t.Context(), s, grants)
		awaitPending(n)
		redisstore.FlushRenewals(s)
		for _, err := range wait() {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	wait := renewAll(t.Context(), s, grants)
	awaitPending(n)
	if err := c.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	redisstore.FlushRenewals(s)
	for _, err := range wait() {
		if err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_eval") {
			t.Logf("%d locks in one script: %s", n, strings.TrimSpace(line))
		}
	}
}
