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

// fairWitness shows what etcdstore's fair mode did after each fault of a
// fair row, from etcd's history of the lock's keys and from the
// contenders' logs: handoffs (a release that put the claim for the oldest
// waiter, who collects it, usually from a watch event), places taken in
// the queue, and the orphans (claims and places of unanswered
// transactions) that the Stores' verification deleted. A release during
// the fault may rightly hand over nothing: a holder that cannot read the
// queue (its member stopped) releases plainly, and the waiters acquire.
// But within handoffWithin acquisitions after the fault, with every
// contender queueing, a release must hand the lock over, or the fault
// broke the queue: require fails a row where it did not.
type fairWitness struct {
	cl     *testenv.EtcdCluster
	h      *harness
	rounds []fairRound
}

// fairRound is what fair mode did after one fault, on token tok.
type fairRound struct {
	tok                            uint64
	acquisitions, handoffs, places int
}

// handoffWithin is how many acquisitions after a fault's token the
// witness waits for a handoff. With K=3 contenders and none idle, two
// waiters queue behind every holder; a plain release (the holder could
// not read the queue) is followed by an acquisition from a place, whose
// release reads the places behind it and hands over: two acquisitions
// suffice, and one more allows for a second fault-delayed release.
const handoffWithin = 3

// round wraps a fault step: it runs inject, then counts in etcd what fair
// mode did after the acquisition of the token the fault hit (its holder
// held the lock from then until the fault, and released it only after),
// waiting for further acquisitions until one was a handoff or
// handoffWithin have been made.
func (w *fairWitness) round(inject func(h *harness) fired) func(h *harness) {
	return func(h *harness) {
		w.h = h
		f := inject(h)
		r := fairRound{tok: f.tok}
		for {
			var upTo int64
			r.acquisitions, r.handoffs, r.places, upTo = w.count(h, int64(f.tok))
			if r.handoffs > 0 || r.acquisitions >= handoffWithin {
				break
			}
			h.acquiredAfter(uint64(upTo), 60*time.Second)
		}
		w.rounds = append(w.rounds, r)
		h.t.Logf("fair mode after the fault on token %d: %d acquisitions, %d handoffs, %d places taken in the queue",
			r.tok, r.acquisitions, r.handoffs, r.places)
	}
}

// require logs the row's totals and the orphans the contenders' Stores
// cleared, and fails t for each fault after which the lock was not
// handed over.
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
	var handoffs, places int
	for _, r := range w.rounds {
		handoffs += r.handoffs
		places += r.places
		if r.handoffs == 0 {
			t.Errorf("no release handed the lock to a waiter in the %d acquisitions after the fault on token %d: fair mode's handoff did not run after the fault",
				r.acquisitions, r.tok)
		}
	}
	t.Logf("fair mode over the row: %d handoffs, %d places taken in the queue, %d orphans cleared", handoffs, places, orphans)
	if len(w.rounds) == 0 {
		t.Errorf("no fault ran: the row did not test fair mode")
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
// lock's /last key, which nothing deletes; its revision upTo is the last
// token), and counts the acquisitions, the handoffs (a put over the live
// claim key: an acquisition creates it) and the places put in the queue.
func (w *fairWitness) count(h *harness, from int64) (acquisitions, handoffs, places int, upTo int64) {
	h.t.Helper()
	cli, ctx, done := w.client(h)
	defer done()
	claim := etcdstore.DefaultPrefix + h.sc.lock
	last, err := cli.Get(ctx, claim+"/last")
	if err != nil || len(last.Kvs) == 0 {
		h.t.Fatalf("fair witness: reading %s/last: %v", claim, err)
	}
	upTo = last.Kvs[0].ModRevision
	if upTo <= from {
		return 0, 0, 0, upTo
	}
	for wr := range cli.Watch(ctx, claim, clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := wr.Err(); err != nil {
			h.t.Fatalf("fair witness: replaying %s: %v", claim, err)
		}
		// A revision's events come in one response: upTo's are all
		// counted before the replay stops.
		reached := false
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			switch {
			case ev.Kv.ModRevision > upTo:
			case ev.Type != clientv3.EventTypePut:
			case key == claim+"/last":
				acquisitions++
			case key == claim && ev.Kv.Version > 1:
				handoffs++
			case strings.HasPrefix(key, claim+"/queue/") && ev.Kv.Version == 1:
				places++
			}
			reached = reached || ev.Kv.ModRevision >= upTo
		}
		if reached {
			return acquisitions, handoffs, places, upTo
		}
	}
	h.t.Fatalf("fair witness: the replay of %s ended before revision %d: %v", claim, upTo, ctx.Err())
	return 0, 0, 0, upTo
}
