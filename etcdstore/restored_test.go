package etcdstore_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
)

// TestRestoredSnapshot: etcd restored from a snapshot (etcdutl snapshot
// restore --bump-revision --mark-compacted, as docs/backends.md says)
// puts back the snapshot's claims on the snapshot's leases, which the
// running Stores keep alive. Here the holder's lease (kept alive by
// another lock it holds) carried the lock's claim at the snapshot; the
// holder released it and took the lock again since: the restored store
// shows its older claim, on its own lease. The holder must
// learn that its claim is gone (its verification, which asks only which
// keys the lease carries, took the old claim for its own and it held on),
// and the waiter must get the lock, with a token above the bump, instead
// of waiting for as long as the holder's process keeps its lease.
func TestRestoredSnapshot(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		srv := startEtcd(t)
		prefix := etcdstore.WithPrefix(freshPrefix(t))
		ca, cb := connect(t, srv.Endpoint()), connect(t, srv.Endpoint())
		// Long enough for the holder to keep its claim through the
		// restart, if that were all.
		const ttl = 10 * time.Second
		sa := newStore(t, ca, mode, prefix)
		ma := newMutex(t, sa, "job", "a", ttl)
		mb := newMutex(t, newStore(t, cb, mode, prefix), "job", "b", ttl)
		// Another lock of a, held throughout, keeps a's lease (one per TTL
		// and Store) alive across its tenures of job.
		lock(t, newMutex(t, sa, "other", "a", ttl))

		first := lock(t, ma)
		snap := saveSnapshot(t, ca) // with a's claim of job...
		if err := first.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		held := lock(t, ma) // ...which a released before it took job again
		var he *baton.HeldError
		if _, err := mb.TryLock(t.Context()); !errors.As(err, &he) {
			t.Fatalf("TryLock by b while a holds: %v, want a HeldError", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got := lockAsync(t, ctx, mb)

		const bump = 1_000_000
		srv.Kill()
		if err := srv.RestoreSnapshot(snap, bump); err != nil {
			t.Fatal(err)
		}
		srv.Start()

		within(t, 30*time.Second, "the end of a's lease, whose claim the restore replaced", held.Done())
		if !errors.Is(held.Err(), baton.ErrLost) {
			t.Errorf("a's lease ended with %v, want ErrLost (its claim replaced)", held.Err())
		}
		b := within(t, 30*time.Second, "b's acquisition after the restore", got)
		if b.err != nil {
			t.Fatal(b.err)
		}
		if b.lease.Token() <= bump {
			t.Errorf("b's token %d after a restore with --bump-revision %d: tokens went back", b.lease.Token(), bump)
		}
	})
}

// saveSnapshot writes etcd's snapshot to a file (etcdctl snapshot save)
// and returns its path.
func saveSnapshot(t *testing.T, c *clientv3.Client) string {
	t.Helper()
	r, err := c.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoredSnapshotPlaces: in fair mode a snapshot also holds the
// waiters' places in the queue. Restored, a place its Store has left (it
// took the lock and released it since) sits on a lease the Store keeps
// alive for its other locks, and so does the claim of the holder at the
// snapshot: a new waiter would queue behind them for as long as their
// processes ran. Each Store deletes what it no longer holds, and the new
// waiter gets the lock.
func TestRestoredSnapshotPlaces(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	const ttl = 2 * time.Second
	var muts []*baton.Mutex
	var clients []*clientv3.Client
	for _, id := range []string{"a", "b", "c"} {
		c := connect(t, srv.Endpoint())
		s := newStore(t, c, etcdstore.WithFair(true), etcdstore.WithPrefix(prefix))
		lock(t, newMutex(t, s, "other-"+id, id, ttl)) // keeps the Store's lease alive
		muts = append(muts, newMutex(t, s, "job", id, ttl))
		clients = append(clients, c)
	}
	ca := clients[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := lock(t, muts[0])
	queued := watchPut(t, ca, prefix+"job/queue/")
	got := lockAsync(t, ctx, muts[1])
	within(t, 20*time.Second, "b's place in the queue", queued)
	snap := saveSnapshot(t, ca) // a's claim, b's place
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := within(t, 20*time.Second, "b's acquisition", got)
	if b.err != nil {
		t.Fatal(b.err)
	}
	if err := b.lease.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	if err := srv.RestoreSnapshot(snap, 1_000_000); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if c := within(t, 30*time.Second, "c's acquisition after the restore", lockAsync(t, ctx, muts[2])); c.err != nil {
		t.Fatal(c.err)
	}
}

// watchPut delivers once a key under prefix is put.
func watchPut(t *testing.T, c *clientv3.Client, prefix string) <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watching %s: %v", prefix, wr.Err())
	}
	done := make(chan struct{})
	go func() {
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					close(done)
					return
				}
			}
		}
	}()
	return done
}
