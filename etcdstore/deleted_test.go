package etcdstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
)

// TestClaimKeyDeleted: the claim key of a held lock is deleted by hand
// (etcdctl del). The holder learns it from etcd (its lease ends with
// ErrLost, not at its renew deadline); a standby that saw the claim
// acquires only after the holder's validity ended, by the holder's own
// clock (the test's processes share one); and the new token is larger
// than the deleted claim's and than the deletion's revision. In fair mode
// the holder did not queue (the lock was free), so the waiter waits for
// the claim key itself.
func TestClaimKeyDeleted(t *testing.T) {
	for _, fair := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "fair"}[fair]
		t.Run(name, func(t *testing.T) {
			srv := startEtcd(t)
			opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(fair)}
			client := connect(t, srv.Endpoint())
			a := newStore(t, client, opts...)
			b := newStore(t, connect(t, srv.Endpoint()), opts...)
			const ttl = 2 * time.Second
			holder := lock(t, newMutex(t, a, "job", "holder", ttl))
			heldOpt, held := eventOf(baton.EventHeld)
			standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", ttl, heldOpt))
			within(t, 5*time.Second, "the standby to find the lock held", held)

			ck, _, _ := a.Keys("job")
			del, err := client.Delete(t.Context(), ck)
			if err != nil || del.Deleted != 1 {
				t.Fatalf("deleting the claim key %q: %v, %+v", ck, err, del)
			}
			deleted := time.Now()
			within(t, 2*ttl, "the holder's lease to end", holder.Done())
			ended := time.Now()
			if err := holder.Err(); !errors.Is(err, baton.ErrLost) || errors.Is(err, baton.ErrStepDown) {
				t.Errorf("the holder's lease ended with %v; want ErrLost from the store, not a step-down", err)
			}
			got := within(t, 5*ttl, "the standby to acquire", standby)
			if got.err != nil {
				t.Fatal(got.err)
			}
			valid := holder.ValidUntil()
			t.Logf("deleted at 0; holder's lease ended at %v (valid until %v); standby acquired at %v",
				ended.Sub(deleted), valid.Sub(deleted), got.at.Sub(deleted))
			if !got.at.After(valid) {
				t.Errorf("the standby acquired at %v, before the holder's validity ended at %v", got.at.Sub(deleted), valid.Sub(deleted))
			}
			if tok := got.lease.Token(); tok <= holder.Token() || tok <= uint64(del.Header.Revision) {
				t.Errorf("token %d after the deleted claim's %d and the deletion's revision %d", tok, holder.Token(), del.Header.Revision)
			}
			if err := holder.Unlock(t.Context()); !errors.Is(err, baton.ErrLost) {
				t.Errorf("Unlock of the lost lease: %v, want ErrLost", err)
			}
			if err := got.lease.Err(); err != nil {
				t.Errorf("the new holder's lease ended: %v", err)
			}
		})
	}
}

// TestTokensAfterDeletion: tokens strictly increase across releases,
// deletions of the claim key by hand and acquisitions by Stores that never
// saw the deleted claim (which may acquire at once).
func TestTokensAfterDeletion(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	prefix := freshPrefix(t)
	ck, _, _ := newStore(t, client, etcdstore.WithPrefix(prefix)).Keys("job")
	var last uint64
	for i := range 6 {
		s := newStore(t, client, etcdstore.WithPrefix(prefix))
		g, err := s.TryAcquire(t.Context(), "job", baton.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if g.Token <= last {
			t.Fatalf("round %d: token %d after %d", i, g.Token, last)
		}
		last = g.Token
		if i%2 == 0 {
			r, err := client.Delete(t.Context(), ck)
			if err != nil || r.Deleted != 1 {
				t.Fatalf("round %d: delete: %v %+v", i, err, r)
			}
			last = max(last, uint64(r.Header.Revision))
		} else if err := s.Release(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClaimKeyDeletedSibling: a Store whose claim key was deleted does not
// give the lock to another holder of its own before the lost claim's
// deadline: that holder may not know yet that it lost the lock.
func TestClaimKeyDeletedSibling(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	const ttl = 3 * time.Second
	g, err := s.TryAcquire(t.Context(), "job", baton.Request{Holder: "a", Nonce: "n", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ck, _, _ := s.Keys("job")
	if _, err := client.Delete(t.Context(), ck); err != nil {
		t.Fatal(err)
	}
	// Wait until the Store noticed: a's Renew fails.
	for {
		if _, err := s.Renew(t.Context(), g); errors.Is(err, baton.ErrLost) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // polling Renew: the subject is the Store's own verification
	}
	_, err = s.TryAcquire(t.Context(), "job", baton.Request{Holder: "b", Nonce: "m", TTL: ttl})
	var he *baton.HeldError
	if !errors.As(err, &he) || he.Holder != "a" || he.RetryAfter <= 0 {
		t.Fatalf("another holder of the same Store: %v; want held by a until its deadline", err)
	}
}
