package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// removeTTL is the TTL of the claims in these tests: long enough that no
// claim ends by itself while a test runs.
const removeTTL = time.Minute

// removeReq returns a request of holder, waiting (Lock) or not (TryLock).
func removeReq(holder string, waiting bool) backend.Request {
	return backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: removeTTL, Waiting: waiting}
}

// mustAcquire acquires name through s for holder, or fails t.
func mustAcquire(t *testing.T, s *etcdstore.Store, name, holder string) backend.Grant {
	t.Helper()
	g, err := s.TryAcquire(t.Context(), name, removeReq(holder, false))
	if err != nil {
		t.Fatalf("TryAcquire(%q) by %q: %v", name, holder, err)
	}
	return g
}

// mustRefuse fails t unless err is Remove's refusal: an error matching
// ErrHeld that unwraps to a HeldError naming holder and token.
func mustRefuse(t *testing.T, err error, holder string, token uint64) *backend.HeldError {
	t.Helper()
	var he *backend.HeldError
	if !errors.Is(err, backend.ErrHeld) || !errors.As(err, &he) {
		t.Fatalf("Remove: %v; want an error matching ErrHeld that unwraps to *backend.HeldError", err)
	}
	if he.Holder != holder || he.Token != token {
		t.Fatalf("Remove: %v; want the HeldError to name %q (token %d)", err, holder, token)
	}
	return he
}

// keysUnder returns how many keys etcd has under prefix.
func keysUnder(t *testing.T, c *clientv3.Client, prefix string) int64 {
	t.Helper()
	r, err := c.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

// TestRemoveRefusedWhileQueued: in fair mode Remove refuses a lock whose
// claim is gone (force-released) while a waiter keeps its place in the
// queue, and says so; once the waiter gave up and its Store deleted the
// place, Remove deletes every key of the lock, and a Store that never saw
// it acquires at once with a larger token.
func TestRemoveRefusedWhileQueued(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), etcdstore.WithFair(true)}
	client := connect(t, srv.Endpoint())
	holder := newStore(t, connect(t, srv.Endpoint()), opts...)
	waiter := newStore(t, connect(t, srv.Endpoint()), opts...)
	rm := newStore(t, client, opts...)
	ctx := t.Context()

	g := mustAcquire(t, holder, "job", "holder")
	wctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	if _, err := waiter.TryAcquire(wctx, "job", removeReq("waiter", true)); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("the waiter's attempt on the held lock: %v, want ErrHeld", err)
	}
	mustRefuse(t, rm.Remove(ctx, "job"), "holder", g.Token)
	if err := rm.ForceRelease(ctx, "job"); err != nil {
		t.Fatal(err)
	}

	err := rm.Remove(ctx, "job")
	mustRefuse(t, err, "", 0)
	if msg := err.Error(); !strings.Contains(msg, "fair queue") || !strings.Contains(msg, `"waiter"`) {
		t.Errorf("Remove with a waiter queued: %q; want the message to name the queue and the waiter", msg)
	}
	if _, err := rm.Get(ctx, "job"); err != nil {
		t.Errorf("Get after the refused Remove: %v; want the record kept", err)
	}

	// The waiter gives up: its Store deletes its place.
	_, _, qp := rm.Keys("job")
	places, err := client.Get(ctx, qp, clientv3.WithPrefix())
	if err != nil || len(places.Kvs) != 1 {
		t.Fatalf("the queue: %v, %d places; want the waiter's", err, len(places.Kvs))
	}
	giveUp()
	waitDeleted(t, client, string(places.Kvs[0].Key), places.Header.Revision)

	if err := rm.Remove(ctx, "job"); err != nil {
		t.Fatalf("Remove once the queue is empty: %v", err)
	}
	if n := keysUnder(t, client, prefix); n != 0 {
		t.Errorf("%d keys under the prefix after Remove, want none", n)
	}
	if _, err := rm.Get(ctx, "job"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get after Remove: %v, want ErrNotFound", err)
	}
	fresh := newStore(t, connect(t, srv.Endpoint()), opts...)
	if g2 := mustAcquire(t, fresh, "job", "third"); g2.Token <= g.Token {
		t.Errorf("token %d after Remove, not above the removed lock's %d", g2.Token, g.Token)
	}
}

// TestRemoveRefusedWhileGuarded: the claim key of a held lock is deleted
// by hand, which leaves its guard: Remove refuses, naming the deleted
// claim's holder and token, and keeps the record. Once ForceRelease took
// the guard, Remove deletes every key of the lock, and a Store that never
// saw it acquires with a token above the deletion's revision.
func TestRemoveRefusedWhileGuarded(t *testing.T) {
	srv := startEtcd(t)
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		prefix := freshPrefix(t)
		opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), mode}
		client := connect(t, srv.Endpoint())
		holder := newStore(t, client, opts...)
		rm := newStore(t, connect(t, srv.Endpoint()), opts...)
		ctx := t.Context()

		g := mustAcquire(t, holder, "job", "holder")
		ck, _, _ := holder.Keys("job")
		del, err := client.Delete(ctx, ck)
		if err != nil || del.Deleted != 1 {
			t.Fatalf("deleting the claim key %q: %v, %+v", ck, err, del)
		}
		err = rm.Remove(ctx, "job")
		he := mustRefuse(t, err, "holder", g.Token)
		if he.RetryAfter <= 0 || he.RetryAfter > removeTTL {
			t.Errorf("HeldError.RetryAfter = %v, want a verification period of the claim's TTL", he.RetryAfter)
		}
		if !strings.Contains(err.Error(), "guard") {
			t.Errorf("Remove of a guarded lock: %q; want the message to name the guard", err)
		}
		if r, err := rm.Get(ctx, "job"); err != nil || !r.Held() || r.Token != g.Token {
			t.Errorf("Get after the refused Remove: %+v, %v; want held with token %d", r, err, g.Token)
		}

		if err := rm.ForceRelease(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		if err := rm.Remove(ctx, "job"); err != nil {
			t.Fatalf("Remove after ForceRelease took the guard: %v", err)
		}
		if n := keysUnder(t, client, prefix); n != 0 {
			t.Errorf("%d keys under the prefix after Remove, want none", n)
		}
		fresh := newStore(t, connect(t, srv.Endpoint()), opts...)
		if g2 := mustAcquire(t, fresh, "job", "third"); g2.Token <= uint64(del.Header.Revision) {
			t.Errorf("token %d after Remove, not above the deletion's revision %d", g2.Token, del.Header.Revision)
		}
	})
}

// TestRemoveRacesAcquire: a TryAcquire and a Remove of a released lock,
// sent at once from two Stores, never leave a grant whose record was
// removed: every grant renews, Get shows it, and its release (conditional
// on its claim key in etcd) succeeds; a refused Remove names that grant.
// Tokens keep increasing through the removals.
func TestRemoveRacesAcquire(t *testing.T) {
	srv := startEtcd(t)
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), mode}
		acq := newStore(t, connect(t, srv.Endpoint()), opts...)
		rm := newStore(t, connect(t, srv.Endpoint()), opts...)
		ctx := t.Context()
		var last uint64
		refused := 0
		const rounds = 40
		for i := range rounds {
			if err := acq.Release(ctx, mustAcquire(t, acq, "job", "h")); err != nil {
				t.Fatal(err)
			}
			var (
				g          backend.Grant
				aerr, rerr error
				wg         sync.WaitGroup
			)
			start := make(chan struct{})
			wg.Go(func() {
				<-start
				g, aerr = acq.TryAcquire(ctx, "job", removeReq("h", false))
			})
			wg.Go(func() {
				<-start
				rerr = rm.Remove(ctx, "job")
			})
			close(start)
			wg.Wait()
			if aerr != nil {
				t.Fatalf("round %d: TryAcquire of a lock nobody holds: %v", i, aerr)
			}
			if rerr != nil {
				mustRefuse(t, rerr, "h", g.Token)
				refused++
			}
			if g.Token <= last {
				t.Fatalf("round %d: token %d after %d", i, g.Token, last)
			}
			last = g.Token
			if _, err := acq.Renew(ctx, g); err != nil {
				t.Fatalf("round %d: Renew of the grant: %v", i, err)
			}
			if r, err := rm.Get(ctx, "job"); err != nil || r.Holder != "h" || r.Token != g.Token {
				t.Fatalf("round %d: Get: %+v, %v; want held by h with token %d", i, r, err, g.Token)
			}
			if err := acq.Release(ctx, g); err != nil {
				t.Fatalf("round %d: Release of the grant: %v", i, err)
			}
		}
		t.Logf("Remove refused in %d of %d rounds (the acquire came first)", refused, rounds)
	})
}

// TestRemoveSeenClaims: a Store that saw a claim on a lock and then
// removed it, after the claim's release, forgets that claim (and, in fair
// mode, what it knew of the lock) and acquires at once; if the claim's key
// and guard were deleted by hand instead, it keeps the claim and counts it
// as held. A Store that saw a claim of a lock another Store removed cannot
// tell the removal from a deletion by hand: it counts the claim as held,
// and its prune of the claims it saw forgets it only once its grace has
// passed; then it acquires. The prune keeps a claim still held and one
// whose guard is in place.
func TestRemoveSeenClaims(t *testing.T) {
	srv := startEtcd(t)
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), mode}
		client := connect(t, srv.Endpoint())
		holder := newStore(t, client, opts...)
		looker := newStore(t, connect(t, srv.Endpoint()), opts...)
		ctx := t.Context()
		see := func(name string) backend.Grant {
			t.Helper()
			g := mustAcquire(t, holder, name, "holder")
			if _, err := looker.TryAcquire(ctx, name, removeReq("looker", false)); !errors.Is(err, backend.ErrHeld) {
				t.Fatalf("the looker's attempt on %s: %v, want ErrHeld", name, err)
			}
			return g
		}
		see("held")
		see("guarded")
		ck, _, _ := holder.Keys("guarded")
		if _, err := client.Delete(ctx, ck); err != nil {
			t.Fatal(err)
		}

		// Removed by the Store that saw the claim.
		own := see("own")
		if err := holder.Release(ctx, own); err != nil {
			t.Fatal(err)
		}
		busy0, _, _ := etcdstore.FairMemory(looker) // fair mode: own, held and guarded were found busy
		if err := looker.Remove(ctx, "own"); err != nil {
			t.Fatal(err)
		}
		if etcdstore.Seen(looker)["own"] {
			t.Error("the Store that removed the lock still keeps the released claim it saw")
		}
		if busy, contended, tail := etcdstore.FairMemory(looker); busy0 > 0 && busy != busy0-1 || contended+tail != 0 {
			t.Errorf("after Remove the Store keeps fair-queue state (busy, contended, tail) for %d, %d, %d names; want %d, 0, 0",
				busy, contended, tail, max(busy0-1, 0))
		}
		if g := mustAcquire(t, looker, "own", "looker"); g.Token <= own.Token {
			t.Errorf("token %d after Remove, not above %d", g.Token, own.Token)
		}

		// Removed by the Store that saw the claim, after a hand deletion
		// of the claim key and its guard: nothing shows that the claim
		// ended, so the Store keeps it and counts it as held.
		hand := see("hand")
		hk, _, _ := holder.Keys("hand")
		for _, k := range []string{hk, etcdstore.GuardKey(holder, "hand")} {
			if _, err := client.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		if err := looker.Remove(ctx, "hand"); err != nil {
			t.Fatal(err)
		}
		var he *backend.HeldError
		if _, err := looker.TryAcquire(ctx, "hand", removeReq("looker", false)); !errors.As(err, &he) || he.Token != hand.Token {
			t.Fatalf("the remover's attempt on a lock whose claim it saw deleted by hand: %v; want it held (token %d) for its grace", err, hand.Token)
		}

		// Removed by another Store.
		other := see("other")
		if err := holder.Release(ctx, other); err != nil {
			t.Fatal(err)
		}
		if err := holder.Remove(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		_, err := looker.TryAcquire(ctx, "other", removeReq("looker", false))
		if !errors.As(err, &he) || he.Holder != "holder" || he.Token != other.Token {
			t.Fatalf("a Store that saw the removed lock's claim: %v; want it held by holder (token %d) for its grace", err, other.Token)
		}
		etcdstore.PruneSeen(looker)
		if seen := etcdstore.Seen(looker); !seen["other"] {
			t.Fatal("the prune forgot the removed lock's claim within its grace")
		}
		aged := etcdstore.AgeSeen(looker, etcdstore.GhostGrace(removeTTL))
		if len(aged) != 2 || !aged["other"] || !aged["hand"] {
			t.Fatalf("claims found gone: %v; want other and hand", aged)
		}
		etcdstore.PruneSeen(looker)
		seen := etcdstore.Seen(looker)
		if seen["other"] || seen["hand"] || !seen["held"] || !seen["guarded"] {
			t.Errorf("after the grace the prune keeps other: %v, hand: %v, held: %v, guarded: %v; want only held and guarded kept",
				seen["other"], seen["hand"], seen["held"], seen["guarded"])
		}
		if g := mustAcquire(t, looker, "other", "looker"); g.Token <= other.Token {
			t.Errorf("token %d after Remove, not above %d", g.Token, other.Token)
		}
	})
}
