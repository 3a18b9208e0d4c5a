package schedule_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/schedule"
)

// A Run called again while a job of an earlier Run, which ended past its
// shutdown grace, still runs returns ErrGraceExceeded at once, as an
// Elector's Run does: it started the job's loop again, and the job ran a
// second time beside its first run on this replica, which is never busy
// with two runs of one job otherwise. Once that job returns, Run runs
// again.
func TestRunAgainWhileJobOfEarlierRunStillRuns(t *testing.T) {
	env := newFakeEnv(t0)
	var running, most atomic.Int32
	started, release := make(chan struct{}, 2), make(chan struct{})
	var wg sync.WaitGroup
	job := func(ctx context.Context, run schedule.Run) error {
		wg.Add(1)
		defer wg.Done()
		n := running.Add(1)
		defer running.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		started <- struct{}{}
		<-release // ignores its context
		return nil
	}
	s := env.replica(t, "r", 0, schedule.WithShutdownGrace(0))
	if err := s.Add("stubborn", "* * * * *", job, schedule.LockAtMostFor(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, baton.ErrGraceExceeded) {
		t.Fatalf("first Run = %v, want ErrGraceExceeded", err)
	}

	// Without the fix the second Run's loop sleeps until the next slot, a
	// timer beside the stuck job's LockAtMostFor.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	sleeping := make(chan struct{})
	go func() {
		if env.wall.AwaitWaiters(wctx, func(n int) bool { return n >= 2 }) == nil {
			close(sleeping)
		}
	}()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { errc <- s.Run(ctx2) }()
	select {
	case err := <-errc:
		if !errors.Is(err, baton.ErrGraceExceeded) || !strings.Contains(err.Error(), `"stubborn"`) {
			t.Errorf("Run while the earlier Run's job runs = %v, want ErrGraceExceeded naming the job", err)
		}
	case <-sleeping:
		env.wall.Step(time.Minute)
		select {
		case <-started:
			t.Errorf("the job started again beside its earlier run (%d at once)", most.Load())
		case err := <-errc:
			t.Errorf("second Run = %v", err)
		}
		cancel2()
		<-errc
	}
	close(release)
	wg.Wait()

	// Once the job has returned and its slot lock is released, Run works
	// again: given an ended context, it returns that context's error.
	ended, cancel3 := context.WithCancel(context.Background())
	cancel3()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Run(ended)
		if err == context.Canceled {
			break
		}
		if !errors.Is(err, baton.ErrGraceExceeded) || time.Now().After(deadline) {
			t.Fatalf("Run after the earlier Run's job returned = %v, want context.Canceled", err)
		}
		time.Sleep(time.Millisecond)
	}
}
