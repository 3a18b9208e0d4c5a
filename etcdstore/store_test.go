package etcdstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// counts counts the gRPC requests a client sends, by method; a stream's
// messages count one each.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(method string) {
	c.mu.Lock()
	c.n[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
}

func (c *counts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

type countingStream struct {
	grpc.ClientStream
	c      *counts
	method string
}

func (s countingStream) SendMsg(m any) error {
	s.c.add(s.method)
	return s.ClientStream.SendMsg(m)
}

// connectCounting opens a client whose requests are counted.
func connectCounting(t testing.TB, endpoint string) (*clientv3.Client, *counts) {
	t.Helper()
	c := &counts{n: map[string]int{}}
	cc, err := etcdstore.Config{Endpoints: []string{endpoint}}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cc.DialOptions = append(cc.DialOptions,
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, conn, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, conn, method, opts...)
			if err != nil {
				return nil, err
			}
			return countingStream{ClientStream: s, c: c, method: method}, nil
		}))
	client, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, c
}

func newMutex(t testing.TB, b backend.Backend, name, id string, ttl time.Duration, opts ...baton.Option) *baton.Mutex {
	t.Helper()
	m, err := baton.NewMutex(b, name, append([]baton.Option{baton.WithIdentity(id), baton.WithTTL(ttl), baton.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func lock(t testing.TB, m *baton.Mutex) *baton.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock(%q) by %q: %v", m.Name(), m.Identity(), err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	return l
}

// TestRenewalCostIsPerLease: a Store holding many locks with one TTL keeps
// them all with one keepalive stream and one verification per period: no
// request per lock, however often the engine renews.
func TestRenewalCostIsPerLease(t *testing.T) {
	srv := startEtcd(t)
	client, reqs := connectCounting(t, srv.Endpoint())
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	const (
		locks = 200
		ttl   = time.Second // renew every 333ms: 600 renews per second through the engine
	)
	var renewed atomic.Int64
	obs := baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
		if e.Kind == baton.EventRenewed {
			renewed.Add(1)
		}
	}))
	leases := make([]*baton.Lease, locks)
	for i := range leases {
		leases[i] = lock(t, newMutex(t, s, fmt.Sprintf("job-%03d", i), "holder", ttl, obs))
	}
	before := reqs.snapshot()
	hold := 3 * ttl
	time.Sleep(hold) // the subject is the passing of time: renewals past the TTL
	after := reqs.snapshot()
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d ended while held for %v: %v", i, hold, err)
		}
	}
	d := func(m string) int { return after[m] - before[m] }
	t.Logf("held %d locks for %v: %d renewals by the engine; requests to etcd: Txn %d, Range %d, LeaseKeepAlive %d, LeaseTimeToLive %d",
		locks, hold, renewed.Load(), d("Txn"), d("Range"), d("LeaseKeepAlive"), d("LeaseTimeToLive"))
	if renewed.Load() < locks*int64(hold/ttl) {
		t.Errorf("only %d renewals in %v for %d locks with TTL %v", renewed.Load(), hold, locks, ttl)
	}
	if d("Txn")+d("Range")+d("Put")+d("DeleteRange") != 0 {
		t.Errorf("renewing sent key requests: %v -> %v", before, after)
	}
	// TTL 1s: lease 2s, keepalive every 500ms, verification every 500ms.
	if max := int(hold/(500*time.Millisecond)) + 3; d("LeaseKeepAlive") > max || d("LeaseTimeToLive") > max {
		t.Errorf("%d keepalives and %d verifications in %v; want at most %d each, whatever the number of locks",
			d("LeaseKeepAlive"), d("LeaseTimeToLive"), hold, max)
	}
	if d("LeaseKeepAlive") == 0 {
		t.Errorf("no keepalive in %v", hold)
	}
}

// TestLeasePerTTL: claims with one TTL share a lease; another TTL gets its
// own.
func TestLeasePerTTL(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	ctx := t.Context()
	leaseOf := func(name string, ttl time.Duration) int64 {
		t.Helper()
		if _, err := s.TryAcquire(ctx, name, backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		ck, _, _ := s.Keys(name)
		r, err := client.Get(ctx, ck)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("Get(%q): %v, %v", ck, r, err)
		}
		return r.Kvs[0].Lease
	}
	a, b, c := leaseOf("a", 5*time.Second), leaseOf("b", 5*time.Second), leaseOf("c", 7*time.Second)
	if a == 0 || a != b || c == a {
		t.Errorf("leases: a %x, b %x (same TTL), c %x (other TTL); want a == b != c, non-zero", a, b, c)
	}
	r, err := client.TimeToLive(ctx, clientv3.LeaseID(a))
	if err != nil || r.GrantedTTL != 6 {
		t.Errorf("lease for TTL 5s: %+v, %v; want a granted TTL of 6s (TTL plus max(TTL/10, 500ms), rounded up)", r, err)
	}
}

// TestAbandonedClaimExpires: a claim its holder stops renewing ends after
// its TTL even though the Store keeps the shared lease alive for another
// claim; it is never taken before TTL minus the engine's margin.
func TestAbandonedClaimExpires(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix))
	other := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix))
	const ttl = 2 * time.Second
	kept := lock(t, newMutex(t, s, "kept", "holder", ttl))
	sent := time.Now()
	if _, err := s.TryAcquire(t.Context(), "abandoned", backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	w, err := other.Watch(t.Context(), "abandoned")
	if err != nil {
		t.Fatal(err)
	}
	for {
		g, err := other.TryAcquire(t.Context(), "abandoned", backend.Request{Holder: "other", Nonce: baton.NewNonce(), TTL: ttl})
		if err == nil {
			if took := time.Since(sent); took < ttl-baton.DefaultSafetyMargin(ttl) {
				t.Errorf("taken over %v after the acquire was sent; TTL %v", took, ttl)
			} else if took > ttl+time.Second {
				t.Errorf("taken over only %v after the acquire was sent; TTL %v", took, ttl)
			}
			_ = other.Release(t.Context(), g)
			break
		}
		if !errors.Is(err, backend.ErrHeld) {
			t.Fatal(err)
		}
		within(t, 3*ttl, "a watch signal for the abandoned claim", w)
	}
	if err := kept.Err(); err != nil {
		t.Errorf("the renewed lock on the same lease ended: %v", err)
	}
}

// TestForceRelease: in plain mode (TestForceReleaseFair: fair mode), the
// holder of a force-released lock loses it within the verification
// period, with ErrLost but not ErrStepDown; the next holder gets a larger
// token.
func TestForceRelease(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	a := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), etcdstore.WithFair(false))
	admin := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), etcdstore.WithFair(false))
	const ttl = 3 * time.Second
	l := lock(t, newMutex(t, a, "job", "holder", ttl))
	if err := admin.ForceRelease(t.Context(), "job"); err != nil {
		t.Fatal(err)
	}
	forced := time.Now()
	within(t, ttl, "the holder's lease to end after a forced release", l.Done())
	t.Logf("the holder learned of the forced release after %v", time.Since(forced))
	if err := l.Err(); !errors.Is(err, backend.ErrLost) || errors.Is(err, baton.ErrStepDown) {
		t.Errorf("lease ended with %v; want ErrLost without ErrStepDown", err)
	}
	g, err := admin.TryAcquire(t.Context(), "job", backend.Request{Holder: "next", Nonce: baton.NewNonce(), TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= l.Token() {
		t.Errorf("token %d after %d", g.Token, l.Token())
	}
	if err := admin.ForceRelease(t.Context(), "never"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("ForceRelease of a lock never acquired: %v, want ErrNotFound", err)
	}
	if err := admin.Release(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	if err := admin.ForceRelease(t.Context(), "job"); err != nil {
		t.Errorf("ForceRelease of a free lock: %v, want nil", err)
	}
}

// TestCorruptRecord: a claim key baton did not write is reported, never
// overwritten, and stops Lock at once.
func TestCorruptRecord(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	ck, _, _ := s.Keys("bad")
	if _, err := client.Put(t.Context(), ck, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(t.Context(), "bad", backend.Request{Holder: "h", Nonce: "n", TTL: time.Second}); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Errorf("TryAcquire: %v, want ErrCorruptRecord", err)
	}
	if _, err := s.Get(t.Context(), "bad"); !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), ck) {
		t.Errorf("Get: %v, want ErrCorruptRecord naming %q", err, ck)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := newMutex(t, s, "bad", "h", time.Second).Lock(ctx); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Errorf("Lock: %v, want ErrCorruptRecord", err)
	}
	if r, err := client.Get(t.Context(), ck); err != nil || string(r.Kvs[0].Value) != "hello" {
		t.Errorf("the corrupt record was changed: %v, %v", r, err)
	}
}

// TestListCorruptRecord: List leaves a corrupt record out, names its key
// in the error, and returns the others, as the other backends' List do;
// before, one corrupt key made it return no record at all, so baton status
// showed none of the locks.
func TestListCorruptRecord(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	g, err := s.TryAcquire(t.Context(), "good", backend.Request{Holder: "h", Nonce: "n", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ck, _, _ := s.Keys("bad")
	if _, err := client.Put(t.Context(), ck, "hello"); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(t.Context())
	if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), ck) {
		t.Errorf("List: %v, want ErrCorruptRecord naming %q", err, ck)
	}
	if len(recs) != 1 || recs[0].Key != "good" || recs[0].Token != g.Token || !recs[0].Held() {
		t.Errorf("List returned %+v, want the one good record, held with token %d", recs, g.Token)
	}
}

// TestClose: after Close, claims are lost (a Lease still running on the
// Store ends at its next renew), watches are closed and every method
// fails with ErrClosed.
func TestClose(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	s, err := etcdstore.New(client, etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	l := lock(t, newMutex(t, s, "job", "holder", time.Second))
	w, err := s.Watch(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "the lease to end after Close", l.Done())
	if err := l.Err(); !errors.Is(err, backend.ErrLost) || !errors.Is(err, etcdstore.ErrClosed) {
		t.Errorf("lease ended with %v; want ErrLost and ErrClosed", err)
	}
	for range w { // closed by Close
	}
	if _, err := s.TryAcquire(t.Context(), "job", backend.Request{Holder: "h", Nonce: "n", TTL: time.Second}); !errors.Is(err, etcdstore.ErrClosed) {
		t.Errorf("TryAcquire after Close: %v", err)
	}
	if _, err := s.Watch(t.Context(), "job"); !errors.Is(err, etcdstore.ErrClosed) {
		t.Errorf("Watch after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseWhileEtcdDown: Close returns while etcd is down, with a watch
// being created: the etcd client's Watch waits for etcd to confirm it,
// and only the watch's own context, which the Store keeps apart from its
// own (see dropWatch), interrupts it. Close waited for it for ever, as
// long as etcd stayed down (seen in CI: a test that failed with its etcd
// killed hung in its clean-up until the 30-minute timeout).
func TestCloseWhileEtcdDown(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		srv := startEtcd(t)
		client := connect(t, srv.Endpoint())
		s, err := etcdstore.New(client, etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithLogger(quietLog), mode)
		if err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		if _, err := s.Watch(t.Context(), "job"); err != nil {
			t.Fatal(err)
		}
		awaitWatchCall(t)
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		if err := within(t, 30*time.Second, "Close with etcd down", closed); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// awaitWatchCall waits until two goroutines are inside the etcd client's
// Watch: the Store's anchor (see Store.Watch), which its own context ends,
// and the watch of the lock.
func awaitWatchCall(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(30 * time.Second); ; {
		n := runtime.Stack(buf, true)
		if bytes.Count(buf[:n], []byte("/client/v3.(*watcher).Watch(")) >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no goroutine called the etcd client's Watch within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestElector: two electors on two clients; the standby takes over within
// a round trip of the leader's release (watch, not polling), and a third
// process observes both leaders with Observe.
func TestElector(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			srv := startEtcd(t)
			prefix := freshPrefix(t)
			opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), etcdstore.WithFair(fair)}
			watcher := newStore(t, connect(t, srv.Endpoint()), opts...)
			seen, err := watcher.Observe(t.Context(), "leader")
			if err != nil {
				t.Fatal(err)
			}
			if r := within(t, 5*time.Second, "the first observation", seen); r.Held() {
				t.Fatalf("observed a leader before the election: %+v", r)
			}
			type term struct {
				id    string
				token uint64
				at    time.Time
			}
			terms := make(chan term, 4)
			// A long retry period: a takeover well before it (the retry is
			// jittered by 10%) proves the watch woke the standby, however
			// slow the machine.
			const retry = 10 * time.Second
			run := func(id string) (cancel func(), done <-chan error) {
				s := newStore(t, connect(t, srv.Endpoint()), opts...)
				e, err := baton.NewElector(s, "leader", baton.WithIdentity(id), baton.WithTTL(15*time.Second),
					baton.WithRenewDeadline(12*time.Second), baton.WithRetryPeriod(retry), baton.WithLogger(quietLog))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				ch := make(chan error, 1)
				go func() {
					ch <- e.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
						terms <- term{id, l.Token(), time.Now()}
						<-ctx.Done()
						return nil
					})
				}()
				return cancel, ch
			}
			stopA, doneA := run("elector-a")
			first := within(t, 5*time.Second, "a first leader", terms)
			if r := within(t, 5*time.Second, "observing the first leader", seen); r.Holder != first.id || r.Token != first.token {
				t.Errorf("observed %q (token %d), want %q (token %d)", r.Holder, r.Token, first.id, first.token)
			}
			stopB, doneB := run("elector-b")
			defer func() { stopB(); <-doneB }()
			stopA()
			stopped := time.Now()
			if err := <-doneA; !errors.Is(err, context.Canceled) {
				t.Errorf("Run of the first leader: %v", err)
			}
			second := within(t, 5*time.Second, "the standby to take over", terms)
			if second.id != "elector-b" || second.token <= first.token {
				t.Errorf("second term: %q with token %d after %q with %d", second.id, second.token, first.id, first.token)
			}
			if d := second.at.Sub(stopped); d > retry/2 {
				t.Errorf("the standby took over %v after the leader stopped; its retry period is %v: the watch should wake it at once", d, retry)
			}
			t.Logf("handover after the leader's release: %v", second.at.Sub(stopped))
			for {
				r := within(t, 5*time.Second, "observing the second leader", seen)
				if r.Holder == second.id {
					break
				}
			}
		})
	}
}

// TestForceReleaseFair: in fair mode the holder keeps its queue key while it
// holds; after a forced release its Store deletes that key once it notices,
// and the next waiter takes the lock.
func TestForceReleaseFair(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	admin := newStore(t, connect(t, srv.Endpoint()), opts...)
	const ttl = 3 * time.Second
	first := lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "first", ttl))
	// The second holder queues behind the first, so it holds with a queue key.
	heldOpt, held := eventOf(baton.EventHeld)
	second := lockAsync(t, t.Context(), newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "second", ttl, heldOpt))
	within(t, 5*time.Second, "the second to wait", held)
	within(t, 5*time.Second, "the second to wait again (queued)", held)
	if err := first.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	h := within(t, 5*time.Second, "the second to acquire", second)
	if h.err != nil {
		t.Fatal(h.err)
	}
	heldOpt3, held3 := eventOf(baton.EventHeld)
	third := lockAsync(t, t.Context(), newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "third", ttl, heldOpt3))
	within(t, 5*time.Second, "the third to wait", held3)

	if err := admin.ForceRelease(t.Context(), "job"); err != nil {
		t.Fatal(err)
	}
	forced := time.Now()
	within(t, ttl, "the second's lease to end", h.lease.Done())
	ended := time.Now()
	// The second's queue key goes at its claim's deadline, and the third,
	// which saw the claim, counts it as held until it could have expired
	// by its own clock (see ghostGrace): a few TTLs.
	got := within(t, 4*ttl, "the third to acquire", third)
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Logf("the next waiter acquired %v after the forced release (the holder's Store verifies every TTL/3)", got.at.Sub(forced))
	if !got.at.After(h.lease.ValidUntil()) || !got.at.After(ended) {
		t.Errorf("the third acquired at %v, before the second's validity ended at %v", got.at.Sub(forced), h.lease.ValidUntil().Sub(forced))
	}
	if got.lease.Token() <= h.lease.Token() {
		t.Errorf("token %d after %d", got.lease.Token(), h.lease.Token())
	}
}

// TestClientClosedByOwner: a Store made by New does not own its client;
// once the owner closes it, the Store's operations fail with an error
// matching backend.ErrClosed, which the engine does not retry, instead of
// a cancellation it retried until the caller's context ended.
func TestClientClosedByOwner(t *testing.T) {
	srv := startEtcd(t)
	c, err := etcdstore.Open(context.Background(), etcdstore.Config{Endpoints: []string{srv.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, c, etcdstore.WithPrefix(freshPrefix(t)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.TryAcquire(ctx, "owner.closed", backend.Request{Holder: "a", Nonce: "n1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, "owner.closed.2", backend.Request{Holder: "a", Nonce: "n2", TTL: time.Minute})
	if !errors.Is(err, backend.ErrClosed) || !strings.Contains(err.Error(), "client was closed") {
		t.Fatalf("TryAcquire after the client was closed = %v; want ErrClosed naming the client", err)
	}
	m, err := baton.NewMutex(s, "owner.closed.3", baton.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(ctx); !errors.Is(err, backend.ErrClosed) || ctx.Err() != nil {
		t.Fatalf("Lock after the client was closed = %v (context: %v); want ErrClosed at once", err, ctx.Err())
	}
}
