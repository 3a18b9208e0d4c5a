package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFairPrefixDeleted: every key under the Stores' prefix is deleted
// (`etcdctl del --prefix`) while one Store holds the lock and two wait in
// the fair queue: the claim, its guard, the release marker and every
// place go at once. The waiters, whose places are gone, queue again, and
// the claim they saw counts as held until its holder's Store puts the
// release marker at the claim's deadline; then the first of them
// acquires. Neither waiter had a queue key ahead of its new place, nor a
// claim key to watch, so nothing but a look at etcd shows them the
// marker: they used to answer from their watch's cache that the lock was
// held, and waited until their contexts ended.
func TestFairPrefixDeleted(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), etcdstore.WithFair(true)}
	client := connect(t, srv.Endpoint())
	ctx := t.Context()
	const ttl = 2 * time.Second
	_, _, qp := newStore(t, client, opts...).Keys("job")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	queue := client.Watch(wctx, qp, clientv3.WithPrefix())

	holder := lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "holder", ttl))
	type result struct {
		l   *baton.Lease
		err error
	}
	got := make(chan result, 2)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, id := range []string{"w1", "w2"} {
		m := newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", id, ttl)
		go func() {
			l, err := m.Lock(lctx)
			got <- result{l, err}
		}()
		awaitQueued(t, queue, id)
	}

	del, err := client.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	within(t, 10*time.Second, "the end of the holder's lease", holder.Context().Done())
	if err := holder.Err(); !errors.Is(err, baton.ErrLost) {
		t.Errorf("the holder's lease ended with %v, want ErrLost", err)
	}
	for range 2 {
		r := <-got
		if r.err != nil {
			t.Fatalf("a waiter did not acquire after the deletion: %v", r.err)
		}
		if r.l.Token() <= uint64(del.Header.Revision) {
			t.Errorf("%s acquired token %d, not above the deletion's revision %d", r.l.Holder(), r.l.Token(), del.Header.Revision)
		}
		t.Logf("%s acquired token %d %v after the deletion", r.l.Holder(), r.l.Token(), time.Since(start).Round(time.Millisecond))
		if err := r.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
