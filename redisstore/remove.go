package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/backend"
)

var (
	_ backend.Remover = (*Store)(nil)
	_ backend.Remover = (*Redlock)(nil)
)

// Remove implements backend.Remover: one script deletes every key of the
// lock named key (lock, fence, queue, queued, next), if and only if
// nothing on it is live. It returns nil if it deleted them or the lock had
// none.
//
// It returns an error matching backend.ErrHeld, which unwraps to
// *backend.HeldError, while the lock is held (HeldError names the holder,
// its token and the claim's PTTL), while a claim whose key was deleted by
// hand could still be live (the last holder and token, and the time left
// until the expiry the fence records, as TryAcquire refuses), while a
// release has handed it to a waiter or reserved it for one (that waiter,
// and the time left of the claim or reservation), and while a waiter's
// place in the queue has not run out (that waiter, and the time left until
// its deadline). A claim that expired without a release is not live:
// Redis expired it.
//
// Removing never lowers the next token: the script deletes the fence only
// while its counter is below the server's clock in microseconds, and a
// fence created anew issues the clock as its first token. So the next
// token is larger than every token issued before for key, on the terms of
// tokens after a restart without persistence (see "Fencing tokens" in the
// package documentation): as long as the server's clock does not go back
// after the removal by more than it was ahead of the last token. A counter
// that is not below the clock (the clock went back, or Redlock raised the
// counter to another server's clock) makes Remove fail, keeping every key,
// until the clock has passed it.
//
// A key of another type, a corrupt lock value or fence, or a fence without
// a token field is reported as backend.ErrCorruptRecord and nothing is
// deleted. A refusal by the server's ACL is reported as
// backend.ErrForbidden, with the commands the user may not run (asked as
// CheckPermissions asks: Redis does not name a command that a script
// runs). Remove runs on a Cluster (the keys share a hash slot) and on a
// Sentinel's primary as every script does. It publishes no notice: it
// deletes only a free lock, so it frees nothing.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := s.open("remove", key); err != nil {
		return err
	}
	if err := checkName(key); err != nil {
		return err
	}
	k := s.keySet(key)
	v, err := removeScript.Run(ctx, s.client, k.all).Slice()
	if err != nil {
		return s.namePermissions(ctx, key, s.wrap(key, k.lock, "remove", err))
	}
	rep := reply{v: v}
	switch rep.int(0) {
	case 1:
		return rep.check(s, key, k.lock, len(v) == 1)
	case 2:
		token, now := rep.uint(1), rep.uint(2)
		if err := rep.check(s, key, k.lock, len(v) == 3); err != nil {
			return err
		}
		return fmt.Errorf("redisstore: remove lock %q (key %s): its last fencing token %d is not below the server's clock (%d µs), and a fence created anew would start from the clock: the clock went back since that token was issued, or Redlock raised it to another server's clock; the keys are kept, and Remove succeeds once the clock has passed the token (in %v)",
			key, k.fence, token, now, time.Duration(token-now+1)*time.Microsecond)
	}
	held := &backend.HeldError{Key: key, Holder: rep.str(1), Token: rep.uint(2), RetryAfter: time.Duration(rep.int(3)) * time.Millisecond}
	if err := rep.check(s, key, k.lock, len(v) == 4 && rep.int(0) == 0); err != nil {
		return err
	}
	return fmt.Errorf("redisstore: remove lock %q (key %s): %w", key, k.lock, held)
}

// Remove implements backend.Remover: it removes the lock named key on
// every server (Store.Remove). It returns nil if every server removed it
// or had no record, and an error matching backend.ErrHeld if any server
// refused because something on it is live there; HeldError then names
// the holder most servers named, the largest token, and the longest time
// left, after which no refusing server's claim remains.
//
// The servers that are free remove their keys even while another refuses
// (nothing on a free server is live), and every server deletes its fence
// only while its counter is below its own clock: a later quorum's token
// is at least the token of a server that kept a counter of the last
// grant's token, or that server's clock after the removal, which is
// larger while its clock does not go back. A corrupt record or a refused
// permission on any server is reported before a refusal, and a server
// that did not answer after it: Remove is then incomplete, and a later
// call finishes it.
func (r *Redlock) Remove(ctx context.Context, key string) error {
	if err := r.open("remove", key); err != nil {
		return err
	}
	if err := checkName(key); err != nil {
		return err
	}
	errs := each(r.stores, func(_ int, s *Store) error { return s.Remove(ctx, key) })
	var (
		held             []*backend.HeldError
		definite, others []error
	)
	for i, err := range errs {
		var h *backend.HeldError
		switch {
		case err == nil:
		case errors.As(err, &h):
			held = append(held, h)
		case errors.Is(err, backend.ErrCorruptRecord), errors.Is(err, backend.ErrForbidden):
			definite = append(definite, fmt.Errorf("%s: %w", r.server(i), err))
		default:
			others = append(others, fmt.Errorf("%s: %w", r.server(i), err))
		}
	}
	switch {
	case len(definite) > 0:
		return fmt.Errorf("redisstore: redlock remove %q: %w", key, errors.Join(definite...))
	case len(held) > 0:
		return fmt.Errorf("redisstore: redlock remove %q: refused by %d of %d servers: %w", key, len(held), len(r.stores), mergeHeld(key, held))
	case len(others) > 0:
		return fmt.Errorf("redisstore: redlock remove %q: removed on %d of %d servers: %w", key, len(r.stores)-len(others), len(r.stores), errors.Join(others...))
	}
	return nil
}

// mergeHeld combines the servers' refusals of a removal: the holder most
// of them named, the largest token, the longest time left.
func mergeHeld(key string, held []*backend.HeldError) *backend.HeldError {
	count := map[string]int{}
	out := &backend.HeldError{Key: key}
	for _, h := range held {
		count[h.Holder]++
		if count[h.Holder] > count[out.Holder] {
			out.Holder = h.Holder
		}
		out.Token = max(out.Token, h.Token)
		out.RetryAfter = max(out.RetryAfter, h.RetryAfter)
	}
	return out
}
