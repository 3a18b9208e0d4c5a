package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a go-redis hook that counts a client's round trips: a
// command, or a whole pipeline, other than those that set up a new
// connection (HELLO, CLIENT SETINFO).
type roundTrips struct{ n atomic.Int64 }

func setup(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !setup(cmds[0]) {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestListManyLocks: List reads the records of many locks a few hundred
// per round trip, not one by one ('baton status' of 10,000 locks took 25 s
// where a round trip takes 2.5 ms), and still returns every record, in
// name order, with its holder and token.
func TestListManyLocks(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	const n = 600
	writer := newStore(t, srv.Addr(), prefix)
	tokens := takeMany(t, ctx, writer, n)
	c := newClient(t, srv.Addr())
	trips := &roundTrips{}
	c.AddHook(trips)
	s := mustNew(t, c, redisstore.WithPrefix(prefix))
	t.Cleanup(func() { _ = s.Close() })
	recs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkMany(t, recs, tokens)
	if got := trips.n.Load(); got > 10 {
		t.Errorf("List of %d locks took %d round trips, want at most 10", n, got)
	}
}

// TestRedlockListManyLocks: as TestListManyLocks, on a Redlock of three
// servers: each server is read a few hundred locks per round trip.
func TestRedlockListManyLocks(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	const n = 600
	writer := newRedlock(t, servers, prefix)
	tokens := takeMany(t, ctx, writer, n)
	clients := make([]redis.UniversalClient, len(servers))
	trips := make([]*roundTrips, len(servers))
	for i, srv := range servers {
		c := newClient(t, srv.Addr())
		trips[i] = &roundTrips{}
		c.AddHook(trips[i])
		clients[i] = c
	}
	r, err := redisstore.NewRedlock(clients, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	recs, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkMany(t, recs, tokens)
	for i, tr := range trips {
		if got := tr.n.Load(); got > 10 {
			t.Errorf("List of %d locks took %d round trips to server %d, want at most 10", n, got, i)
		}
	}
}

// takeMany takes n locks many-000 ... through b, held by h0 ... h6 in
// turn, and returns their tokens.
func takeMany(t *testing.T, ctx context.Context, b backend.Backend, n int) []uint64 {
	t.Helper()
	tokens := make([]uint64, n)
	for i := range n {
		g, err := b.TryAcquire(ctx, fmt.Sprintf("many-%03d", i), request(fmt.Sprintf("h%d", i%7), time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = g.Token
	}
	return tokens
}

// checkMany checks that recs are the records of takeMany's locks, in name
// order, with their holders and tokens.
func checkMany(t *testing.T, recs []backend.Record, tokens []uint64) {
	t.Helper()
	if len(recs) != len(tokens) {
		t.Fatalf("List returned %d records, want %d", len(recs), len(tokens))
	}
	for i, r := range recs {
		if want := fmt.Sprintf("many-%03d", i); r.Key != want || r.Holder != fmt.Sprintf("h%d", i%7) || r.Token != tokens[i] || !r.Held() {
			t.Errorf("record %d: %s held by %q with token %d (held %v), want %s held by h%d with token %d",
				i, r.Key, r.Holder, r.Token, r.Held(), want, i%7, tokens[i])
		}
	}
}
