package etcdbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fifoContender is the handover floor of a FIFO lock on etcd that hands
// the lock over in the release, as baton's fair mode does, with no
// library around it: no engine, no Store, no guard, /last record or
// release marker, no clean-up of places whose answers were lost. A
// contender that finds the lock held writes a place (a queue key on its
// lease) in the same transaction and watches the claim; a contender that
// takes the free lock watches the queue while it holds it, as baton's
// Store does (see etcdstore's placeswatch.go); the release takes the
// oldest place from that watch, or else reads it (a serializable read),
// and, if there is one, puts the claim with that place's value on that
// place's lease in its one transaction; the waiter holds the lock when its watch shows the claim
// with its value. It is a floor for the handover table only: it ignores
// every failure a real lock must survive.
//
// With keys set it writes, in the same transactions, the keys baton's fair
// Store writes for its guarantees (the claim's guard on the same lease,
// the /last record, the release marker, the touch of the waiter's place)
// under the same conditions, nested as baton nests them: what etcd's side
// of baton's handover costs, without its logic.
type fifoContender struct {
	c     *clientv3.Client
	lease clientv3.LeaseID
	claim string
	queue string
	id    string
	keys  bool
	n     atomic.Int64
}

func openFIFO(t testing.TB, endpoints []string, key, id string) contender {
	return newFIFO(t, endpoints, key, id, false)
}

func openFIFOKeys(t testing.TB, endpoints []string, key, id string) contender {
	return newFIFO(t, endpoints, key, id, true)
}

func newFIFO(t testing.TB, endpoints []string, key, id string, keys bool) *fifoContender {
	c := openClient(t, endpoints)
	l, err := c.Grant(t.Context(), int64(lockTTL/time.Second)*6)
	if err != nil {
		t.Fatal(err)
	}
	return &fifoContender{c: c, lease: l.ID, claim: "/bench/fifo/" + key, queue: "/bench/fifo/" + key + "/queue/", id: id, keys: keys}
}

func (f *fifoContender) guard() string  { return f.claim + "/guard" }
func (f *fifoContender) last() string   { return f.claim + "/last" }
func (f *fifoContender) marker() string { return f.claim + "/released" }

// take is the ops that put the claim with val on lease: with keys, the
// guard and the /last record too.
func (f *fifoContender) take(val string, lease clientv3.LeaseID) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpPut(f.claim, val, clientv3.WithLease(lease))}
	if f.keys {
		ops = append(ops, clientv3.OpPut(f.guard(), val, clientv3.WithLease(lease)), clientv3.OpPut(f.last(), val))
	}
	return ops
}

func (f *fifoContender) lock(ctx context.Context) (func(context.Context) error, error) {
	val := fmt.Sprintf("%s-%d", f.id, f.n.Add(1))
	place := f.queue + val
	cond := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(f.claim), "=", 0), clientv3.Compare(clientv3.CreateRevision(f.queue), "=", 0).WithPrefix()}
	if f.keys {
		cond = append(cond, clientv3.Compare(clientv3.CreateRevision(f.guard()), "=", 0))
	}
	resp, err := f.c.Txn(ctx).If(cond...).
		Then(f.take(val, f.lease)...).
		Else(clientv3.OpPut(place, val, clientv3.WithLease(f.lease))).
		Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return f.release(resp.Header.Revision, "", f.watchPlaces(resp.Header.Revision)), nil
	}
	return f.wait(ctx, val, place, resp.Header.Revision)
}

// wait watches the claim from after rev until it holds val (handed over),
// or, if it is deleted (a release that read no place), takes it if this
// place is the oldest.
func (f *fifoContender) wait(ctx context.Context, val, place string, rev int64) (func(context.Context) error, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range f.c.Watch(wctx, f.claim, clientv3.WithRev(rev+1)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut && string(ev.Kv.Value) == val {
				return f.release(ev.Kv.ModRevision, place, nil), nil
			}
			if ev.Type != clientv3.EventTypeDelete {
				continue
			}
			resp, err := f.c.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(f.claim), "=", 0)).
				Then(clientv3.OpGet(f.queue, clientv3.WithFirstCreate()...)).
				Commit()
			if err != nil {
				return nil, err
			}
			if !resp.Succeeded {
				continue
			}
			first := resp.Responses[0].GetResponseRange().GetKvs()
			if len(first) == 0 || string(first[0].Key) != place {
				continue
			}
			got, err := f.c.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(f.claim), "=", 0)).
				Then(f.take(val, f.lease)...).
				Commit()
			if err != nil {
				return nil, err
			}
			if got.Succeeded {
				return f.release(got.Header.Revision, place, nil), nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("fifo: the watch ended")
}

// placesWatch is the watch of the queue of a contender that took the free
// lock: the places put since, oldest first.
type placesWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	places []*mvccpb.KeyValue
}

// watchPlaces watches the queue from after rev, the free lock's acquisition.
func (f *fifoContender) watchPlaces(rev int64) *placesWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &placesWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for wr := range f.c.Watch(ctx, f.queue, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			w.mu.Lock()
			for _, ev := range wr.Events {
				i := slices.IndexFunc(w.places, func(kv *mvccpb.KeyValue) bool { return bytes.Equal(kv.Key, ev.Kv.Key) })
				switch {
				case ev.Type == clientv3.EventTypeDelete && i >= 0:
					w.places = slices.Delete(w.places, i, i+1)
				case i >= 0:
					w.places[i] = ev.Kv
				case ev.IsCreate():
					w.places = append(w.places, ev.Kv)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// first returns the oldest place w shows, or nil.
func (w *placesWatch) first() *mvccpb.KeyValue {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.places) == 0 {
		return nil
	}
	return w.places[0]
}

// stop ends w.
func (w *placesWatch) stop() {
	w.cancel()
	<-w.done
}

// release returns the unlock of a claim of mod revision token: it takes
// the oldest place from the holder's watch of the queue (w, if it took the
// free lock), or else reads the oldest place other than the holder's own
// (one serializable read of the two oldest), and hands the claim to it if
// that place is unchanged, or deletes the claim if there is none. The
// holder's place goes in the same transaction.
func (f *fifoContender) release(token int64, own string, w *placesWatch) func(context.Context) error {
	return func(ctx context.Context) error {
		var next *mvccpb.KeyValue
		if w != nil {
			next = w.first()
			defer w.stop()
		}
		if next == nil {
			resp, err := f.c.Get(ctx, f.queue, clientv3.WithPrefix(), clientv3.WithSerializable(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(2))
			if err != nil {
				return err
			}
			for _, kv := range resp.Kvs {
				if string(kv.Key) != own {
					next = kv
					break
				}
			}
		}
		if f.keys {
			return f.releaseKeys(ctx, token, own, next)
		}
		cond := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(f.claim), "=", token)}
		ops := []clientv3.Op{clientv3.OpDelete(f.claim)}
		if next != nil {
			cond = append(cond, clientv3.Compare(clientv3.CreateRevision(string(next.Key)), "=", next.CreateRevision))
			ops = []clientv3.Op{clientv3.OpPut(f.claim, string(next.Value), clientv3.WithLease(clientv3.LeaseID(next.Lease)))}
		}
		if own != "" {
			ops = append(ops, clientv3.OpDelete(own))
		}
		_, err := f.c.Txn(ctx).If(cond...).Then(ops...).Commit()
		return err
	}
}

// releaseKeys is release with baton's keys, in the shape of etcdstore's
// release transaction: on the claim still being token's, hand it to next
// if its place is unchanged (claim and guard on next's lease, /last, the
// place touched, the marker) or else delete claim and guard and put the
// marker; the holder's own place goes either way.
func (f *fifoContender) releaseKeys(ctx context.Context, token int64, own string, next *mvccpb.KeyValue) error {
	marker := clientv3.OpPut(f.marker(), strconv.FormatInt(token, 10))
	release := []clientv3.Op{clientv3.OpDelete(f.claim), clientv3.OpDelete(f.guard())}
	els := []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(f.guard()), "=", token)},
		[]clientv3.Op{clientv3.OpDelete(f.guard())}, nil)}
	if own != "" {
		release = append(release, clientv3.OpDelete(own), clientv3.OpGet(f.queue, clientv3.WithPrefix(), clientv3.WithCountOnly()))
		els = append(els, clientv3.OpDelete(own))
	}
	release = append(release, marker)
	els = append(els, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(f.claim), "=", 0)}, []clientv3.Op{marker}, nil))
	then := release
	if next != nil {
		hand := append(f.take(string(next.Value), clientv3.LeaseID(next.Lease)),
			clientv3.OpPut(string(next.Key), "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease()), marker)
		if own != "" {
			hand = append(hand, clientv3.OpDelete(own))
		}
		then = []clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(string(next.Key)), "=", next.CreateRevision),
				clientv3.Compare(clientv3.ModRevision(string(next.Key)), "=", next.ModRevision)},
			hand, release)}
	}
	_, err := f.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(f.claim), "=", token)).Then(then...).Else(els...).Commit()
	return err
}

func (f *fifoContender) close() {
	_, _ = f.c.Revoke(context.Background(), f.lease)
	_ = f.c.Close()
}
