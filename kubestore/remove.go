package kubestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Remove implements backend.Remover: it deletes the lock object key if the
// object records no claim, for lock names that are used once (package
// schedule locks each slot of a job under its own name). See Removing lock
// objects in the package documentation.
//
// It reads the object and refuses, with an error matching backend.ErrHeld
// that unwraps to a *backend.HeldError, one with a holder (a live claim, or
// one that expired as judged here without a release) or with
// FinalizerClaim; RetryAfter is the claim's remaining time as judged from
// this process's observations. A free object it deletes with the
// preconditions uid and resourceVersion of the version it read, so that
// the API server refuses the delete (409 Conflict) if anyone acquired the
// object since; Remove then reads again and decides again, up to
// WithMaxConflicts times. A version with a claim is never deleted.
//
// It returns nil if it deleted the object, if there is none, and if the
// object is being deleted already without a claim (it goes once the
// finalizers of others do; baton never acquires it). It refuses an object
// of another application or tool (*ApplicationError), and one whose
// fencing token is above its resourceVersion (a counter set by hand, or an
// object copied from another cluster): the next object of that name would
// start its tokens at the cluster's resourceVersion, possibly below that
// token.
//
// The delete needs the verb "delete" on the resource, which nothing else
// in baton uses; a denied delete returns an error matching
// backend.ErrForbidden that says so.
func (s *store) Remove(ctx context.Context, key string) error {
	const op = "remove"
	if err := backend.ValidateName(key); err != nil {
		return fmt.Errorf("kube: %s in namespace %s: %w", op, s.ns, err)
	}
	if err := s.ctxErr(ctx, op, key); err != nil {
		return err
	}
	var lastErr error
	for range s.o.maxConflicts {
		cur, err := s.k.get(ctx, key)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return s.fail(ctx, op, "get", key, err)
		}
		if err := s.removable(cur); err != nil {
			return err
		}
		if cur.deleting {
			return nil // and it cannot be claimed again: see withClaimFinalizer
		}
		if err := s.keepsCounter(cur.name, cur.token, cur.rv); err != nil {
			return err
		}
		err = s.k.deleteVersion(ctx, cur)
		switch {
		case err == nil:
			s.removed(cur)
			return nil
		case apierrors.IsConflict(err):
			lastErr = err // changed since the read: decide again
		case apierrors.IsNotFound(err):
			return nil // someone else deleted it first
		default:
			return s.fail(ctx, op, "delete", key, err)
		}
	}
	return s.removeContended(key, lastErr)
}

// removable returns nil if cur, as read by Remove, may be deleted: it is
// this application's and records no claim. Otherwise it returns an
// *ApplicationError, or an error matching backend.ErrHeld.
func (s *store) removable(cur object) error {
	if err := s.checkApplication(cur); err != nil {
		return err
	}
	rem := s.remaining(cur) // observes cur, as any read does
	if cur.holder == "" && !cur.claimed {
		return nil
	}
	return fmt.Errorf("kube: remove %s %s/%s: %s: %w", s.k.resource(), s.ns, cur.name, claimState(cur.holder, rem),
		&backend.HeldError{Key: cur.name, Holder: cur.holder, Token: cur.token, RetryAfter: rem})
}

// claimState says why Remove refuses an object with a claim: holder's
// (rem: its remaining time as judged here), or FinalizerClaim alone if
// holder is empty.
func claimState(holder string, rem time.Duration) string {
	switch {
	case holder == "":
		return fmt.Sprintf("the object carries the finalizer %s without a holder (written by hand?); "+
			"Remove deletes only a released lock object: baton release --force removes the finalizer", FinalizerClaim)
	case rem == 0:
		return fmt.Sprintf("the claim of %q has expired as judged here but was never released; "+
			"Remove deletes only a released lock object: the next acquisition takes the claim over, or baton release --force clears it", holder)
	}
	return "the lock is held; Remove deletes only a released lock object"
}

// keepsCounter refuses to delete the object name whose last fencing token
// is token, at resourceVersion rv, unless token is at most rv. The first
// token of a new object of that name is the resourceVersion of its
// creation, which is larger than rv but not necessarily than token: an old
// object's counter may have been set by hand (see Fencing tokens), or the
// object copied from another cluster. Deleting such an object would let
// tokens go back, so it stays.
func (s *store) keepsCounter(name string, token uint64, rv string) error {
	n, err := parseResourceVersion(rv)
	if err != nil {
		return fmt.Errorf("kube: remove %s %s/%s: %w", s.k.resource(), s.ns, name, errCorrupt(err))
	}
	if token <= n {
		return nil
	}
	return fmt.Errorf("kube: remove %s %s/%s: kept: its fencing token %d is above its resourceVersion %d "+
		"(the counter was set by hand, or the object was copied from another cluster), and a new object of this name "+
		"would start at the cluster's resourceVersion, which may be below %d, so tokens could go back; "+
		"delete it by hand only once no fenced resource remembers tokens that large",
		s.k.resource(), s.ns, name, token, n, token)
}

// removeContended is Remove's answer when every delete lost to a write
// made after its read: others keep acquiring the lock.
func (s *store) removeContended(key string, lastErr error) error {
	return fmt.Errorf("kube: remove %s %s/%s: contended: the object changed between the read and the delete %d times in a row (last: %v): %w",
		s.k.resource(), s.ns, key, s.o.maxConflicts, lastErr, &backend.HeldError{Key: key})
}

// removed records that this process deleted o, a version without a claim,
// with a delete conditional on that version: o was the object's final
// state, so the object's absence costs no wait here, as a watch's Deleted
// event of a free object costs none (see missing). What this process saw
// of another object of the same name (another uid) is kept. The watch's
// view, if it still shows this object, shows it missing.
func (s *store) removed(o object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if obs, ok := s.seen[o.name]; ok && sameObject(obs.uid, o.uid) {
		delete(s.seen, o.name)
	}
	if sw := s.watches[o.name]; sw != nil && sw.valid && sw.exists && sameObject(sw.obj.uid, o.uid) {
		sw.exists, sw.obj = false, object{}
	}
}

// deletePreconditions are the preconditions of a delete of o: its
// resourceVersion, which every delete carries (any write since o was read,
// and a deletion and creation again, changes it), and its uid, which an API
// server always sets (only fake clients leave it out).
func deletePreconditions(o object) (*metav1.Preconditions, error) {
	if o.rv == "" {
		return nil, fmt.Errorf("kube: internal error: delete of %q without a resourceVersion", o.name)
	}
	pre := &metav1.Preconditions{ResourceVersion: &o.rv}
	if o.uid != "" {
		uid := types.UID(o.uid)
		pre.UID = &uid
	}
	return pre, nil
}

// Remove implements backend.Remover, as LeaseStore.Remove does: it
// deletes the DistributedLock key, with the preconditions uid and
// resourceVersion of the version read, if it has no holder entry (live or
// expired) and no FinalizerClaim; otherwise it returns an error matching
// backend.ErrHeld naming the entry that lasts longest as judged here. An
// object whose status.token is above its resourceVersion is kept.
func (s *DistributedLockStore) Remove(ctx context.Context, key string) error {
	const op = "remove"
	var lastErr error
	for range s.base.o.maxConflicts {
		cur, err := s.read(ctx, op, key)
		switch {
		case errors.Is(err, backend.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		if err := s.removable(cur); err != nil {
			return err
		}
		if cur.DeletionTimestamp != nil {
			return nil
		}
		if err := s.base.keepsCounter(key, uint64(max(0, cur.Status.Token)), cur.ResourceVersion); err != nil {
			return err
		}
		err = s.base.k.deleteVersion(ctx, object{name: key, uid: string(cur.UID), rv: cur.ResourceVersion})
		switch {
		case err == nil:
			s.removed(cur)
			return nil
		case apierrors.IsConflict(err):
			lastErr = err
		case apierrors.IsNotFound(err) && !isCRDMissing(err):
			return nil
		default:
			return s.fail(ctx, op, "delete", key, err)
		}
	}
	return s.base.removeContended(key, lastErr)
}

// removable is store.removable for a DistributedLock: the HeldError names
// the holder entry that lasts longest as judged here.
func (s *DistributedLockStore) removable(cur *v1alpha1.DistributedLock) error {
	if err := s.checkApplication(cur); err != nil {
		return err
	}
	rem := s.observe(cur)
	if len(cur.Status.Holders) == 0 && !slices.Contains(cur.Finalizers, FinalizerClaim) {
		return nil
	}
	held := &backend.HeldError{Key: cur.Name}
	if i := longest(rem); i >= 0 {
		h := &cur.Status.Holders[i]
		held.Holder, held.Token, held.RetryAfter = h.Identity, uint64(h.Token), rem[i]
	}
	return fmt.Errorf("kube: remove %s %s/%s: %s: %w", dlResource, s.base.ns, cur.Name, claimState(held.Holder, held.RetryAfter), held)
}

// longest is the index of the largest of rem, or -1 if rem is empty.
func longest(rem []time.Duration) int {
	i := -1
	for j := range rem {
		if i < 0 || rem[j] > rem[i] {
			i = j
		}
	}
	return i
}

// removed is store.removed for a DistributedLock: l, without holder
// entries, was the object's final state.
func (s *DistributedLockStore) removed(l *v1alpha1.DistributedLock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.claims[l.Name]; ok && sameObject(c.uid, string(l.UID)) {
		delete(s.claims, l.Name)
	}
}
