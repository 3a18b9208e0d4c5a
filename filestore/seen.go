package filestore

import (
	"math"
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
//
// An entry is kept until this Store sees the lock again and finds the
// claim ended, or the record missing for long enough. A Store that tries
// many names once each (schedule's lock per slot: every replica tries
// the slot, one wins, and the others never touch that name again) would
// keep one entry per name for ever, so when the map has doubled since the
// last prune (and holds more than minSeenPrune) the Store reads the
// records of the entries whose claim, as last seen, has ended (see
// Store.pruneSeen): an entry whose record shows no live claim is
// forgotten, since a later deletion of that record cannot hide a claim
// this Store saw; an entry whose record is missing (removed, as schedule
// removes a finished slot's lock, or deleted) counts as seen missing then,
// and is forgotten at a later prune once the rule above has run out.
type seenClaims struct {
	mu sync.Mutex
	m  map[string]*seenClaim
	// pruneAt is the size past which the next prune is due (see due).
	pruneAt int
}

// minSeenPrune is the smallest map that is pruned.
const minSeenPrune = 256

type seenClaim struct {
	holder  string
	token   uint64
	ttl     time.Duration
	expires int64 // machine clock at which the claim, as last seen, ends
	missing int64 // machine clock at which the record was first seen missing; 0: not yet
}

// end is when a claim whose record was seen missing can have ended at the
// latest (see seenClaims).
func (sc *seenClaim) end() int64 { return max(sc.expires, sc.missing+int64(sc.ttl)) }

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
	end := sc.end()
	if now >= end {
		delete(c.m, key)
		return nil
	}
	return &backend.HeldError{Key: key, Holder: sc.holder, Token: sc.token, RetryAfter: time.Duration(end - now)}
}

// due returns, if the map has doubled since the last prune and holds more
// than minSeenPrune entries, the entries whose claim, as last seen, has
// ended at machine time now (read from clock) and whose record was never
// seen missing, with now, for the caller to read their records (reread)
// and then call pruned. It forgets the entries whose record was seen
// missing long enough ago that the claim is over (missing would forget
// them at its next call). It returns nil if no prune is due, one is
// running, or the clock cannot be read.
func (c *seenClaims) due(clock func() (int64, error)) (ended map[string]*seenClaim, now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) <= max(c.pruneAt, minSeenPrune) {
		return nil, 0
	}
	now, err := clock()
	if err != nil {
		return nil, 0
	}
	c.pruneAt = math.MaxInt // until pruned: one prune at a time
	ended = map[string]*seenClaim{}
	for key, sc := range c.m {
		switch {
		case sc.missing == 0 && sc.expires <= now:
			ended[key] = sc
		case sc.missing != 0 && now >= sc.end():
			delete(c.m, key)
		}
	}
	return ended, now
}

// reread records what a read at machine time now found for key, whose
// entry was sc when due returned it: r (nil if the record is missing). An
// entry replaced meanwhile is left alone: it is newer than the read.
func (c *seenClaims) reread(key string, sc *seenClaim, r *record, now int64, bootID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.m[key] != sc:
	case r == nil:
		// Removed (Remove) or deleted: from now on the entry is kept
		// only as long as missing would keep it, and due then forgets it.
		if sc.missing == 0 {
			sc.missing = now
		}
	case r.remaining(now, bootID) == 0:
		delete(c.m, key)
	default:
		c.m[key] = &seenClaim{holder: r.holder, token: r.token, ttl: r.ttl, expires: r.expires}
	}
}

// pruned ends a prune that due started: the next is due when the map has
// doubled again.
func (c *seenClaims) pruned() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneAt = 2 * len(c.m)
}
