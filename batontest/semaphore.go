package batontest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// The subtests in this file run the backend under baton.Semaphore: N slot
// locks, each with a Mutex's guarantees.

const semaphoreLimit = 3

// newSemaphore returns a Semaphore of semaphoreLimit slots on b for name,
// with newMutex's timing.
func (e *env) newSemaphore(b backend.Backend, name, id string, opts ...baton.Option) *baton.Semaphore {
	e.t.Helper()
	ttl := e.s.mutexTTL()
	sem, err := baton.NewSemaphore(b, name, semaphoreLimit, append([]baton.Option{
		baton.WithIdentity(id),
		baton.WithTTL(ttl),
		baton.WithRenewDeadline(ttl * 3 / 4),
		baton.WithRetryPeriod(e.s.fastRetry()),
		quiet,
	}, opts...)...)
	if err != nil {
		e.t.Fatalf("NewSemaphore: %v", err)
	}
	return sem
}

// testSemaphore: contenders on separate clients fill every slot, each
// with a lease of its own slot; one more finds the semaphore full, with an
// error naming a held slot; a waiting Acquire gets the slot a holder
// unlocks, with a larger token for that slot; and an unlocked slot is
// free in the store and keeps its token.
func (s *suite) testSemaphore(t *testing.T) {
	e := s.setup(t)
	const name = "semaphore"
	var (
		sems   []*baton.Semaphore
		leases []*baton.Lease
	)
	for i := range semaphoreLimit + 1 {
		sems = append(sems, e.newSemaphore(e.client(), name, fmt.Sprintf("sem-%d", i)))
	}
	slots := map[string]bool{}
	for i := range semaphoreLimit {
		slots[sems[0].SlotName(i)] = true
	}
	for _, sem := range sems[:semaphoreLimit] {
		l, err := sem.TryAcquire(e.ctx)
		if err != nil {
			t.Fatalf("TryAcquire by %q with %d of %d slots held: %v", sem.Identity(), len(leases), semaphoreLimit, err)
		}
		unlockAtCleanup(t, l)
		if !slots[l.Name()] {
			t.Fatalf("TryAcquire by %q: lease of %q, which is not a free slot of %q (free: %v)", sem.Identity(), l.Name(), name, slices.Sorted(mapKeys(slots)))
		}
		delete(slots, l.Name())
		leases = append(leases, l)
	}
	last := sems[semaphoreLimit]
	_, err := last.TryAcquire(e.ctx)
	var held *backend.HeldError
	if !errors.As(err, &held) || !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire with every slot held: %v; want an error matching ErrHeld that unwraps to *HeldError", err)
	}
	if !slices.ContainsFunc(leases, func(l *baton.Lease) bool { return l.Name() == held.Key && l.Holder() == held.Holder }) {
		t.Errorf("TryAcquire with every slot held: the HeldError names %q held by %q, which is none of the leases", held.Key, held.Holder)
	}

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	type result struct {
		l   *baton.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := last.Acquire(ctx)
		got <- result{l, err}
	}()
	freed := leases[1]
	if err := freed.Unlock(e.ctx); err != nil {
		t.Fatalf("Unlock of %q: %v", freed.Name(), err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(eventTimeout + s.mutexTTL()):
		t.Fatalf("Acquire did not return within %v of a slot's release", eventTimeout+s.mutexTTL())
	}
	if r.err != nil {
		t.Fatalf("Acquire after a slot's release: %v", r.err)
	}
	unlockAtCleanup(t, r.l)
	if r.l.Name() != freed.Name() || r.l.Token() <= freed.Token() {
		t.Errorf("Acquire after the release of %q (token %d) got %q with token %d; want that slot with a larger token",
			freed.Name(), freed.Token(), r.l.Name(), r.l.Token())
	}
	for _, l := range []*baton.Lease{leases[0], leases[2], r.l} {
		if err := l.Unlock(e.ctx); err != nil {
			t.Errorf("Unlock of %q: %v", l.Name(), err)
		}
	}
	if rec := e.get(e.client(), r.l.Name()); rec.Held() || rec.Token != r.l.Token() {
		t.Errorf("after Unlock, slot %q: holder %q, token %d, held %v; want free with token %d", r.l.Name(), rec.Holder, rec.Token, rec.Held(), r.l.Token())
	}
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// testExclusiveSemaphore: 8 Semaphores on 8 clients, two goroutines each,
// take turns with Acquire and Unlock, two rounds each or until the work
// budget runs out. Every lease is of one of the semaphore's slots, and each
// slot passes the tenure check of testExclusiveMutex (never two valid
// holders of a slot at once, tokens strictly increasing per slot), so
// never more than the limit hold at once. A lease lost on a busy machine
// (step-down, or expiry after its validity) is counted, not failed.
func (s *suite) testExclusiveSemaphore(t *testing.T) {
	e := s.setup(t)
	const (
		name      = "exclusive-semaphore"
		clients   = 8
		perClient = 2
		rounds    = 2
	)
	ctx, cancel := context.WithTimeout(e.ctx, s.workBudget())
	defer cancel()
	var (
		mu       sync.Mutex
		perSlot  = map[string]*tenures{}
		acquired atomic.Int64
		lost     atomic.Int64
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		t.Errorf(format, args...)
		cancel()
	}
	var sems []*baton.Semaphore
	for i := range clients {
		sems = append(sems, e.newSemaphore(e.client(), name, fmt.Sprintf("sem-%02d", i)))
	}
	began := time.Now()
	for _, sem := range sems {
		for range perClient {
			wg.Go(func() {
				for range rounds {
					l, err := sem.Acquire(ctx)
					if err != nil {
						if ctx.Err() == nil {
							fail("Acquire by %q: %v", sem.Identity(), err)
						}
						return
					}
					start := time.Now()
					runtime.Gosched()
					left := time.Now()
					err = l.Unlock(e.ctx)
					mu.Lock()
					ts := perSlot[l.Name()]
					if ts == nil {
						ts = &tenures{}
						perSlot[l.Name()] = ts
					}
					mu.Unlock()
					ts.add(sem.Identity(), l.Token(), start, left, l.ValidUntil())
					acquired.Add(1)
					switch {
					case err == nil:
					case errors.Is(err, baton.ErrStepDown), lostInTime(err, l.ValidUntil()):
						lost.Add(1)
					default:
						fail("Unlock by %q of %q (token %d): %v", sem.Identity(), l.Name(), l.Token(), err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	holders := checkSlots(t, sems[0], perSlot)
	if n := lost.Load(); n > 0 {
		t.Logf("%d of %d leases were lost before Unlock (stepped down or expired): a busy machine", n, acquired.Load())
	}
	e.checkWork(acquired.Load(), clients*perClient*rounds, clients, len(holders), time.Since(began))
}

// checkSlots runs the tenure check on each slot's tenures, checks that
// every lease was of one of sem's slots, and returns the holders seen.
func checkSlots(t *testing.T, sem *baton.Semaphore, perSlot map[string]*tenures) map[string]bool {
	t.Helper()
	valid := map[string]bool{}
	for i := range sem.Limit() {
		valid[sem.SlotName(i)] = true
	}
	holders := map[string]bool{}
	for slot, ts := range perSlot {
		if !valid[slot] {
			t.Errorf("a lease of %q, which is not a slot of %q", slot, sem.Name())
		}
		ts.check(t)
		for _, tn := range ts.list {
			holders[tn.holder] = true
		}
	}
	return holders
}
