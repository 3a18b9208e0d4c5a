package etcdstore_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFairOrderKeptAcrossOutage: two fair waiters whose connections to
// etcd are lost (reset, and no new one answers) are woken within a second
// or so, long before the engine's retry a TTL later, and their attempts
// fail naming the unreachable store (ErrUnavailable, which the engine
// logs and retries) instead of answering "held" from a watch that the
// etcd client resumes silently. Their places stay in the queue: their
// order is etcd's, and goes only with their leases, which outlast the
// outage. Once etcd answers again, they acquire in the order they queued.
func TestFairOrderKeptAcrossOutage(t *testing.T) {
	srv := startEtcd(t)
	proxy := startFaultProxy(t, srv.Addr())
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	direct := connect(t, srv.Endpoint())
	hs := newStore(t, direct, opts...)
	holder := lock(t, newMutex(t, hs, "job", "holder", 10*time.Second))
	_, _, qp := hs.Keys("job")
	queue := direct.Watch(t.Context(), qp, clientv3.WithPrefix())

	const ttl = 30 * time.Second // the waiters' engines retry on their own only every TTL
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	type waiter struct {
		failed <-chan error
		got    <-chan acquisition
	}
	start := func(id string) waiter {
		failures := make(chan error, 16)
		s := newStore(t, connect(t, "http://"+proxy.Addr()), opts...)
		m := newMutex(t, s, "job", id, ttl, baton.WithLogger(slog.New(&failureHandler{errs: failures})))
		w := waiter{failed: failures, got: lockAsync(t, ctx, m)}
		awaitQueued(t, queue, id)
		return w
	}
	first, second := start("first"), start("second")

	proxy.Cut()
	proxy.Reset()
	for _, w := range []waiter{first, second} {
		err := within(t, 20*time.Second, "a failed attempt once the connection was lost", w.failed)
		if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrHeld) {
			t.Errorf("an attempt without a connection: %v, want ErrUnavailable", err)
		}
	}
	proxy.Restore()

	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var a acquisition
	select {
	case a = <-first.got:
	case b := <-second.got:
		t.Fatalf("the second waiter acquired first (%v, %v)", b.lease, b.err)
	case <-time.After(30 * time.Second):
		t.Fatal("neither waiter acquired within 30s of the release")
	}
	if a.err != nil {
		t.Fatalf("the first waiter's Lock: %v", a.err)
	}
	if a.lease.Token() <= holder.Token() {
		t.Errorf("the first waiter's token %d after the holder's %d", a.lease.Token(), holder.Token())
	}
	if err := a.lease.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := within(t, 30*time.Second, "the second waiter's Lock", second.got)
	if b.err != nil || b.lease.Token() <= a.lease.Token() {
		t.Fatalf("the second waiter's Lock: %v (token after %d), want a larger token", b.err, a.lease.Token())
	}
}

// failureHandler is a slog.Handler that sends the error of every failed
// attempt that the engine logs to errs, and drops every other record.
type failureHandler struct{ errs chan<- error }

func (h *failureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *failureHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "baton: acquire failed; retrying" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" {
			select {
			case h.errs <- err:
			default:
			}
		}
		return true
	})
	return nil
}

func (h *failureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *failureHandler) WithGroup(string) slog.Handler      { return h }

// TestFairIdleStandbyAsksNothing: a fair standby whose connection to etcd
// stays up sends etcd no read and no transaction while the lock stays
// held: its engine's retries, one a TTL, are answered from its watch.
func TestFairIdleStandbyAsksNothing(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	const ttl = 2 * time.Second
	lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "holder", ttl))
	client, reqs := connectCounting(t, srv.Endpoint())
	answers := &heldAnswers{nth: 3, reached: make(chan time.Time, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	standby := lockAsync(t, ctx, newMutex(t, newStore(t, client, opts...), "job", "standby", ttl, baton.WithObserver(answers)))
	// The third answer comes from the engine's periodic retry, once the
	// watch is established.
	within(t, 20*time.Second, "the standby to find the lock held three times", answers.reached)
	before, before0 := reqs.snapshot(), time.Now()
	time.Sleep(3 * ttl) // the subject is the passing of time: retries while nothing changes
	after := reqs.snapshot()
	for _, m := range []string{"Range", "Txn"} {
		if d := after[m] - before[m]; d != 0 {
			t.Errorf("the idle standby sent %d %s requests in %v", d, m, 3*ttl)
		}
	}
	if n := answers.since(before0); n == 0 {
		t.Errorf("the standby's engine did not try once in %v; want one try a TTL", 3*ttl)
	}
	cancel()
	if got := <-standby; got.err == nil {
		t.Error("the standby acquired a held lock")
	}
}
