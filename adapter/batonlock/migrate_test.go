package batonlock_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton/kubestore"
)

// TestMigrationFromLeaseLock: a controller-runtime manager moves from
// client-go's own LeaseLock to a Lock over baton's Lease store opened
// WithAdoption, one replica at a time on the same Lease, and back (a
// rollback). Replicas of the two kinds exclude each other: the runnables
// of two managers never run at once, and each kind takes over when the
// other's leader stops.
func TestMigrationFromLeaseLock(t *testing.T) {
	cfg := startControlPlane(t)
	ns := newNamespace(t, cfg)
	tr := newTracker()
	old := startLeaseLockReplica(t, cfg, tr, "old", ns, "controller")
	waitFor(t, tr.started, 20*time.Second, "the client-go replica to lead")

	store, err := kubestore.NewLeaseForConfig(cfg, ns, kubestore.WithAdoption())
	if err != nil {
		t.Fatal(err)
	}
	next := startReplica(t, cfg, tr, "new", newLock(t, store, "controller", "new", slog.New(slog.DiscardHandler)))
	// Two lease durations: renewals of the client-go leader, and a full
	// expiry window as the new replica judges it, in which it must not
	// start.
	select {
	case id := <-tr.started:
		t.Logf("%s started while the client-go leader ran (a loaded machine: it lost its lease?)", id)
	case <-time.After(2 * leaseDuration):
		if err := old.stop(t); err != nil {
			t.Errorf("client-go replica: Start returned %v", err)
		}
		if id := waitFor(t, tr.started, 20*time.Second, "the baton replica to take over"); id != "new" {
			t.Fatalf("%s started leading, want new", id)
		}
	}
	if _, held := next.lock.Token(); !held {
		t.Error("the baton replica leads without a claim")
	}

	back := startLeaseLockReplica(t, cfg, tr, "rollback", ns, "controller")
	select {
	case id := <-tr.started:
		t.Logf("%s started while the baton leader ran (a loaded machine: it lost its lease?)", id)
	case <-time.After(2 * leaseDuration):
		if err := next.stop(t); err != nil {
			t.Errorf("baton replica: Start returned %v", err)
		}
		if id := waitFor(t, tr.started, 20*time.Second, "the client-go replica to take over"); id != "rollback" {
			t.Fatalf("%s started leading, want rollback", id)
		}
	}
	if tr.overlap.Load() {
		t.Error("two managers ran their leader-election runnables at the same time")
	}
	if err := back.stop(t); err != nil {
		t.Errorf("client-go replica: Start returned %v", err)
	}
}
