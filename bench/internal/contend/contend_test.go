package contend

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chanLock is an in-process lock (a one-slot semaphore), for the run's
// own logic: counting, stopping and the wait summary.
func chanLock(sem chan struct{}) LockFunc {
	return func(ctx context.Context) (func(context.Context) error, error) {
		select {
		case sem <- struct{}{}:
			return func(context.Context) error { <-sem; return nil }, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func chanLocks(n int) []LockFunc {
	sem := make(chan struct{}, 1)
	locks := make([]LockFunc, n)
	for i := range locks {
		locks[i] = chanLock(sem)
	}
	return locks
}

func sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func checkWaits(t *testing.T, r Result) {
	t.Helper()
	if !(r.P50 <= r.P99 && r.P99 <= r.Max && r.P99Time <= r.Max) || r.PerSecond <= 0 {
		t.Errorf("summary out of order: %+v", r)
	}
}

// TestRunUntilTotal: a run until total stops there; its counts are taken
// at the acquisition that reached it, and every acquisition is in Order.
func TestRunUntilTotal(t *testing.T) {
	r := Run(t, "chan", time.Minute, chanLocks(3), 200, 0)
	if n := sum(r.Counts); n < 200 || len(r.Order) < n {
		t.Errorf("counts %v (%d) and %d in order, want at least 200 and order covering them", r.Counts, n, len(r.Order))
	}
	checkWaits(t, r)
}

// TestRunEach: with each > 0 the counts are taken when the first
// contender has made its each acquisitions.
func TestRunEach(t *testing.T) {
	r := Run(t, "chan", time.Minute, chanLocks(3), 0, 5)
	if slices.Max(r.Counts) != 5 || r.Censored != 0 {
		t.Errorf("counts %v, censored %d: want the first done at 5, none censored", r.Counts, r.Censored)
	}
	checkWaits(t, r)
}

// TestRunAtLeastLasts: a run until total lasts at least minDur even when
// total comes first.
func TestRunAtLeastLasts(t *testing.T) {
	const minDur = 50 * time.Millisecond
	r := RunAtLeast(t, "chan", time.Minute, chanLocks(2), 1, 0, minDur)
	if n := len(r.Order); float64(n)/r.PerSecond < minDur.Seconds() {
		t.Errorf("%d acquisitions at %.0f/s: shorter than %v", n, r.PerSecond, minDur)
	}
}

// TestRunCensors: a contender that never gets the lock counts as a
// censored wait, not as nothing (so may the others', waiting when the run
// stopped).
func TestRunCensors(t *testing.T) {
	never := func(ctx context.Context) (func(context.Context) error, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	locks := append(chanLocks(2), never)
	warm := true
	locks[2] = func(ctx context.Context) (func(context.Context) error, error) {
		if warm { // the warm-up lock succeeds
			warm = false
			return func(context.Context) error { return nil }, nil
		}
		return never(ctx)
	}
	r := Run(t, "chan", time.Minute, locks, 100, 0)
	if r.Censored < 1 || r.Counts[2] != 0 {
		t.Errorf("censored %d, counts %v: want the starved contender's wait censored", r.Censored, r.Counts)
	}
	checkWaits(t, r)
}

// TestHandover: the waiter gets the lock only after release has unlocked
// the holder, and the lock is free afterwards.
func TestHandover(t *testing.T) {
	sem := make(chan struct{}, 1)
	var released time.Time
	at := Handover(t, chanLock(sem), chanLock(sem), time.Millisecond, func(unlock func() error) error {
		if len(sem) != 1 {
			t.Errorf("the holder does not hold the lock at release")
		}
		released = time.Now()
		return unlock()
	})
	if at.Before(released) {
		t.Errorf("the waiter's lock returned at %v, before the release at %v", at, released)
	}
	if len(sem) != 0 {
		t.Errorf("the lock is still held after the handover")
	}
}
