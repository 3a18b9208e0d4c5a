package etcdstore_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/etcdstore"
)

// TestRenewTimeOfAnotherStoresClaim: a claim's renewals keep its etcd
// lease alive and write nothing another Store could read, so another
// Store's record of it has no RenewTime (status shows "-"), rather than
// the acquisition's time, which read as a holder that stopped renewing
// when the acquisition was old (RENEWED 14s ago at TTL 3s). The holder's
// own Store knows its last renewal.
func TestRenewTimeOfAnotherStoresClaim(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix))
	other := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix))
	l := lock(t, newMutex(t, s, "job", "holder", 3*time.Second))
	own, err := s.Get(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if own.RenewTime.IsZero() || own.AcquireTime.IsZero() {
		t.Errorf("the holder's Store: AcquireTime %v, RenewTime %v; want both", own.AcquireTime, own.RenewTime)
	}
	seen, err := other.Get(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if !seen.Held() || seen.Token != l.Token() || seen.AcquireTime.IsZero() || !seen.RenewTime.IsZero() {
		t.Errorf("another Store: held %v, token %d (want %d), AcquireTime %v, RenewTime %v; want held, the acquisition's time and no RenewTime",
			seen.Held(), seen.Token, l.Token(), seen.AcquireTime, seen.RenewTime)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	free, err := other.Get(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if free.Held() || free.AcquireTime.IsZero() || !free.RenewTime.IsZero() {
		t.Errorf("after the release: held %v, AcquireTime %v, RenewTime %v; want free, the last acquisition's time and no RenewTime",
			free.Held(), free.AcquireTime, free.RenewTime)
	}
}
