package etcdstore_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReleaseDuringVerificationIsNoLoss: a verification of the Store's
// lease that finds a claim's key gone while that claim's Release is in
// flight (its transaction applied, its answer not yet handled) is the
// release, not a loss. The Store warned 'claim key gone; the lock is lost'
// for the released lock: once in 30,000 TryLock and Unlock pairs on
// distinct names, and more often the more releases a Store has in flight.
func TestReleaseDuringVerificationIsNoLoss(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	txns := &heldTxns{KV: client.KV}
	client.KV = txns
	leases := &answeredTTLs{Lease: client.Lease, answered: make(chan struct{}, 16)}
	client.Lease = leases
	logs := &logLines{}
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)),
		etcdstore.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	// The Store verifies its lease every TTL/3 while a claim of it lives:
	// twice in the claim's TTL after the release's transaction.
	req := backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: 4 * time.Second}
	g, err := s.TryAcquire(t.Context(), "entity", req)
	if err != nil {
		t.Fatal(err)
	}
	committed, proceed := txns.holdNext()
	released := make(chan error, 1)
	go func() { released <- s.Release(context.Background(), g) }()
	within(t, 10*time.Second, "the release's transaction", committed)
	// Two verifications answered after the release's transaction: the
	// first found the key gone and was handled before the second began.
	for range len(leases.answered) {
		<-leases.answered
	}
	within(t, 10*time.Second, "a verification", leases.answered)
	within(t, 10*time.Second, "a second verification", leases.answered)
	close(proceed)
	if err := within(t, 10*time.Second, "Release", released); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := logs.count("lock is lost"); n != 0 {
		t.Errorf("a verification during the release called the released lock lost:\n%s", logs)
	}
}

// heldTxns holds the answer of the next transaction committed after
// holdNext until proceed is closed.
type heldTxns struct {
	clientv3.KV
	mu        sync.Mutex
	committed chan struct{}
	proceed   chan struct{}
}

func (h *heldTxns) holdNext() (committed <-chan struct{}, proceed chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.committed, h.proceed = make(chan struct{}), make(chan struct{})
	return h.committed, h.proceed
}

func (h *heldTxns) Txn(ctx context.Context) clientv3.Txn { return &heldTxn{Txn: h.KV.Txn(ctx), h: h} }

type heldTxn struct {
	clientv3.Txn
	h *heldTxns
}

func (t *heldTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *heldTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *heldTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *heldTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	t.h.mu.Lock()
	committed, proceed := t.h.committed, t.h.proceed
	t.h.committed = nil
	t.h.mu.Unlock()
	if committed != nil {
		close(committed)
		<-proceed
	}
	return resp, err
}

// answeredTTLs signals each answered TimeToLive: the Store's verification
// of its lease.
type answeredTTLs struct {
	clientv3.Lease
	answered chan struct{}
}

func (a *answeredTTLs) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	resp, err := a.Lease.TimeToLive(ctx, id, opts...)
	select {
	case a.answered <- struct{}{}:
	default:
	}
	return resp, err
}
