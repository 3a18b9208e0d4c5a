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

// Run warms up every contender with one lock and unlock, then runs them in
// tight lock/unlock loops (no work while holding) for at most limit. With
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
	for _, lock := range locks { // warm up each contender's connection
		unlock, err := lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		_ = unlock(t.Context())
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	var (
		mu       sync.Mutex
		waits    []time.Duration
		order    []int
		censored int
		n        atomic.Int64
		counts   = make([]atomic.Int64, len(locks))
		snapshot []int
		wg       sync.WaitGroup
		start    = time.Now()
		end      time.Time
		minEnd   = start.Add(minDur)
	)
	snap := func() {
		if snapshot == nil {
			end = time.Now()
			for j := range counts {
				snapshot = append(snapshot, int(counts[j].Load()))
			}
		}
	}
	if each == 0 && minDur > 0 {
		// total reached before minDur: stop at minDur.
		stopAtMin := time.AfterFunc(minDur, func() {
			if n.Load() >= int64(total) {
				mu.Lock()
				snap()
				mu.Unlock()
				cancel()
			}
		})
		defer stopAtMin.Stop()
	}
	for i, lock := range locks {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				waits = append(waits, mine...)
				mu.Unlock()
			}()
			for each == 0 || len(mine) < each {
				t0 := time.Now()
				unlock, err := lock(ctx)
				if err != nil {
					if ctx.Err() != nil && each == 0 {
						mu.Lock()
						censored++
						mu.Unlock()
						mine = append(mine, time.Since(t0))
						return
					}
					t.Errorf("%s: contender %d after %d acquisitions: %v", name, i, len(mine), err)
					return
				}
				mine = append(mine, time.Since(t0))
				counts[i].Add(1)
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if k := n.Add(1); each == 0 && k >= int64(total) && !time.Now().Before(minEnd) || each > 0 && len(mine) == each {
					mu.Lock()
					snap()
					mu.Unlock()
					if each == 0 {
						cancel()
					}
				}
				if err := unlock(context.WithoutCancel(ctx)); err != nil {
					t.Errorf("%s: unlock: %v", name, err)
				}
			}
		})
	}
	wg.Wait()
	if each > 0 {
		end = time.Now()
	}
	slices.Sort(waits)
	r := Result{Counts: snapshot, Censored: censored, Order: order}
	r.PerSecond = float64(n.Load()) / end.Sub(start).Seconds()
	if len(waits) > 0 {
		r.P50 = waits[len(waits)*50/100]
		r.P99 = waits[len(waits)*99/100]
		r.Max = waits[len(waits)-1]
		var sum, acc time.Duration
		for _, w := range waits {
			sum += w
		}
		for _, w := range waits {
			acc += w
			if float64(acc) >= 0.99*float64(sum) {
				r.P99Time = w
				break
			}
		}
	}
	return r
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
