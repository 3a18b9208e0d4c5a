package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFairArrivalOrder: 100 contenders, each a process of its own (a Store
// with its own lease and identity; they share 4 etcd clients), queue
// behind a holder one after another and get the lock strictly in the order
// they arrived, each woken by its predecessor alone: the whole queue costs
// a few requests per contender, not one per contender per handover.
func TestFairArrivalOrder(t *testing.T) {
	srv := startEtcd(t)
	prefix := freshPrefix(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), etcdstore.WithFair(true)}
	var (
		clients []*clientv3.Client
		reqs    []*counts
	)
	for range 4 {
		c, n := connectCounting(t, srv.Endpoint())
		clients, reqs = append(clients, c), append(reqs, n)
	}
	txns := func() (n int) {
		for _, r := range reqs {
			n += r.snapshot()["Txn"]
		}
		return n
	}
	const (
		contenders = 100
		ttl        = 5 * time.Second
	)
	hs := newStore(t, clients[0], opts...)
	holder := lock(t, newMutex(t, hs, "job", "holder", ttl))
	_, _, qp := hs.Keys("job")
	wctx, stop := context.WithCancel(t.Context())
	defer stop()
	queue := clients[0].Watch(wctx, qp, clientv3.WithPrefix())

	var (
		mu     sync.Mutex
		order  []int
		tokens []uint64
	)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	results := make([]<-chan acquisition, contenders)
	before := txns()
	for i := range contenders {
		s := newStore(t, clients[i%len(clients)], opts...)
		id := fmt.Sprintf("contender-%03d", i)
		m := newMutex(t, s, "job", id, ttl)
		ch := make(chan acquisition, 1)
		results[i] = ch
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err := m.Lock(ctx)
			if err == nil {
				mu.Lock()
				order, tokens = append(order, i), append(tokens, l.Token())
				mu.Unlock()
				err = l.Unlock(ctx)
			}
			ch <- acquisition{l, err, time.Now()}
		}()
		t.Cleanup(func() { <-done })
		// The next contender arrives only once this one is queued.
		awaitQueued(t, queue, id)
	}
	queued := txns() - before
	start := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		if a := within(t, 30*time.Second, fmt.Sprintf("contender %d", i), ch); a.err != nil {
			t.Fatalf("contender %d: %v", i, a.err)
		}
	}
	elapsed := time.Since(start)
	drained := txns() - before - queued
	t.Logf("%d contenders queued with %d transactions; the queue drained in %v (%v per handover) with %d transactions",
		contenders, queued, elapsed, elapsed/contenders, drained)
	for i, got := range order {
		if got != i {
			t.Fatalf("acquisition order %v; want 0..%d in order", order, contenders-1)
		}
		if i > 0 && tokens[i] <= tokens[i-1] {
			t.Errorf("contender %d got token %d after token %d", i, tokens[i], tokens[i-1])
		}
	}
	// Each contender: acquire (1), release (1), and at most a couple of
	// attempts on waking (its predecessor left; the holder released).
	if limit := 5 * contenders; drained > limit {
		t.Errorf("%d transactions to drain a queue of %d; want at most %d (a thundering herd would need about %d)",
			drained, contenders, limit, contenders*contenders/2)
	}
}

// awaitQueued reads queue (a watch of a lock's queue prefix) until a
// queue key of holder id appears.
func awaitQueued(t *testing.T, queue clientv3.WatchChan, id string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case wr, ok := <-queue:
			if !ok || wr.Err() != nil {
				t.Fatalf("watching the queue: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut && strings.Contains(string(ev.Kv.Value), " holder="+id+" ") {
					return
				}
			}
		case <-timeout:
			t.Fatalf("%s did not queue within 10s", id)
		}
	}
}
