package filestore

import (
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
)

// A Store remembers, per lock, the last live claim it saw (in a record it
// read for TryAcquire, Renew or Get, or wrote itself), so that a record
// deleted from under its holder (rm NAME.json) does not let this Store take
// the lock while that claim could still be live: the holder learns of the
// deletion only at its next renew and works until then.
//
// The claim could have been renewed after this Store last looked, at the
// latest just before the record vanished, so it can last until
//
//	max(expiry last seen, time the record was first seen missing + TTL)
//
// on the machine's monotonic clock, which every process reads alike (see
// the package documentation). Until then TryAcquire refuses with a
// *backend.HeldError naming the last holder seen.
type seenClaims struct {
	mu sync.Mutex
	m  map[string]*seenClaim
}

type seenClaim struct {
	holder  string
	token   uint64
	ttl     time.Duration
	expires int64 // machine clock at which the claim, as last seen, ends
	missing int64 // machine clock at which the record was first seen missing; 0: not yet
}

// saw records what this Store found for key at machine time now: a live
// claim is remembered, anything else (a free or expired record) forgotten.
func (c *seenClaims) saw(key string, r *record, now int64, bootID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r == nil || r.remaining(now, bootID) == 0 {
		delete(c.m, key)
		return
	}
	if c.m == nil {
		c.m = make(map[string]*seenClaim)
	}
	c.m[key] = &seenClaim{holder: r.holder, token: r.token, ttl: r.ttl, expires: r.expires}
}

// forget drops what is known about key (after a release or a forced one).
func (c *seenClaims) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// missing is called when key's record is missing at machine time now. It
// returns a HeldError for the last claim seen if that claim could still be
// live, else nil (and forgets the claim).
func (c *seenClaims) missing(key string, now int64) *backend.HeldError {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc := c.m[key]
	if sc == nil {
		return nil
	}
	if sc.missing == 0 {
		sc.missing = now
	}
	end := max(sc.expires, sc.missing+int64(sc.ttl))
	if now >= end {
		delete(c.m, key)
		return nil
	}
	return &backend.HeldError{Key: key, Holder: sc.holder, Token: sc.token, RetryAfter: time.Duration(end - now)}
}
