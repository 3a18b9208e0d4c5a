package etcdstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// TestSeenPrunedOnceReleased: a Store that found many locks held by
// another Store, each then released and never touched again (a replica
// that lost each slot of a scheduled job), does not keep the claims it saw
// for ever: once it has seen enough names, it forgets those whose claim
// etcd shows released. It keeps a claim still held, and one whose key was
// deleted by hand without a release (its holder may still work).
func TestSeenPrunedOnceReleased(t *testing.T) {
	srv := startEtcd(t)
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		prefix := freshPrefix(t)
		client := connect(t, srv.Endpoint())
		holder := newStore(t, client, etcdstore.WithPrefix(prefix), mode)
		looker := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
		ctx := t.Context()
		take := func(name string) backend.Grant {
			t.Helper()
			g, err := holder.TryAcquire(ctx, name, backend.Request{Holder: "winner", Nonce: baton.NewNonce(), TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var held *backend.HeldError
			if _, err := looker.TryAcquire(ctx, name, backend.Request{Holder: "loser", Nonce: baton.NewNonce(), TTL: time.Minute}); !errors.As(err, &held) {
				t.Fatalf("the loser's attempt on %s: %v; want a HeldError", name, err)
			}
			return g
		}
		take("still-held")
		take("deleted-by-hand")
		ck, _, _ := holder.Keys("deleted-by-hand")
		if _, err := client.Delete(ctx, ck); err != nil {
			t.Fatal(err)
		}
		const slots = etcdstore.MinSeenPrune + 50
		for i := range slots {
			if err := holder.Release(ctx, take(fmt.Sprintf("job.slot-%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		awaitPlace(t, "released claims forgotten", func() bool { return len(etcdstore.Seen(looker)) < etcdstore.MinSeenPrune })
		if seen := etcdstore.Seen(looker); !seen["still-held"] || !seen["deleted-by-hand"] {
			t.Errorf("after the prune the loser keeps still-held: %v, deleted-by-hand: %v; want both kept", seen["still-held"], seen["deleted-by-hand"])
		}
	})
}
