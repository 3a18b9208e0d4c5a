// Package contend runs lock contenders in tight loops and measures their
// waits, for the side-by-side reports of bench/ and bench/etcd.
package contend

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LockFunc acquires the lock and returns the function that releases it.
type LockFunc func(ctx context.Context) (unlock func(context.Context) error, err error)

// Result is one contended run.
type Result struct {
	PerSecond     float64
	P50, P99, Max time.Duration // waits, from the lock call to its return
	// P99Time is the wait that 99% of all waiting time was spent in waits
	// no longer than: each lock call weighted by its length. A contender
	// that re-locks at once makes many short waits that hide the few long
	// waits of the others from P99; P99Time does not.
	P99Time  time.Duration
	Censored int   // lock calls still waiting at the end, counted with their wait so far
	Counts   []int // acquisitions per contender
	Order    []int // contender of each acquisition, in order
}

// Run warms up every contender (see warmUp), then runs them in tight
// lock/unlock loops (no work while holding) for at most limit. With
// each > 0, every contender stops after each acquisitions, and counts are
// taken when the first contender is done; otherwise the run stops after
// total acquisitions, whoever made them, and the lock calls still waiting
// then count as waits of their length so far (a starved contender's wait
// is not dropped). name labels errors.
func Run(t testing.TB, name string, limit time.Duration, locks []LockFunc, total, each int) Result {
	t.Helper()
	return RunAtLeast(t, name, limit, locks, total, each, 0)
}

// RunAtLeast is Run, except that a run until total acquisitions (each == 0)
// also lasts at least minDur: it stops at the first acquisition that
// finds both reached (or at minDur, if total was reached before). A
// library whose waiters retry on timers of tens to hundreds of
// milliseconds can make total acquisitions in a few milliseconds with one
// contender re-locking while the others sleep; a run that short would cut
// the sleepers' waits at its own length.
func RunAtLeast(t testing.TB, name string, limit time.Duration, locks []LockFunc, total, each int, minDur time.Duration) Result {
	t.Helper()
	warmUp(t, name, limit, locks)
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	start := time.Now()
	r := &run{t: t, name: name, cancel: cancel, total: total, each: each,
		start: start, minEnd: start.Add(minDur), counts: make([]atomic.Int64, len(locks))}
	if each == 0 && minDur > 0 {
		// total reached before minDur: stop at minDur.
		defer time.AfterFunc(minDur, r.stopIfTotal).Stop()
	}
	var wg sync.WaitGroup
	for i, lock := range locks {
		wg.Go(func() { r.contend(ctx, i, lock) })
	}
	wg.Wait()
	return r.result()
}

// warmUp takes the lock once with each contender in turn (its
// connection), then runs all of them at once until they have made two
// acquisitions per contender in all, so that nearly every contender has
// waited for the lock before the timed run: what a library sets up at a
// contender's first wait (baton's waiter watch subscribes then) is done
// outside the run, as the fair floors' subscriptions are (they subscribe
// when opened). A contender that starves does not hold the warm-up up.
func warmUp(t testing.TB, name string, limit time.Duration, locks []LockFunc) {
	for _, lock := range locks {
		unlock, err := lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_ = unlock(t.Context())
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	start := time.Now()
	r := &run{t: t, name: name + " (warm-up)", cancel: cancel, total: 2 * len(locks),
		start: start, minEnd: start, counts: make([]atomic.Int64, len(locks))}
	var wg sync.WaitGroup
	for i, lock := range locks {
		wg.Go(func() { r.loop(ctx, i, lock) })
	}
	wg.Wait()
}

// run is one RunAtLeast in progress.
type run struct {
	t           testing.TB
	name        string
	cancel      context.CancelFunc // stops the run
	total, each int
	start       time.Time
	minEnd      time.Time // start + minDur

	n      atomic.Int64   // acquisitions
	counts []atomic.Int64 // acquisitions per contender

	mu       sync.Mutex
	waits    []time.Duration
	order    []int
	censored int
	snapshot []int     // counts when the run was complete; nil before
	end      time.Time // when snapshot was taken
}

// contend runs contender i's loop and adds its waits to the run's.
func (r *run) contend(ctx context.Context, i int, lock LockFunc) {
	mine := r.loop(ctx, i, lock)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, mine...)
}

// loop locks and unlocks until the run stops (or, with each > 0, each
// times), and returns the waits of its lock calls: a call still waiting
// when the run stops counts with its wait so far (censored).
func (r *run) loop(ctx context.Context, i int, lock LockFunc) []time.Duration {
	var mine []time.Duration
	for r.each == 0 || len(mine) < r.each {
		t0 := time.Now()
		unlock, err := lock(ctx)
		if err != nil {
			if ctx.Err() != nil && r.each == 0 {
				r.mu.Lock()
				r.censored++
				r.mu.Unlock()
				return append(mine, time.Since(t0))
			}
			r.t.Errorf("%s: contender %d after %d acquisitions: %v", r.name, i, len(mine), err)
			return mine
		}
		mine = append(mine, time.Since(t0))
		r.acquired(i, len(mine))
		if err := unlock(context.WithoutCancel(ctx)); err != nil {
			r.t.Errorf("%s: unlock: %v", r.name, err)
		}
	}
	return mine
}

// acquired counts contender i's mine-th acquisition, and takes the counts
// when that completes the run (stopping it if it runs until total).
func (r *run) acquired(i, mine int) {
	r.counts[i].Add(1)
	r.mu.Lock()
	r.order = append(r.order, i)
	r.mu.Unlock()
	k := r.n.Add(1)
	if r.each == 0 && k >= int64(r.total) && !time.Now().Before(r.minEnd) || r.each > 0 && mine == r.each {
		r.snap()
		if r.each == 0 {
			r.cancel()
		}
	}
}

// stopIfTotal stops a run that reached total before minDur.
func (r *run) stopIfTotal() {
	if r.n.Load() >= int64(r.total) {
		r.snap()
		r.cancel()
	}
}

// snap takes the counts and the end time, once.
func (r *run) snap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snapshot != nil {
		return
	}
	r.end = time.Now()
	for j := range r.counts {
		r.snapshot = append(r.snapshot, int(r.counts[j].Load()))
	}
}

// result summarizes the run once every contender has returned.
func (r *run) result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.end
	if r.each > 0 {
		end = time.Now()
	}
	res := Result{Counts: r.snapshot, Censored: r.censored, Order: r.order}
	res.PerSecond = float64(r.n.Load()) / end.Sub(r.start).Seconds()
	summarizeWaits(&res, r.waits)
	return res
}

// summarizeWaits sets res's wait percentiles from waits (sorted here).
func summarizeWaits(res *Result, waits []time.Duration) {
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	res.P50 = waits[len(waits)*50/100]
	res.P99 = waits[len(waits)*99/100]
	res.Max = waits[len(waits)-1]
	var sum, acc time.Duration
	for _, w := range waits {
		sum += w
	}
	for _, w := range waits {
		acc += w
		if float64(acc) >= 0.99*float64(sum) {
			res.P99Time = w
			break
		}
	}
}

// Rotated runs measure for each of libs in rounds rounds, the libraries'
// turns rotating, so that a slow phase of the machine does not favour
// one, and returns each library's samples, sorted, by name.
func Rotated[L any](rounds int, libs []L, name func(L) string, measure func(L) []time.Duration) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for r := range rounds {
		for i := range libs {
			lib := libs[(i+r)%len(libs)]
			out[name(lib)] = append(out[name(lib)], measure(lib)...)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// Handover hands the lock from holder to waiter once: holder locks, waiter
// waits in its lock call, and after wait release runs, which must call
// unlock (the holder's unlock) once. It returns the moment the waiter's
// lock call returned, after the waiter unlocked. Any error fails t.
func Handover(t testing.TB, holder, waiter LockFunc, wait time.Duration, release func(unlock func() error) error) time.Time {
	t.Helper()
	ctx := t.Context()
	unlockHolder, err := holder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		unlock func(context.Context) error
		err    error
		at     time.Time
	}
	got := make(chan res, 1)
	go func() {
		u, err := waiter(ctx)
		got <- res{u, err, time.Now()}
	}()
	time.Sleep(wait) // let the waiter wait: the state being measured, not synchronisation
	if err := release(func() error { return unlockHolder(ctx) }); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return r.at
}
