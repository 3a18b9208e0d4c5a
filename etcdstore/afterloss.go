package etcdstore

import (
	"fmt"

	"github.com/baton-go/baton/backend"
)

// A lossCall is a holder's AfterLoss call, pending on its claim.
type lossCall struct{ f func(why error) }

// AfterLoss implements backend.LossNotifier: f is called, in its own
// goroutine, once this Store finds g's claim lost: etcd reported its lease
// gone (a keepalive answer, within a keepalive period of the revocation or
// expiry), a verification found its key deleted or replaced, or the Store
// was closed. The holder then stops at once instead of at its next Renew,
// which narrows the time in which a lease revoked early (by hand, or by a
// deposed raft leader: see "Deleted claims" in the package documentation)
// lets two holders act. f is called at once if g is not a live claim of
// this Store.
func (s *Store) AfterLoss(g backend.Grant, f func(why error)) (stop func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.claims[g.Key]
	switch {
	case c == nil || c.holder != g.Holder || c.nonce != g.Nonce || uint64(c.token) != g.Token:
		go f(fmt.Errorf("etcdstore: lock %q: token %d is not held through this Store", g.Key, g.Token))
		return func() bool { return false }
	case c.lost != nil:
		go f(c.lost)
		return func() bool { return false }
	}
	call := &lossCall{f}
	c.onLost = call
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.onLost != call {
			return false
		}
		c.onLost = nil
		return true
	}
}

// loseLocked ends c with why, unless it ended already, and makes its
// holder's AfterLoss call. s.mu must be held.
func (s *Store) loseLocked(c *claim, why error) {
	if c.lost != nil {
		return
	}
	c.lost = why
	if call := c.onLost; call != nil {
		c.onLost = nil
		go call.f(why)
	}
}
