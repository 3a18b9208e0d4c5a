//go:build linux

package safety

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
)

// fairWitness shows what etcdstore's fair mode did during the rounds of a
// fair row, from etcd's history of the lock's keys and from the
// contenders' logs: handoffs (a release that put the claim for the oldest
// waiter, who collects it, usually from a watch event), places taken in
// the queue, and the orphans (claims and places of unanswered
// transactions) that the Stores' verification deleted. A fair row whose
// contenders never handed the lock over did not test fair mode: require
// fails it.
type fairWitness struct {
	cl       *testenv.EtcdCluster
	h        *harness
	handoffs int
	places   int
}

// round wraps a fault step: it runs inject and logs what fair mode did
// in etcd after the fault, that is after the acquisition of the token
// the fault hit (its holder held the lock from then until the fault, and
// released it only after).
func (w *fairWitness) round(inject func(h *harness) fired) func(h *harness) {
	return func(h *harness) {
		w.h = h
		f := inject(h)
		handoffs, places := w.count(h, int64(f.tok))
		w.handoffs += handoffs
		w.places += places
		h.t.Logf("fair mode after the fault on token %d: %d handoffs, %d places taken in the queue", f.tok, handoffs, places)
	}
}

// require logs the row's totals and the orphans the contenders' Stores
// cleared, and fails t if the lock was never handed over.
func (w *fairWitness) require(t *testing.T) {
	t.Helper()
	orphans := 0
	if w.h != nil {
		w.h.mu.Lock()
		for _, c := range w.h.contenders {
			orphans += strings.Count(c.output(), "that an unanswered acquire left")
		}
		w.h.mu.Unlock()
	}
	t.Logf("fair mode over the row: %d handoffs, %d places taken in the queue, %d orphans cleared", w.handoffs, w.places, orphans)
	if w.handoffs == 0 {
		t.Errorf("no release handed the lock to a waiter during the faults: fair mode's handoff did not run")
	}
}

// client opens a client of the cluster for the witness, closed with h's
// test.
func (w *fairWitness) client(h *harness) (*clientv3.Client, context.Context, context.CancelFunc) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	cli, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: w.cl.Endpoints()})
	if err != nil {
		cancel()
		h.t.Fatalf("fair witness: %v", err)
	}
	return cli, ctx, func() { cli.Close(); cancel() }
}

// count replays the changes of the lock's keys after revision from, up to
// the last acquisition (every acquisition, a handoff too, puts the
// lock's /last key, which nothing deletes), and counts the handoffs (a
// put over the live claim key: an acquisition creates it) and the places
// put in the queue.
func (w *fairWitness) count(h *harness, from int64) (handoffs, places int) {
	h.t.Helper()
	cli, ctx, done := w.client(h)
	defer done()
	claim := etcdstore.DefaultPrefix + h.sc.lock
	last, err := cli.Get(ctx, claim+"/last")
	if err != nil || len(last.Kvs) == 0 {
		h.t.Fatalf("fair witness: reading %s/last: %v", claim, err)
	}
	upTo := last.Kvs[0].ModRevision
	if upTo <= from {
		return 0, 0
	}
	for wr := range cli.Watch(ctx, claim, clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := wr.Err(); err != nil {
			h.t.Fatalf("fair witness: replaying %s: %v", claim, err)
		}
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			switch {
			case ev.Type != clientv3.EventTypePut:
			case key == claim && ev.Kv.Version > 1:
				handoffs++
			case strings.HasPrefix(key, claim+"/queue/") && ev.Kv.Version == 1:
				places++
			}
			if ev.Kv.ModRevision >= upTo {
				return handoffs, places
			}
		}
	}
	h.t.Fatalf("fair witness: the replay of %s ended before revision %d: %v", claim, upTo, ctx.Err())
	return 0, 0
}
