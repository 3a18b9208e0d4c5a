package etcdstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// TestNewerValueNotDeleted: a claim whose value a newer baton wrote
// (baton/v2, as a rollback meets) is refused as before, but the error says
// who wrote it and to run that version, not to delete the key; it said
// 'inspect it with etcdctl get and delete it', which on a rollback takes
// a newer version's claim away. A value that is no baton value at all
// keeps that fix.
func TestNewerValueNotDeleted(t *testing.T) {
	srv := startEtcd(t)
	client := connect(t, srv.Endpoint())
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)))
	for _, c := range []struct {
		name, value string
		newer       bool
	}{
		{"newer", "baton/v2 holder=pod-a nonce=n1 ttl=15s mode=write at=2026-12-06T22:00:00Z", true},
		{"foreign", "locked by cron", false},
	} {
		ck, _, _ := s.Keys(c.name)
		if _, err := client.Put(t.Context(), ck, c.value); err != nil {
			t.Fatal(err)
		}
		_, err := s.TryAcquire(t.Context(), c.name, waiterReq())
		if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), ck) {
			t.Fatalf("%s: TryAcquire: %v; want ErrCorruptRecord naming %s", c.name, err, ck)
		}
		msg := err.Error()
		if said := strings.Contains(msg, "newer version of baton") && !strings.Contains(msg, "and delete it"); said != c.newer {
			t.Errorf("%s: %q; says a newer baton wrote it and not to delete it: %v, want %v", c.name, msg, said, c.newer)
		}
		if _, err := s.Get(t.Context(), c.name); !errors.Is(err, backend.ErrCorruptRecord) || strings.Contains(err.Error(), "newer version of baton") != c.newer {
			t.Errorf("%s: Get: %v", c.name, err)
		}
	}
}
