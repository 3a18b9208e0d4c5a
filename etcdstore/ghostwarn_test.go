package etcdstore_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestGhostWarnsOnlyWhileLeaseLives: a contender that saw a claim whose key
// then went with its holder's lease (the holder's process died, or
// `etcdctl lease revoke`) acquires at once, without the warning meant for a
// key deleted by hand; it warned every waiter that the key had been
// 'deleted by hand, or the lock removed?' and counted as held for twice
// the TTL, at every crash of a holder. A key deleted by hand while the
// holder's lease lives is still warned of and waited out.
func TestGhostWarnsOnlyWhileLeaseLives(t *testing.T) {
	srv := startEtcd(t)
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		prefix := freshPrefix(t)
		client := connect(t, srv.Endpoint())
		holder := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
		logs := &logLines{}
		waiter := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode,
			etcdstore.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		seen := func(name string) int64 {
			t.Helper()
			req := backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: 30 * time.Second}
			if _, err := holder.TryAcquire(t.Context(), name, req); err != nil {
				t.Fatal(err)
			}
			if _, err := waiter.TryAcquire(t.Context(), name, waiterReq()); !errors.Is(err, backend.ErrHeld) {
				t.Fatalf("waiter's first attempt on %s: %v, want ErrHeld", name, err)
			}
			ck, _, _ := waiter.Keys(name)
			r, err := client.Get(t.Context(), ck)
			if err != nil || len(r.Kvs) != 1 {
				t.Fatalf("claim key %q: %v, %v", ck, r, err)
			}
			return r.Kvs[0].Lease
		}

		if _, err := client.Revoke(t.Context(), clientv3.LeaseID(seen("died"))); err != nil {
			t.Fatal(err)
		}
		if _, err := waiter.TryAcquire(t.Context(), "died", waiterReq()); err != nil {
			t.Fatalf("attempt after the holder's lease was revoked: %v, want a grant", err)
		}
		if n := logs.count("vanished"); n != 0 {
			t.Errorf("the claim's key went with its lease, and the waiter warned %d times that it vanished without a release:\n%s", n, logs)
		}

		seen("deleted")
		ck, _, _ := waiter.Keys("deleted")
		if _, err := client.Delete(t.Context(), ck); err != nil {
			t.Fatal(err)
		}
		if _, err := client.Delete(t.Context(), prefix+".guard/deleted"); err != nil {
			t.Fatal(err)
		}
		if _, err := waiter.TryAcquire(t.Context(), "deleted", waiterReq()); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("attempt after the claim's keys were deleted by hand: %v, want ErrHeld", err)
		}
		if n := logs.count("vanished"); n != 1 {
			t.Errorf("after a deletion by hand the waiter warned %d times that the key vanished, want once:\n%s", n, logs)
		}
	})
}

func waiterReq() backend.Request {
	return backend.Request{Holder: "waiter", Nonce: baton.NewNonce(), TTL: 30 * time.Second}
}
