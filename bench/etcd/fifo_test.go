package etcdbench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// fifoContender is the handover floor of a FIFO lock on etcd that hands
// the lock over in the release, as baton's fair mode does, with no
// library around it: no engine, no Store, no guard, /last record or
// release marker, no clean-up of places whose answers were lost. A
// contender that finds the lock held writes a place (a queue key on its
// lease) in the same transaction and watches the claim; the release reads
// the oldest place (a serializable read) and, if there is one, puts the
// claim with that place's value on that place's lease in its one
// transaction; the waiter holds the lock when its watch shows the claim
// with its value. It is a floor for the handover table only: it ignores
// every failure a real lock must survive.
type fifoContender struct {
	c     *clientv3.Client
	lease clientv3.LeaseID
	claim string
	queue string
	id    string
	n     atomic.Int64
}

func openFIFO(t testing.TB, endpoints []string, key, id string) contender {
	c := openClient(t, endpoints)
	l, err := c.Grant(t.Context(), int64(lockTTL/time.Second)*6)
	if err != nil {
		t.Fatal(err)
	}
	return &fifoContender{c: c, lease: l.ID, claim: "/bench/fifo/" + key, queue: "/bench/fifo/" + key + "/queue/", id: id}
}

func (f *fifoContender) lock(ctx context.Context) (func(context.Context) error, error) {
	val := fmt.Sprintf("%s-%d", f.id, f.n.Add(1))
	place := f.queue + val
	resp, err := f.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(f.claim), "=", 0), clientv3.Compare(clientv3.CreateRevision(f.queue), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(f.claim, val, clientv3.WithLease(f.lease))).
		Else(clientv3.OpPut(place, val, clientv3.WithLease(f.lease))).
		Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return f.release(resp.Header.Revision, ""), nil
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
				return f.release(ev.Kv.ModRevision, place), nil
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
				Then(clientv3.OpPut(f.claim, val, clientv3.WithLease(f.lease))).
				Commit()
			if err != nil {
				return nil, err
			}
			if got.Succeeded {
				return f.release(got.Header.Revision, place), nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("fifo: the watch ended")
}

// release returns the unlock of a claim of mod revision token: it reads
// the oldest place other than the holder's own (one serializable read of
// the two oldest) and hands the claim to it if that place is unchanged,
// or deletes the claim if there is none. The holder's place goes in the
// same transaction.
func (f *fifoContender) release(token int64, own string) func(context.Context) error {
	return func(ctx context.Context) error {
		resp, err := f.c.Get(ctx, f.queue, clientv3.WithPrefix(), clientv3.WithSerializable(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(2))
		if err != nil {
			return err
		}
		cond := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(f.claim), "=", token)}
		ops := []clientv3.Op{clientv3.OpDelete(f.claim)}
		for _, kv := range resp.Kvs {
			if string(kv.Key) == own {
				continue
			}
			cond = append(cond, clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision))
			ops = []clientv3.Op{clientv3.OpPut(f.claim, string(kv.Value), clientv3.WithLease(clientv3.LeaseID(kv.Lease)))}
			break
		}
		if own != "" {
			ops = append(ops, clientv3.OpDelete(own))
		}
		_, err = f.c.Txn(ctx).If(cond...).Then(ops...).Commit()
		return err
	}
}

func (f *fifoContender) close() {
	_, _ = f.c.Revoke(context.Background(), f.lease)
	_ = f.c.Close()
}
