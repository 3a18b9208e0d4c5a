package etcdstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
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
			if err := holder.Err(); !errors.Is(err, backend.ErrLost) || errors.Is(err, baton.ErrStepDown) {
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
			if err := holder.Unlock(t.Context()); !errors.Is(err, backend.ErrLost) {
				t.Errorf("Unlock of the lost lease: %v, want ErrLost", err)
			}
			if err := got.lease.Err(); err != nil {
				t.Errorf("the new holder's lease ended: %v", err)
			}
		})
	}
}

// TestTokensAfterDeletion: tokens strictly increase across releases,
// deletions of every key of the lock by hand (the claim, its guard, /last
// and the release marker) and acquisitions by Stores that never saw the
// deleted claim (which may then acquire at once).
func TestTokensAfterDeletion(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	prefix := freshPrefix(t)
	ck, _, _ := newStore(t, client, etcdstore.WithPrefix(prefix)).Keys("job")
	var last uint64
	for i := range 6 {
		s := newStore(t, client, etcdstore.WithPrefix(prefix))
		g, err := s.TryAcquire(t.Context(), "job", backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if g.Token <= last {
			t.Fatalf("round %d: token %d after %d", i, g.Token, last)
		}
		last = g.Token
		if i%2 == 0 {
			r, err := client.Delete(t.Context(), ck, clientv3WithPrefix()...)
			if err != nil || r.Deleted < 2 {
				t.Fatalf("round %d: delete: %v %+v", i, err, r)
			}
			rg, err := client.Delete(t.Context(), etcdstore.GuardKey(s, "job"))
			if err != nil || rg.Deleted != 1 {
				t.Fatalf("round %d: delete the guard: %v %+v", i, err, rg)
			}
			last = max(last, uint64(rg.Header.Revision))
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
	g, err := s.TryAcquire(t.Context(), "job", backend.Request{Holder: "a", Nonce: "n", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	ck, _, _ := s.Keys("job")
	if _, err := client.Delete(t.Context(), ck); err != nil {
		t.Fatal(err)
	}
	// Wait until the Store noticed: a's Renew fails.
	for {
		if _, err := s.Renew(t.Context(), g); errors.Is(err, backend.ErrLost) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // polling Renew: the subject is the Store's own verification
	}
	_, err = s.TryAcquire(t.Context(), "job", backend.Request{Holder: "b", Nonce: "m", TTL: ttl})
	var he *backend.HeldError
	if !errors.As(err, &he) || he.Holder != "a" || he.RetryAfter <= 0 {
		t.Fatalf("another holder of the same Store: %v; want held by a until its deadline", err)
	}
}

// TestClaimKeyDeletedUnseen: after a hand deletion of the claim key (and
// of every other key under the lock's name), a Store that never saw the
// claim does not acquire while the claim's guard is in place: its attempt
// names the deleted claim's holder and token, and Get and List report the
// lock held. The holder's Store deletes the guard once the claim ended by
// its clock; the contender then acquires, with a larger token.
// ForceRelease frees a guarded lock at once.
func TestClaimKeyDeletedUnseen(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fair"}[fair], func(t *testing.T) {
			srv := startEtcd(t)
			client := connect(t, srv.Endpoint())
			opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(fair)}
			a := newStore(t, client, opts...)
			const ttl = 2 * time.Second
			holder := lock(t, newMutex(t, a, "job", "holder", ttl))
			ck, _, _ := a.Keys("job")
			del, err := client.Delete(t.Context(), ck, clientv3WithPrefix()...)
			if err != nil || del.Deleted < 2 {
				t.Fatalf("deleting the keys under %q: %v, %+v", ck, err, del)
			}

			b := newStore(t, connect(t, srv.Endpoint()), opts...)
			req := backend.Request{Holder: "standby", Nonce: baton.NewNonce(), TTL: ttl}
			_, err = b.TryAcquire(t.Context(), "job", req)
			var he *backend.HeldError
			if !errors.As(err, &he) || he.Holder != "holder" || he.Token != holder.Token() || he.RetryAfter <= 0 {
				t.Fatalf("a Store that never saw the deleted claim: %v; want held by holder, token %d, with a RetryAfter", err, holder.Token())
			}
			if r, err := b.Get(t.Context(), "job"); err != nil || !r.Held() || r.Holder != "holder" || r.Token != holder.Token() {
				t.Errorf("Get of the guarded lock: %+v, %v; want held by holder with token %d", r, err, holder.Token())
			}
			if rs, err := b.List(t.Context()); err != nil || len(rs) != 1 || !rs[0].Held() || rs[0].Key != "job" {
				t.Errorf("List with the guarded lock: %+v, %v; want job, held", rs, err)
			}

			// The holder's Store notices, ends the lease, and frees the
			// guard at the claim's deadline: the standby then acquires.
			within(t, 2*ttl, "the holder's lease to end", holder.Done())
			standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", ttl))
			got := within(t, 5*ttl, "the standby to acquire", standby)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if !got.at.After(holder.ValidUntil()) {
				t.Errorf("the standby acquired %v before the holder's validity ended", holder.ValidUntil().Sub(got.at))
			}
			if tok := got.lease.Token(); tok <= uint64(del.Header.Revision) {
				t.Errorf("token %d, not above the deletion's revision %d", tok, del.Header.Revision)
			}

			if fair {
				return // the standby's place stays in the queue as the holder's: ForceRelease keeps it
			}
			// ForceRelease frees the lock at once, guard included.
			if _, err := client.Delete(t.Context(), ck); err != nil {
				t.Fatal(err)
			}
			if err := b.ForceRelease(t.Context(), "job"); err != nil {
				t.Fatal(err)
			}
			c := newStore(t, connect(t, srv.Endpoint()), opts...)
			if _, err := c.TryAcquire(t.Context(), "job", backend.Request{Holder: "third", Nonce: baton.NewNonce(), TTL: ttl}); err != nil {
				t.Errorf("after ForceRelease: %v; want acquired at once", err)
			}
		})
	}
}
