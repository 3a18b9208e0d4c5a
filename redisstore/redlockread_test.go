package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// TestRedlockReadOneServerSilent: with one of three servers paused, Get
// and List answer from the other two where their answers settle the
// record (a lock held on both, a lock free on both), and refuse to call a
// lock free whose holder's claims are on one answering server and maybe
// on the silent one, a quorum with it: that lock is held, and nobody else
// can take it. It was reported free.
func TestRedlockReadOneServerSilent(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 60*time.Second)
	prefix := uniquePrefix()
	r := newRedlock(t, servers, prefix)
	for _, key := range []string{"held", "split", "free"} {
		if _, err := r.TryAcquire(ctx, key, request("a", time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.ForceRelease(ctx, "free"); err != nil {
		t.Fatal(err)
	}
	// "split" is now held on servers 0 and 2 only, as after an acquisition
	// while server 1 was down.
	if err := newClient(t, servers[1].Addr()).Del(ctx, prefix+"{split}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	servers[2].Pause()
	t.Cleanup(servers[2].Resume)

	if rec, err := r.Get(ctx, "held"); err != nil || !rec.Held() || rec.Holder != "a" {
		t.Errorf("Get(held): %+v, %v; want held by a", rec, err)
	}
	if rec, err := r.Get(ctx, "free"); err != nil || rec.Held() {
		t.Errorf("Get(free): %+v, %v; want free", rec, err)
	}
	// The error names the silent server by its address, for the operator.
	if rec, err := r.Get(ctx, "split"); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "server 2 ("+servers[2].Addr()+")") {
		t.Errorf("Get(split): %+v, %v; want ErrUnavailable naming server 2 by its address, not a record", rec, err)
	}
	recs, err := r.List(ctx)
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("List: %v; want an error matching ErrUnavailable for split", err)
	}
	got := map[string]bool{}
	for _, rec := range recs {
		got[rec.Key] = rec.Held()
	}
	if held, ok := got["held"]; !ok || !held {
		t.Errorf("List: held %v (listed %v); want held", held, ok)
	}
	if held, ok := got["free"]; !ok || held {
		t.Errorf("List: free held=%v (listed %v); want listed, free", held, ok)
	}
	if _, ok := got["split"]; ok {
		t.Errorf("List: split listed as %v; want it left out, with the error", got["split"])
	}
}
