package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFairArrivalOrder: 100 contenders, each a process of its own (a Store
// with its own lease and identity; they share 4 etcd clients), queue
// behind a holder one after another and get the lock strictly in the order
// they arrived, each woken by its predecessor alone, with tokens that
// strictly increase although every handover after the first is made by the
// releasing transaction: the whole queue costs a few requests per
// contender, not one per contender per handover.
func TestFairArrivalOrder(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), etcdstore.WithFair(true)}
	var (
		clients []*clientv3.Client
		reqs    []*counts
	)
	for range 4 {
		c, n := connectCounting(t, srv.Endpoint())
		clients, reqs = append(clients, c), append(reqs, n)
	}
	txns := func() (n int) {
		for _, r := range reqs {
			n += r.snapshot()["Txn"]
		}
		return n
	}
	const (
		contenders = 100
		ttl        = 5 * time.Second
	)
	hs := newStore(t, clients[0], opts...)
	holder := lock(t, newMutex(t, hs, "job", "holder", ttl))
	_, _, qp := hs.Keys("job")
	wctx, stop := context.WithCancel(t.Context())
	defer stop()
	queue := clients[0].Watch(wctx, qp, clientv3.WithPrefix())

	var (
		mu     sync.Mutex
		order  []int
		tokens []uint64
	)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	results := make([]<-chan acquisition, contenders)
	before := txns()
	for i := range contenders {
		s := newStore(t, clients[i%len(clients)], opts...)
		id := fmt.Sprintf("contender-%03d", i)
		m := newMutex(t, s, "job", id, ttl)
		ch := make(chan acquisition, 1)
		results[i] = ch
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err := m.Lock(ctx)
			if err == nil {
				mu.Lock()
				order, tokens = append(order, i), append(tokens, l.Token())
				mu.Unlock()
				err = l.Unlock(ctx)
			}
			ch <- acquisition{l, err, time.Now()}
		}()
		t.Cleanup(func() { <-done })
		// The next contender arrives only once this one is queued.
		awaitQueued(t, queue, id)
	}
	queued := txns() - before
	start := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		if a := within(t, 30*time.Second, fmt.Sprintf("contender %d", i), ch); a.err != nil {
			t.Fatalf("contender %d: %v", i, a.err)
		}
	}
	elapsed := time.Since(start)
	drained := txns() - before - queued
	t.Logf("%d contenders queued with %d transactions; the queue drained in %v (%v per handover) with %d transactions",
		contenders, queued, elapsed, elapsed/contenders, drained)
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v; want 0..%d in order", order, contenders-1)
		}
		if i > 0 && tokens[i] <= tokens[i-1] {
			t.Errorf("contender %d got token %d after token %d", i, tokens[i], tokens[i-1])
		}
	}
	// Each handover: the release, which hands the lock to the next waiter
	// (1), and the waiter's read that collects it (1); a little slack.
	if limit := 3 * contenders; drained > limit {
		t.Errorf("%d transactions to drain a queue of %d; want at most %d (a thundering herd would need about %d)",
			drained, contenders, limit, contenders*contenders/2)
	}
}

// awaitQueued reads queue (a watch of a lock's queue prefix) until a
// queue key of holder id appears.
func awaitQueued(t *testing.T, queue clientv3.WatchChan, id string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case wr, ok := <-queue:
			if !ok || wr.Err() != nil {
				t.Fatalf("watching the queue: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut && strings.Contains(string(ev.Kv.Value), " holder="+id+" ") {
					return
				}
			}
		case <-timeout:
			t.Fatalf("%s did not queue within 10s", id)
		}
	}
}

// TestFairHandoff: a holder that knows the waiter behind it hands the lock
// over in its releasing transaction: the claim is put with the waiter's
// value on the waiter's lease, with a larger token, and the waiter's next
// attempt collects it without a write. A waiter that gives up before it
// collects does not keep the lock: its Store deletes the claim with its
// place, and the waiter behind it acquires long before the TTL.
func TestFairHandoff(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	client := connect(t, srv.Endpoint())
	ctx := t.Context()
	const ttl = 10 * time.Second
	first := lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "first", ttl))
	ck, _, qp := newStore(t, client, opts...).Keys("job")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	queue := client.Watch(wctx, qp, clientv3.WithPrefix())

	// Three waiters driven through the Backend (a Watch open, Waiting set),
	// so that the test decides when each tries again, and a Mutex behind.
	type waiter struct {
		s      *etcdstore.Store
		req    backend.Request
		wake   <-chan struct{}
		cancel context.CancelFunc
		ctx    context.Context
	}
	var ws []*waiter
	for _, id := range []string{"w1", "w2", "w3"} {
		w := &waiter{s: newStore(t, connect(t, srv.Endpoint()), opts...),
			req: backend.Request{Holder: id, Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}}
		w.ctx, w.cancel = context.WithCancel(ctx)
		defer w.cancel()
		var err error
		if w.wake, err = w.s.Watch(w.ctx, "job"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.s.TryAcquire(w.ctx, "job", w.req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("%s: %v, want ErrHeld", id, err)
		}
		awaitQueued(t, queue, id)
		ws = append(ws, w)
	}
	last := lockAsync(t, ctx, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "last", ttl))
	awaitQueued(t, queue, "last")

	// acquire waits for w's wake-ups until its attempt acquires.
	acquire := func(w *waiter) backend.Grant {
		t.Helper()
		for {
			within(t, 5*time.Second, w.req.Holder+"'s wake-up", w.wake)
			g, err := w.s.TryAcquire(w.ctx, "job", w.req)
			if err == nil {
				return g
			}
			if !errors.Is(err, backend.ErrHeld) {
				t.Fatalf("%s: %v", w.req.Holder, err)
			}
		}
	}
	claim := func() *mvccpb.KeyValue {
		t.Helper()
		r, err := client.Get(ctx, ck)
		if err != nil {
			t.Fatal(err)
		}
		return kvOrNil(r.Kvs)
	}

	// first had no place: its release reads the oldest place and hands
	// the lock to w1.
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g1 := acquire(ws[0])
	if g1.Token <= first.Token() {
		t.Fatalf("w1's token %d after %d", g1.Token, first.Token())
	}
	// w1's release hands the lock to w2.
	if err := ws[0].s.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	kv := claim()
	if kv == nil || !strings.Contains(string(kv.Value), " holder=w2 nonce="+ws[1].req.Nonce+" ") || uint64(kv.ModRevision) <= g1.Token {
		t.Fatalf("after w1's release the claim is %v; want it handed to w2 with a token above %d", kv, g1.Token)
	}
	// w2 collects it without a write: etcd's revision does not move.
	within(t, 5*time.Second, "w2's wake-up", ws[1].wake)
	g2, err := ws[1].s.TryAcquire(ws[1].ctx, "job", ws[1].req)
	if err != nil {
		t.Fatalf("w2 collecting the handed lock: %v", err)
	}
	if g2.Token != uint64(kv.ModRevision) || g2.Holder != "w2" || g2.Nonce != ws[1].req.Nonce {
		t.Fatalf("w2's grant %+v; want token %d", g2, kv.ModRevision)
	}
	if after := claim(); after.ModRevision != kv.ModRevision {
		t.Fatalf("collecting wrote the claim (mod revision %d, was %d)", after.ModRevision, kv.ModRevision)
	}
	if _, err := ws[1].s.TryAcquire(ws[1].ctx, "job", ws[1].req); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("w2 collecting twice: %v, want ErrHeld", err)
	}
	// w2's release hands the lock to w3, which gives up before collecting.
	if err := ws[1].s.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	kv = claim()
	if kv == nil || !strings.Contains(string(kv.Value), " holder=w3 ") || uint64(kv.ModRevision) <= g2.Token {
		t.Fatalf("after w2's release the claim is %v; want it handed to w3", kv)
	}
	gaveUp := time.Now()
	ws[2].cancel()
	a := within(t, 5*time.Second, "the Mutex behind w3", last)
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Logf("the waiter behind one that gave up acquired %v later (TTL %v)", a.at.Sub(gaveUp), ttl)
	if a.lease.Token() <= uint64(kv.ModRevision) {
		t.Errorf("token %d after the handed claim's %d", a.lease.Token(), kv.ModRevision)
	}
	if got := claim(); got == nil || !strings.Contains(string(got.Value), " holder=last ") {
		t.Errorf("claim %v; want last's", got)
	}
}

func kvOrNil(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// TestFairTightLoop: 8 contenders, each its own Store, in tight Lock and
// Unlock loops (the benchmark's shape), round after round. No round may
// stall: a waiter whose attempt was in flight when the lock was handed to
// it must not take its older read as fresh and sleep through the change.
// Every acquisition gets a larger token.
func TestFairTightLoop(t *testing.T) {
	srv := startEtcd(t)
	const (
		contenders = 8
		each       = 30
		rounds     = 4
		ttl        = 30 * time.Second // a stall would last until a retry at about the TTL
	)
	for round := range rounds {
		opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			last uint64
		)
		start := time.Now()
		for i := range contenders {
			m := newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", fmt.Sprintf("c%d", i), ttl)
			wg.Go(func() {
				for k := range each {
					l, err := m.Lock(ctx)
					if err != nil {
						t.Errorf("round %d: c%d after %d acquisitions: %v", round, i, k, err)
						return
					}
					mu.Lock()
					if l.Token() <= last {
						t.Errorf("round %d: token %d after %d", round, l.Token(), last)
					}
					last = l.Token()
					mu.Unlock()
					if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
						t.Errorf("round %d: unlock: %v", round, err)
					}
				}
			})
		}
		wg.Wait()
		cancel()
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("round %d: %d acquisitions in %v", round, contenders*each, time.Since(start))
	}
}

// TestFairRetryAfterQueueing: the engine's attempt right after the one
// that took a place in the queue (it retries at once when its Watch opens)
// asks etcd nothing; the follower compares the place's read with the
// watch's start instead. A release between the place's read and the
// watch's start still wakes the waiter, which then acquires.
func TestFairRetryAfterQueueing(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	const ttl = 10 * time.Second
	ctx := t.Context()
	for _, releaseFirst := range []bool{false, true} {
		holder := lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "holder", ttl))
		client, n := connectCounting(t, srv.Endpoint())
		s := newStore(t, client, opts...)
		req := backend.Request{Holder: "waiter", Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}
		if _, err := s.TryAcquire(ctx, "job", req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("first attempt: %v, want ErrHeld", err)
		}
		if releaseFirst {
			// Released (plainly: the holder had no place) before the
			// waiter's watch starts.
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		wctx, stop := context.WithCancel(ctx)
		wake, err := s.Watch(wctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		before := n.snapshot()["Txn"]
		if _, err := s.TryAcquire(ctx, "job", req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("releaseFirst=%v: the attempt after the Watch opened: %v, want ErrHeld", releaseFirst, err)
		}
		if got := n.snapshot()["Txn"] - before; got != 0 {
			t.Errorf("releaseFirst=%v: the attempt after the Watch opened sent %d transactions; want none", releaseFirst, got)
		}
		if !releaseFirst {
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var g backend.Grant
		for {
			within(t, 5*time.Second, "the waiter's wake-up", wake)
			if g, err = s.TryAcquire(ctx, "job", req); err == nil {
				break
			}
			if !errors.Is(err, backend.ErrHeld) {
				t.Fatal(err)
			}
		}
		if g.Token <= holder.Token() {
			t.Errorf("token %d after %d", g.Token, holder.Token())
		}
		if err := s.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		stop()
	}
}

// TestFairCollectFromEvent: the release that hands the lock to a waiter
// touches that waiter's queue key, so the waiter behind it learns that it
// is next in line: its Store watches the claim and reads the waiter behind
// it ahead of time. When the lock is handed to it in turn, it collects the
// lock from the claim watch's event, without a request to etcd, and its own
// release hands the lock on to the waiter behind it. A holder that knows
// no waiter (it had no place; or one queued after its reads) reads the
// oldest place when it releases, and hands the lock to it.
func TestFairCollectFromEvent(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	const ttl = 10 * time.Second
	ctx := t.Context()
	client := connect(t, srv.Endpoint())
	ck, _, qp := newStore(t, client, opts...).Keys("job")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	queue := client.Watch(wctx, qp, clientv3.WithPrefix())
	first := lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "first", ttl))

	type waiter struct {
		s    *etcdstore.Store
		n    *counts
		req  backend.Request
		wake <-chan struct{}
	}
	var ws []*waiter
	for _, id := range []string{"w0", "w1", "w2", "w3"} {
		c, n := connectCounting(t, srv.Endpoint())
		w := &waiter{s: newStore(t, c, opts...), n: n, req: backend.Request{Holder: id, Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}}
		var err error
		if w.wake, err = w.s.Watch(wctx, "job"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.s.TryAcquire(ctx, "job", w.req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("%s: %v, want ErrHeld", id, err)
		}
		awaitQueued(t, queue, id)
		ws = append(ws, w)
	}
	acquire := func(w *waiter) backend.Grant {
		t.Helper()
		for {
			within(t, 5*time.Second, w.req.Holder+"'s wake-up", w.wake)
			g, err := w.s.TryAcquire(ctx, "job", w.req)
			if err == nil {
				return g
			}
			if !errors.Is(err, backend.ErrHeld) {
				t.Fatalf("%s: %v", w.req.Holder, err)
			}
		}
	}
	handedTo := func(id, nonce string, above uint64) {
		t.Helper()
		r, err := client.Get(ctx, ck)
		if err != nil {
			t.Fatal(err)
		}
		if kv := kvOrNil(r.Kvs); kv == nil || !strings.Contains(string(kv.Value), " holder="+id+" nonce="+nonce+" ") || uint64(kv.ModRevision) <= above {
			t.Fatalf("the claim is %v; want it handed to %s above token %d", kv, id, above)
		}
	}
	// collect takes the lock handed to w from its wake-up, and checks
	// that w's Store sent no request for it.
	collect := func(w *waiter, above uint64) backend.Grant {
		t.Helper()
		within(t, 5*time.Second, w.req.Holder+"'s wake-up", w.wake)
		awaitPlace(t, "the claim handed to "+w.req.Holder+" seen on a watch", func() bool {
			_, _, handed := etcdstore.NextInLine(w.s, "job", w.req.Holder)
			return handed
		})
		before := w.n.snapshot()
		g, err := w.s.TryAcquire(ctx, "job", w.req)
		if err != nil {
			t.Fatalf("%s collecting the handed lock: %v", w.req.Holder, err)
		}
		after := w.n.snapshot()
		for _, m := range []string{"Txn", "Range"} {
			if d := after[m] - before[m]; d != 0 {
				t.Errorf("%s collected with %d %s requests; want none", w.req.Holder, d, m)
			}
		}
		if g.Token <= above {
			t.Errorf("%s's token %d after %d", w.req.Holder, g.Token, above)
		}
		return g
	}
	// first had no place and knows no waiter: its release reads the
	// oldest place and hands the lock to w0, which waits for the claim
	// itself and collects it from that watch's event.
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	handedTo("w0", ws[0].req.Nonce, first.Token())
	g0 := collect(ws[0], first.Token())
	// w0's release hands the lock to w1 and touches w1's key: w2 is next
	// in line.
	if err := ws[0].s.Release(ctx, g0); err != nil {
		t.Fatal(err)
	}
	handedTo("w1", ws[1].req.Nonce, g0.Token)
	g1 := acquire(ws[1])
	// w2's Store learned from the touch of w1's key that w2 is next in
	// line: it watches the claim and reads w3's place.
	awaitPlace(t, "w2 next in line, watching the claim, knowing w3", func() bool {
		watching, knowsNext, _ := etcdstore.NextInLine(ws[2].s, "job", "w2")
		return watching && knowsNext
	})
	if err := ws[1].s.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	g2 := collect(ws[2], g1.Token)
	// w2 knew w3: its release hands the lock to w3.
	if err := ws[2].s.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	handedTo("w3", ws[3].req.Nonce, g2.Token)
	g3 := acquire(ws[3])
	if g3.Holder != "w3" || g3.Token <= g2.Token {
		t.Fatalf("w3's grant %+v after token %d", g3, g2.Token)
	}
	// w4 queues while w3 holds, after every read w3's Store made: w3's
	// release reads the place behind its own and hands the lock to w4.
	c, n := connectCounting(t, srv.Endpoint())
	w4 := &waiter{s: newStore(t, c, opts...), n: n, req: backend.Request{Holder: "w4", Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}}
	var err error
	if w4.wake, err = w4.s.Watch(wctx, "job"); err != nil {
		t.Fatal(err)
	}
	if _, err := w4.s.TryAcquire(ctx, "job", w4.req); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("w4: %v, want ErrHeld", err)
	}
	awaitQueued(t, queue, "w4")
	if err := ws[3].s.Release(ctx, g3); err != nil {
		t.Fatal(err)
	}
	handedTo("w4", w4.req.Nonce, g3.Token)
	if g4 := acquire(w4); g4.Holder != "w4" || g4.Token <= g3.Token {
		t.Fatalf("w4's grant %+v after token %d", g4, g3.Token)
	}
}

// awaitPlace polls cond, the state of a Store's place in a queue, until it
// holds; it fails t after 5s. The state changes in the Store's watch
// goroutine, which has no event for tests to wait on.
func awaitPlace(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

// TestFairHandoffFromWatchedQueue: a holder that took a free lock with
// TryLock reads the queue when it releases, until its Store has seen the
// lock contended; from then on it learns of the waiters that queue behind
// it from a watch of the queue (a place that leaves drops out of that
// view), and its release hands the lock to the oldest of them without a
// read. A waiting attempt watches from its first tenure.
func TestFairHandoffFromWatchedQueue(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	client, reqs := connectCounting(t, srv.Endpoint())
	hs := newStore(t, client, opts...)
	ctx := t.Context()
	const ttl = 10 * time.Second
	take := func() backend.Grant {
		t.Helper()
		g, err := hs.TryAcquire(ctx, "job", backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	// queue has a waiter queue, driven through the Backend (a Watch open,
	// Waiting set).
	queue := func(id string) (*etcdstore.Store, backend.Request, <-chan struct{}) {
		t.Helper()
		s := newStore(t, connect(t, srv.Endpoint()), opts...)
		req := backend.Request{Holder: id, Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}
		wake, err := s.Watch(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.TryAcquire(ctx, "job", req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("%s: %v, want ErrHeld", id, err)
		}
		return s, req, wake
	}
	// release releases g and has waiter s collect the lock and, if done,
	// release it in turn; it returns the reads the holder's release sent.
	release := func(g backend.Grant, s *etcdstore.Store, req backend.Request, wake <-chan struct{}, done bool) int {
		t.Helper()
		reads := reqs.snapshot()["Range"]
		if err := hs.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		reads = reqs.snapshot()["Range"] - reads
		within(t, 5*time.Second, req.Holder+"'s wake-up", wake)
		wg, err := s.TryAcquire(ctx, "job", req)
		if err != nil {
			t.Fatalf("%s collecting the handed lock: %v", req.Holder, err)
		}
		if wg.Token <= g.Token {
			t.Errorf("%s's token %d after the holder's %d", req.Holder, wg.Token, g.Token)
		}
		if done {
			if err := s.Release(ctx, wg); err != nil {
				t.Fatal(err)
			}
		}
		return reads
	}

	// First tenure: the Store has not seen the lock contended, so it
	// watches nothing and reads when it releases.
	g := take()
	s1, r1, wake1 := queue("first")
	// The read is sent once the claim has been held for its acquire's
	// round trip; on a busy machine that round trip can outlast the
	// queueing above.
	awaitPlace(t, "the holder's claim held for its acquire's round trip", func() bool { return etcdstore.HeldPastRoundTrip(hs, "job") })
	if n := release(g, s1, r1, wake1, true); n != 1 {
		t.Errorf("the first release sent %d reads; want 1 (no watch yet)", n)
	}

	// Second tenure: its last release handed the lock over, so it watches.
	g = take()
	gone, _, _ := queue("gone")
	ws, wreq, wake := queue("waiter")
	awaitPlace(t, "the holder's watch shows both places", func() bool {
		h, ok := etcdstore.WatchedPlaces(hs, "job")
		return ok && slices.Equal(h, []string{"gone", "waiter"})
	})
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	awaitPlace(t, "the holder's watch drops the place that left", func() bool {
		h, ok := etcdstore.WatchedPlaces(hs, "job")
		return ok && slices.Equal(h, []string{"waiter"})
	})
	if n := release(g, ws, wreq, wake, false); n != 0 {
		t.Errorf("the release sent %d reads; want none (the watch showed the waiter)", n)
	}
	if _, ok := etcdstore.WatchedPlaces(hs, "job"); ok {
		t.Error("the holder's watch of the queue is still open after its release")
	}

	// A waiting attempt (Lock) that finds a lock free watches its queue
	// from its first tenure: its caller expects to contend.
	ls := newStore(t, connect(t, srv.Endpoint()), opts...)
	lg, err := ls.TryAcquire(ctx, "other", backend.Request{Holder: "locker", Nonce: baton.NewNonce(), TTL: ttl, Waiting: true})
	if err != nil {
		t.Fatal(err)
	}
	awaitPlace(t, "a waiting attempt's watch of the queue", func() bool { _, ok := etcdstore.WatchedPlaces(ls, "other"); return ok })
	if err := ls.Release(ctx, lg); err != nil {
		t.Fatal(err)
	}
}

// TestPlacesWatchesBounded: a Store holding more contended locks than it
// keeps watches of queues for opens no more than its bound, and closes
// each with its claim.
func TestPlacesWatchesBounded(t *testing.T) {
	srv := startEtcd(t)
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true))
	ctx := t.Context()
	_, bound := etcdstore.PlacesWatches(s)
	grants := make([]backend.Grant, bound+1)
	for i := range grants {
		etcdstore.MarkContended(s, fmt.Sprintf("job-%d", i))
		var err error
		grants[i], err = s.TryAcquire(ctx, fmt.Sprintf("job-%d", i), backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
	}
	awaitPlace(t, "the bound of watches open", func() bool { n, _ := etcdstore.PlacesWatches(s); return n == bound })
	for _, g := range grants {
		if err := s.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	awaitPlace(t, "every watch closed with its claim", func() bool { n, _ := etcdstore.PlacesWatches(s); return n == 0 })
}

// TestFairForgetsUncontendedNames: a Store that takes many distinct lock
// names free, one after another (a lock per job or per invoice), keeps no
// state for them once they are released: its memory does not grow with
// the names it has used.
func TestFairForgetsUncontendedNames(t *testing.T) {
	srv := startEtcd(t)
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true))
	ctx := t.Context()
	for i := range 40 {
		req := backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: time.Minute, Waiting: i%2 == 0}
		g, err := s.TryAcquire(ctx, fmt.Sprintf("invoice-%d", i), req)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if busy, contended, tail := etcdstore.FairMemory(s); busy+contended+tail != 0 {
		t.Errorf("after 40 names taken free and released: state kept for %d busy, %d contended, %d tail names; want none", busy, contended, tail)
	}
}

// TestFairForgetsContendedNames: a Store that hands many distinct lock
// names over to waiters once each (a lock per entity) forgets, as it goes,
// the names it saw contended longer than twice their TTL ago. It kept one
// entry per name handed over for as long as it lived (300 names: 298).
func TestFairForgetsContendedNames(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	a := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), etcdstore.WithFair(true))
	b := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), etcdstore.WithFair(true))
	ctx := t.Context()
	const ttl = time.Second
	handOver := func(name string) {
		t.Helper()
		ga, err := a.TryAcquire(ctx, name, backend.Request{Holder: "a", Nonce: baton.NewNonce(), TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		wb := backend.Request{Holder: "b", Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}
		if _, err := b.TryAcquire(ctx, name, wb); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("the waiter's first attempt on %s: %v, want ErrHeld (queued)", name, err)
		}
		// Held for its acquire's round trip, the release reads the queue
		// and hands the lock over.
		awaitPlace(t, "the claim held for its acquire's round trip", func() bool { return etcdstore.HeldPastRoundTrip(a, name) })
		if err := a.Release(ctx, ga); err != nil {
			t.Fatal(err)
		}
		gb, err := b.TryAcquire(ctx, name, wb)
		if err != nil {
			t.Fatalf("the waiter's attempt after the release of %s: %v", name, err)
		}
		if err := b.Release(ctx, gb); err != nil {
			t.Fatal(err)
		}
	}
	const perRound = 100
	for i := range perRound {
		handOver(fmt.Sprintf("entity-%d", i))
	}
	// Let the first round's names age past twice their TTL: the sweep's
	// rule is about time, so this waits for time, not for an event.
	time.Sleep(2*ttl + 100*time.Millisecond)
	for i := range perRound {
		handOver(fmt.Sprintf("entity-%d", perRound+i))
	}
	if _, contended, _ := etcdstore.FairMemory(a); contended > perRound+perRound/3 {
		t.Errorf("after %d names handed over, the first %d over %v ago, %d are kept as contended; want the old ones forgotten", 2*perRound, perRound, 2*ttl, contended)
	}
}
