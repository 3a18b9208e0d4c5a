// Package memstore provides a backend.Backend that keeps its lock records
// in the memory of one process.
//
// Use it to coordinate goroutines of one process, in tests, and in examples.
// It is not a distributed lock: it excludes only callers that share the same
// *Store value, and it keeps nothing on disk.
//
// # Guarantees
//
//   - Every operation is atomic: a Store judges and changes a record under
//     one mutex, so at most one claim per key is valid at any instant.
//   - Fencing tokens start at 1 and strictly increase per key for the life of
//     the Store, across holders, releases, expiries and removals (a key
//     created after any Remove starts above the largest token removed).
//     They are not
//     durable: a new Store (a restarted process) starts again at 1, so a
//     resource that outlives the process must not be fenced with them.
//   - Only the owner of a claim (holder identity, nonce and token of its
//     Grant) can renew or release it. An expired claim cannot be renewed
//     or released, even if nobody has taken it since.
//   - Expiry is judged on the Store's clock (WithClock), which defaults to
//     the process's monotonic clock: a claim lasts TTL from the moment the
//     Store applies the acquire or renew, and changing the wall clock does
//     not move it.
//   - A Store owns no timers and no goroutines of its own. A watch (see
//     Store.Watch) holds a registration until its context ends.
package memstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// Store is an in-process backend.Backend, backend.Watcher, backend.Lister
// and backend.Remover. Create it with New; its methods are safe for
// concurrent use.
type Store struct {
	clock baton.PassiveClock

	mu       sync.Mutex
	records  map[string]*record
	watchers map[string]map[chan struct{}]struct{}
	// removed is the largest token of a record Remove deleted; new
	// records count from it, so that a removed key's tokens go on
	// increasing without the Store remembering the key.
	removed uint64
}

var (
	_ backend.Backend = (*Store)(nil)
	_ backend.Watcher = (*Store)(nil)
	_ backend.Lister  = (*Store)(nil)
	_ backend.Remover = (*Store)(nil)
)

// record is one key's state. A record exists from the first acquisition of
// its key on; release clears the owner but keeps the record, and with it
// the fencing counter.
type record struct {
	holder, nonce string // empty once released
	token         uint64 // last token issued
	ttl           time.Duration
	acquired      time.Time // clock reading when the current or last claim was made
	renewed       time.Time // clock reading of the last acquire or renew
	expires       time.Time // acquired or renewed plus TTL; zero when released
	transitions   uint64
	version       uint64 // bumped on every change
}

// validAt reports whether r names an owner whose claim has not expired at
// now.
func (r *record) validAt(now time.Time) bool {
	return r.holder != "" && now.Before(r.expires)
}

// remaining is how long r's claim still lasts at now, or 0.
func (r *record) remaining(now time.Time) time.Duration {
	if !r.validAt(now) {
		return 0
	}
	return r.expires.Sub(now)
}

// held is the error that r's valid claim on key refuses an operation
// with at now.
func (r *record) held(key string, now time.Time) *backend.HeldError {
	return &backend.HeldError{Key: key, Holder: r.holder, Token: r.token, RetryAfter: r.remaining(now)}
}

// Option configures New.
type Option func(*Store)

// WithClock sets the clock on which the Store judges expiry. A
// baton.PassiveClock is enough (every baton.Clock, and clocktest's fake
// clock, is one); the Store only calls Now. Readings should carry Go's
// monotonic clock, as time.Now's do, so that wall-clock changes do not move
// expiry. Default baton.SystemClock(). A nil clock is ignored.
func WithClock(c baton.PassiveClock) Option {
	return func(s *Store) {
		if c != nil {
			s.clock = c
		}
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		clock:    baton.SystemClock(),
		records:  make(map[string]*record),
		watchers: make(map[string]map[chan struct{}]struct{}),
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// TryAcquire implements backend.Backend. It takes key for req if key has no
// record, was released, or its claim has expired on the Store's clock, and
// returns a Grant whose token is one more than the last token issued for
// key. Otherwise it returns an error that unwraps to *backend.HeldError,
// whose RetryAfter is the time the current claim still lasts; that includes
// the case where req's owner itself holds key.
//
// req.Holder and req.Nonce must not be empty and req.TTL must be positive;
// otherwise the error matches backend.ErrInvalidOptions.
func (s *Store) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	if err := check(ctx, key); err != nil {
		return backend.Grant{}, err
	}
	if err := checkOwner(key, req.Holder, req.Nonce, req.TTL); err != nil {
		return backend.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.records[key]
	switch {
	case r == nil:
		r = &record{token: s.removed}
	case r.validAt(now):
		return backend.Grant{}, fmt.Errorf("memory: %w", r.held(key, now))
	case r.token == math.MaxUint64:
		return backend.Grant{}, fmt.Errorf("memory: lock %q: the fencing counter is exhausted (token %d)", key, r.token)
	}
	if r.token > 0 && r.holder != req.Holder {
		// Another identity takes over, or the key was released (no holder).
		r.transitions++
	}
	r.token++
	r.holder, r.nonce, r.ttl = req.Holder, req.Nonce, req.TTL
	r.acquired, r.renewed, r.expires = now, now, now.Add(req.TTL)
	r.version++
	s.records[key] = r
	s.notifyLocked(key)
	return r.grant(key), nil
}

// Renew implements backend.Backend. It extends g's claim to g.TTL from now,
// on the Store's clock, if g's owner (Holder, Nonce and Token) still holds
// key and the claim has not expired. Otherwise the error matches
// backend.ErrLost and says why; an expired claim is lost even if nobody has
// taken key since.
func (s *Store) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	if err := check(ctx, g.Key); err != nil {
		return backend.Grant{}, err
	}
	if err := checkOwner(g.Key, g.Holder, g.Nonce, g.TTL); err != nil {
		return backend.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.records[g.Key]
	if err := owned(g, r, now); err != nil {
		return backend.Grant{}, err
	}
	r.ttl = g.TTL
	r.renewed, r.expires = now, now.Add(g.TTL)
	r.version++
	s.notifyLocked(g.Key)
	return r.grant(g.Key), nil
}

// Release implements backend.Backend. It frees key if g's owner (Holder,
// Nonce and Token) still holds it and the claim has not expired, keeping
// the fencing counter. Otherwise the error matches backend.ErrLost, and
// nothing changes.
func (s *Store) Release(ctx context.Context, g backend.Grant) error {
	if err := check(ctx, g.Key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.records[g.Key]
	if err := owned(g, r, now); err != nil {
		return err
	}
	r.free()
	s.notifyLocked(g.Key)
	return nil
}

// ForceRelease frees key whoever holds it, keeping the fencing counter: the
// next holder gets a larger token. It is an administrator's action; the
// holder whose claim is freed learns it at its next renew, and until then
// may still believe it holds the lock, which is what fencing tokens are
// for. It returns an error matching backend.ErrNotFound if key has no record,
// and nil if key is already free.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[key]
	switch {
	case r == nil:
		return fmt.Errorf("memory: lock %q: %w", key, backend.ErrNotFound)
	case r.holder == "":
		return nil
	}
	r.free()
	s.notifyLocked(key)
	return nil
}

// Remove implements backend.Remover. It deletes key's record if no claim
// on it is valid on the Store's clock (released, force-released or
// expired), and returns an error that unwraps to *backend.HeldError
// otherwise. A key without a record is not an error. The key's next
// acquisition gets a larger token all the same (see Guarantees).
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	r := s.records[key]
	switch {
	case r == nil:
		return nil
	case r.validAt(now):
		return fmt.Errorf("memory: remove: %w", r.held(key, now))
	}
	s.removed = max(s.removed, r.token)
	delete(s.records, key)
	s.notifyLocked(key)
	return nil
}

func (r *record) free() {
	r.holder, r.nonce, r.expires = "", "", time.Time{}
	r.version++
}

// Get implements backend.Backend. Remaining is computed on the Store's clock;
// AcquireTime and RenewTime are that clock's readings without their
// monotonic part. The error matches backend.ErrNotFound if key has never been
// acquired in this Store.
func (s *Store) Get(ctx context.Context, key string) (backend.Record, error) {
	if err := check(ctx, key); err != nil {
		return backend.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[key]
	if r == nil {
		return backend.Record{}, fmt.Errorf("memory: lock %q: %w", key, backend.ErrNotFound)
	}
	return r.toRecord(key, s.clock.Now()), nil
}

// List implements backend.Lister: the records of every key ever acquired in
// the Store, held or not, sorted by key.
func (s *Store) List(ctx context.Context) ([]backend.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	recs := make([]backend.Record, 0, len(s.records))
	for key, r := range s.records {
		recs = append(recs, r.toRecord(key, now))
	}
	slices.SortFunc(recs, func(a, b backend.Record) int { return strings.Compare(a.Key, b.Key) })
	return recs, nil
}

// Watch implements backend.Watcher. The returned channel has a buffer of one
// and receives a value after every acquire, renew, release and forced
// release of key; changes that arrive while a value is pending fold into
// it, and a sender never blocks. Key need not have a record yet.
//
// The Store does not run timers, so the expiry of a claim is not an event:
// a waiter learns of it from HeldError.RetryAfter, which TryAcquire sets
// to the time the claim still lasts.
//
// The channel is closed soon after ctx ends, which also drops the
// registration; a watch whose ctx never ends lives as long as the Store.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := check(ctx, key); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	set := s.watchers[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		s.watchers[key] = set
	}
	set[ch] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		// A set is dropped only once empty, so ch is in the current one.
		// Closing under the mutex keeps notifyLocked from sending on a
		// closed channel.
		cur := s.watchers[key]
		delete(cur, ch)
		if len(cur) == 0 {
			delete(s.watchers, key)
		}
		close(ch)
	})
	return ch, nil
}

// notifyLocked wakes the watchers of key without blocking. s.mu must be
// held.
func (s *Store) notifyLocked(key string) {
	for ch := range s.watchers[key] {
		select {
		case ch <- struct{}{}:
		default: // a value is pending; this change folds into it
		}
	}
}

func (r *record) grant(key string) backend.Grant {
	return backend.Grant{
		Key:     key,
		Holder:  r.holder,
		Nonce:   r.nonce,
		Token:   r.token,
		TTL:     r.ttl,
		Version: strconv.FormatUint(r.version, 10),
	}
}

func (r *record) toRecord(key string, now time.Time) backend.Record {
	return backend.Record{
		Key:         key,
		Holder:      r.holder,
		Nonce:       r.nonce,
		Token:       r.token,
		TTL:         r.ttl,
		AcquireTime: r.acquired.Round(0),
		RenewTime:   r.renewed.Round(0),
		Transitions: r.transitions,
		Remaining:   r.remaining(now),
		Version:     strconv.FormatUint(r.version, 10),
	}
}

// owned returns nil if r is g's unexpired claim at now, else an error
// matching backend.ErrLost that says what happened.
func owned(g backend.Grant, r *record, now time.Time) error {
	lost := func(format string, args ...any) error {
		return fmt.Errorf("memory: lock %q: %w: "+format, append([]any{g.Key, backend.ErrLost}, args...)...)
	}
	switch {
	case r == nil:
		return lost("it has never been acquired in this store")
	case r.holder == "":
		return lost("it was released (last token %d)", r.token)
	case r.holder != g.Holder || r.nonce != g.Nonce || r.token != g.Token:
		return lost("it is now held by %q (token %d), not by %q (token %d)", r.holder, r.token, g.Holder, g.Token)
	case !now.Before(r.expires):
		return lost("the claim (token %d) expired %v ago", r.token, now.Sub(r.expires))
	}
	return nil
}

// check validates key and reports a context that has already ended.
func check(ctx context.Context, key string) error {
	if err := backend.ValidateName(key); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: lock %q: %w", key, err)
	}
	return nil
}

// checkOwner validates the owner and TTL of a request or grant.
func checkOwner(key, holder, nonce string, ttl time.Duration) error {
	switch {
	case holder == "":
		return fmt.Errorf("memory: lock %q: %w: holder is empty", key, backend.ErrInvalidOptions)
	case nonce == "":
		return fmt.Errorf("memory: lock %q: %w: nonce is empty", key, backend.ErrInvalidOptions)
	case ttl <= 0:
		return fmt.Errorf("memory: lock %q: %w: TTL %v must be positive", key, backend.ErrInvalidOptions, ttl)
	}
	return nil
}
