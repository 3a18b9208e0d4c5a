package baton

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"github.com/baton-go/baton/backend"
)

// MaxSemaphoreLimit is the largest limit NewSemaphore accepts. A waiting
// Acquire watches every slot, so the limit is also the number of watches
// one waiter opens.
const MaxSemaphoreLimit = 64

// A Semaphore lets up to Limit holders hold a name at once: a counting
// semaphore across processes, for work that may run a few times in
// parallel but not more (a pool of exporters, a rate of migrations).
//
// # Slots and fencing
//
// A Semaphore of limit N is N locks on the backend, its slots, named
// SlotName(0) to SlotName(N-1) (the name plus ".slot-0" and so on). Each
// slot is a lock with every guarantee of a Mutex: one holder at a time,
// the holder stops before anyone else can start, and fencing tokens that
// strictly increase from one holder of the slot to the next. A Lease from
// Acquire or TryAcquire names its slot (Lease.Name), and its Token is that
// slot's: a protected resource fences per slot, keeping the largest token
// seen for each Lease.Name() exactly as for a Mutex. (One counter for all
// holders could not be checked that way: holders of different slots write
// at the same time with unrelated tokens.)
//
// Every process must use the same limit for a name. Holders never exceed
// the largest limit in use; a process with a smaller limit only contends
// for fewer slots.
//
// A Semaphore may be used by many goroutines at once; every Acquire call is
// a separate contender. Attempts spread over the slots from a random
// first slot. Waiters are not served in order: a Semaphore is not fair, on
// any backend. Create it with NewSemaphore: its zero value is not usable.
type Semaphore struct {
	name  string
	cfg   *config
	slots []*Mutex
}

// NewSemaphore returns a Semaphore of limit holders for name on b. It
// validates the name (see ValidateName; SlotName of the last slot must be
// valid too), the limit (1 to MaxSemaphoreLimit) and the options, as
// NewMutex does; Elector-only options are refused.
func NewSemaphore(b backend.Backend, name string, limit int, opts ...Option) (*Semaphore, error) {
	if err := checkBackend(b); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("baton: %w", err)
	}
	if limit < 1 || limit > MaxSemaphoreLimit {
		return nil, fmt.Errorf("baton: semaphore %q: %w: limit %d; use 1 to %d", name, ErrInvalidOptions, limit, MaxSemaphoreLimit)
	}
	if err := ValidateName(slotName(name, limit-1)); err != nil {
		return nil, fmt.Errorf("baton: semaphore %q: the slot names are too long; use a shorter name: %w", name, err)
	}
	cfg, err := newConfig(opts)
	if err == nil {
		err = cfg.checkKind(false)
	}
	if err != nil {
		return nil, fmt.Errorf("baton: semaphore %q: %w", name, err)
	}
	s := &Semaphore{name: name, cfg: cfg}
	for i := range limit {
		s.slots = append(s.slots, &Mutex{b: b, name: slotName(name, i), cfg: cfg})
	}
	return s, nil
}

func slotName(name string, i int) string { return name + ".slot-" + strconv.Itoa(i) }

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns how many holders may hold the semaphore at once.
func (s *Semaphore) Limit() int { return len(s.slots) }

// Identity returns the holder identity this Semaphore acquires with.
func (s *Semaphore) Identity() string { return s.cfg.identity }

// SlotName returns the lock name of slot i (0 <= i < Limit): the name a
// Lease of that slot carries, and the record a status view shows.
func (s *Semaphore) SlotName(i int) string { return slotName(s.name, i) }

// TryAcquire tries the slots in turn, from a random one, one attempt each,
// and returns a Lease of the first it gets. If every slot is held, the error matches ErrHeld and
// unwraps (errors.As) to the *HeldError of the slot whose claim can end
// first. A slot the store could not be asked about (unavailable) makes the
// call fail with that error, even if the other slots were held.
//
// As with Mutex.TryLock, ctx bounds the attempt, not the tenure.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	start := s.cfg.clock.Now()
	l, err := slotAttempts{s}.claim(ctx, context.WithoutCancel(ctx))
	if err != nil {
		return nil, s.wrap(err)
	}
	s.cfg.observeAcquired(l, Event{Kind: EventAcquired, Name: l.Name(), Holder: s.cfg.identity, Token: l.Token(), Duration: s.cfg.clock.Since(start)})
	return l, nil
}

// Acquire blocks until it holds a slot, ctx ends, or the backend returns
// an error that retrying cannot fix, as Mutex.Lock does: while every slot
// is held it waits for the backend's watch of every slot (if the backend
// is a Watcher) or retries every RetryPeriod, and no later than the first
// slot's claim can end.
//
// As with Mutex.Lock, the Lease's context keeps ctx's values but not its
// cancellation.
func (s *Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	_, canWatch := s.slots[0].b.(backend.Watcher)
	l, err := s.cfg.await(ctx, context.WithoutCancel(ctx), s.name, slotAttempts{s}, canWatch, nil)
	if err != nil {
		return nil, s.wrap(err)
	}
	return l, nil
}

func (s *Semaphore) wrap(err error) error {
	if strings.Contains(err.Error(), fmt.Sprintf("semaphore %q", s.name)) {
		return fmt.Errorf("baton: %w", err)
	}
	return fmt.Errorf("baton: semaphore %q: %w", s.name, err)
}

// slotAttempts try every slot of a semaphore.
type slotAttempts struct{ s *Semaphore }

// claim tries the slots in turn from a random one. Every attempt is a
// one-shot (Request.Waiting false) with its own nonce: a store that queues
// waiters must not keep a place for this caller on every slot, since it
// collects at most one.
func (a slotAttempts) claim(ctx, parent context.Context) (*Lease, error) {
	slots := a.s.slots
	first := rand.IntN(len(slots))
	var soonest *HeldError
	var failed error
	for k := range slots {
		l, err := slots[(first+k)%len(slots)].try(ctx, parent, NewNonce(), false)
		var held *HeldError
		switch {
		case err == nil:
			return l, nil
		case errors.As(err, &held):
			if soonest == nil || endsSooner(held, soonest) {
				soonest = held
			}
		case ctx.Err() != nil || isPermanent(err):
			return nil, err
		default:
			failed = err // the slot may be free: report this, not "held"
		}
	}
	if failed != nil {
		return nil, failed
	}
	return nil, fmt.Errorf("semaphore %q: all %d slots are held (the first that can end: %w)", a.s.name, len(slots), soonest)
}

// endsSooner reports whether a's claim can end before b's; an unknown end
// (RetryAfter 0) is the soonest, since it may be any moment.
func endsSooner(a, b *HeldError) bool {
	return a.RetryAfter < b.RetryAfter
}

// watch merges a watch of every slot into one channel, closed when any of
// them breaks (the engine then polls, and reopens the watch) or ctx ends.
func (a slotAttempts) watch(ctx context.Context) (<-chan struct{}, error) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, m := range a.s.slots {
		ch, err := m.b.(backend.Watcher).Watch(ctx, m.name)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Go(func() {
			defer cancel() // one slot's watch broke: end them all
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-ch:
					if !ok {
						return
					}
					select {
					case out <- struct{}{}:
					default: // a wake-up is pending already
					}
				}
			}
		})
	}
	go func() {
		wg.Wait()
		cancel()
		close(out)
	}()
	return out, nil
}
