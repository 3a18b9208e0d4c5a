package etcdstore

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/backend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Remove implements backend.Remover with one transaction: if the claim key,
// its guard (see guardKey) and every place in the lock's fair queue are
// absent, it deletes every key under <prefix><name>/: the /last record,
// the release marker, and any other key left there. Otherwise it deletes
// nothing and reads what stands in the way, at the same revision, and
// returns an error matching backend.ErrHeld that unwraps to
// *backend.HeldError: the claim's holder and token (RetryAfter as
// TryAcquire gives it), a guarded claim's if its key was deleted by hand,
// or, if only places remain, no holder and a message naming the oldest.
// The check and the deletes being one transaction, a concurrent acquire
// either comes first (and Remove refuses) or finds nothing and creates the
// lock anew; nothing is read before and written after without a
// condition, so there is nothing to read again. A lock without keys is not
// an error.
//
// Remove does not judge a claim expired: its key goes at its deadline or
// with its holder's lease, and Remove succeeds after that. Tokens go on
// increasing: the next claim's is its mod revision, above the removal's
// revision. If the claim this Store last saw on the lock (see ghost) was
// released before the removal, the Store forgets it, so that its own next
// attempt acquires at once; other Stores that saw a claim cannot tell the
// removal from a deletion by hand (see "Removing a lock" in the package
// documentation).
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := s.check(ctx, name); err != nil {
		return err
	}
	ck, _, qp := s.Keys(name)
	gk := s.guardKey(name)
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ck), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(gk), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix()).
		// The marker is read before the delete takes it, for removed.
		Then(clientv3.OpGet(s.releasedKey(name), clientv3.WithKeysOnly()),
			clientv3.OpDelete(ck+"/", clientv3.WithPrefix())).
		Else(clientv3.OpGet(ck), clientv3.OpGet(gk), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).
		Commit()
	if err != nil {
		return s.permissionFix(s.wrap(name, "remove", err))
	}
	if !resp.Succeeded {
		return s.removeRefused(name, resp)
	}
	s.removed(name, kvOrNil(resp.Responses[0].GetResponseRange().GetKvs()), resp.Header.Revision)
	return nil
}

// removeRefused returns the error for a Remove transaction (resp) whose
// condition failed: its failure branch read the claim, the guard and the
// oldest place in the queue, in that order.
func (s *Store) removeRefused(name string, resp *clientv3.TxnResponse) error {
	rs := resp.Responses
	if claimKV := kvOrNil(rs[0].GetResponseRange().GetKvs()); claimKV != nil {
		he, err := s.removeHeld(name, claimKV, false)
		if err != nil {
			return err
		}
		return fmt.Errorf("etcdstore: remove: %w (a lock is removed only once released)", he)
	}
	if guard := kvOrNil(rs[1].GetResponseRange().GetKvs()); guard != nil {
		he, err := s.removeHeld(name, guard, true)
		if err != nil {
			return err
		}
		return fmt.Errorf("etcdstore: remove: %w (its claim key was deleted without a release; its guard %q stays until the claim ends by its holder's clock, or ForceRelease deletes it)",
			he, guard.Key)
	}
	places := rs[2].GetResponseRange()
	if first := kvOrNil(places.GetKvs()); first != nil {
		who := ""
		if holder, _ := ownerOf(first); holder != "" {
			who = fmt.Sprintf(", of %q", holder)
		}
		return fmt.Errorf("etcdstore: remove: %w (its fair queue holds %d place(s), the oldest %q%s: waiters', or that of a holder whose claim was force-released, which its Store deletes at the claim's deadline; remove the lock once they are gone)",
			&backend.HeldError{Key: name}, places.GetCount(), first.Key, who)
	}
	return fmt.Errorf("etcdstore: lock %q: remove: unexpected transaction response: the condition failed, but the claim, its guard and the queue read as absent", name)
}

// removeHeld returns the HeldError for Remove's refusal on the claim key
// kv, or on its guard (guard set: the claim key was deleted by hand), with
// RetryAfter as TryAcquire gives it: for a claim, its remaining time if
// this Store holds it and 0 otherwise; for a guard, a verification period
// of its TTL (see guarded).
func (s *Store) removeHeld(name string, kv *mvccpb.KeyValue, guard bool) (*backend.HeldError, error) {
	v, err := decodeValue(kv.Value)
	if err != nil {
		return nil, s.corrupt(name, string(kv.Key), err)
	}
	he := &backend.HeldError{Key: name, Holder: v.holder, Token: uint64(kv.ModRevision)}
	if guard {
		_, _, he.RetryAfter = leaseTiming(v.ttl)
		return he, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.claims[name]; c != nil && c.token == kv.ModRevision && c.lost == nil {
		he.RetryAfter = max(time.Until(c.deadline), 0)
	}
	return he, nil
}

// removed updates the Store's books after its transaction removed name at
// revision rev, which found no claim and no guard; marker is the release
// marker it read before deleting it (nil if there was none). The claim the
// Store last saw on name is forgotten if the marker shows it released (the
// condition it adds to an acquire held); otherwise it vanished without a
// release, and its grace runs (see settleSeenLocked). The fair queue's
// hints for name go: they describe keys that are gone.
func (s *Store) removed(name string, marker *mvccpb.KeyValue, rev int64) {
	now := time.Now()
	s.mu.Lock()
	if sc := s.seen[name]; sc != nil {
		released := marker != nil && marker.ModRevision > sc.mod
		if settleSeenLocked(sc, released, sc.mod < rev, now) {
			delete(s.seen, name)
		}
	}
	s.mu.Unlock()
	s.fq.mu.Lock()
	delete(s.fq.busy, name)
	delete(s.fq.tail, name)
	delete(s.fq.contended, name)
	s.fq.mu.Unlock()
}
