package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/adapter/gocronlock"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Compile-time checks that the adapters fit gocron's interfaces.
var (
	_ gocron.Locker  = (*gocronlock.Locker)(nil)
	_ gocron.Elector = (*gocronlock.Elector)(nil)
)

// quiet drops baton's log lines.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newStore returns a Store on srv with its own client (one per simulated
// replica), closed at the end of t.
func newStore(t *testing.T, srv *testenv.RedisServer) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	return s
}

// run is one execution of the test job.
type run struct {
	scheduler int
	slot      time.Time // the wall-clock second the run belongs to
}

// newScheduler starts a gocron scheduler whose job "tick" runs every wall
// second and reports each run on runs; it is shut down at the end of t.
func newScheduler(t *testing.T, i int, runs chan<- run, schedOpts []gocron.SchedulerOption, jobOpts ...gocron.JobOption) {
	t.Helper()
	s, err := gocron.NewScheduler(schedOpts...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true),
		gocron.NewTask(func() {
			// Runs start a few milliseconds after the second they belong
			// to.
			runs <- run{scheduler: i, slot: time.Now().Truncate(time.Second)}
		}),
		append([]gocron.JobOption{gocron.WithName("tick")}, jobOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("scheduler %d: Shutdown: %v", i, err)
		}
	})
}

// TestLockerOneRunPerSlot runs two schedulers with the same job every
// second, each with its own Locker on one Redis: every second's run happens
// on one scheduler only, and the other one is refused the lock.
func TestLockerOneRunPerSlot(t *testing.T) {
	srv := testenv.StartRedis(t)
	runs := make(chan run, 64)
	var (
		mu      sync.Mutex
		refused int
	)
	for i := range 2 {
		locker, err := gocronlock.NewLocker(newStore(t, srv),
			gocronlock.WithMinHold(500*time.Millisecond),
			gocronlock.WithLogger(quiet()),
			gocronlock.WithMutexOptions(baton.WithIdentity(fmt.Sprintf("scheduler-%d", i))))
		if err != nil {
			t.Fatal(err)
		}
		newScheduler(t, i, runs, []gocron.SchedulerOption{gocron.WithDistributedLocker(locker)},
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				if !errors.Is(err, backend.ErrHeld) {
					t.Errorf("scheduler %d: lock error %v, want ErrHeld", i, err)
				}
				mu.Lock()
				refused++
				mu.Unlock()
			})))
	}

	const slots = 4
	seen := map[time.Time]int{} // slot -> scheduler
	for len(seen) < slots {
		r := within(t, runs, 5*time.Second, "a run")
		if other, dup := seen[r.slot]; dup {
			t.Fatalf("slot %v ran on scheduler %d and on scheduler %d", r.slot.Format(time.TimeOnly), other, r.scheduler)
		}
		seen[r.slot] = r.scheduler
	}
	mu.Lock()
	defer mu.Unlock()
	if refused == 0 {
		t.Errorf("no scheduler was ever refused the lock in %d slots: the schedulers did not compete", slots)
	}
	t.Logf("%d slots, %d refused attempts, runs by scheduler: %v", slots, refused, seen)
}

// TestElectorOnlyLeaderRuns runs two schedulers with the same job every
// second, each with an Elector on one Redis: only the leader's scheduler
// runs it, and after the leader stops the other one takes over.
func TestElectorOnlyLeaderRuns(t *testing.T) {
	srv := testenv.StartRedis(t)
	runs := make(chan run, 64)
	leading := make(chan int, 4)
	type replica struct {
		cancel context.CancelFunc
		done   chan struct{} // closed when Run has returned
		err    error         // Run's result, once done is closed
	}
	replicas := make([]replica, 2)
	for i := range replicas {
		el, err := baton.NewElector(newStore(t, srv), "scheduler",
			baton.WithIdentity(fmt.Sprintf("scheduler-%d", i)),
			baton.WithTTL(2*time.Second), baton.WithLogger(quiet()),
			baton.OnStartedLeading(func(context.Context, *baton.Lease) { leading <- i }))
		if err != nil {
			t.Fatal(err)
		}
		ge := gocronlock.NewElector(el)
		ctx, cancel := context.WithCancel(context.Background())
		r := &replicas[i]
		r.cancel, r.done = cancel, make(chan struct{})
		go func() {
			defer close(r.done)
			r.err = ge.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-r.done
		})
		newScheduler(t, i, runs, []gocron.SchedulerOption{gocron.WithDistributedElector(ge)})
	}

	seen := map[time.Time]int{}
	// expect waits for n runs, all on scheduler want.
	expect := func(want, n int) {
		t.Helper()
		for n > 0 {
			r := within(t, runs, 5*time.Second, "a run")
			if other, dup := seen[r.slot]; dup {
				t.Fatalf("slot %v ran on scheduler %d and on scheduler %d", r.slot.Format(time.TimeOnly), other, r.scheduler)
			}
			seen[r.slot] = r.scheduler
			if r.scheduler != want {
				t.Fatalf("scheduler %d ran slot %v while scheduler %d leads", r.scheduler, r.slot.Format(time.TimeOnly), want)
			}
			n--
		}
	}

	leader := within(t, leading, 10*time.Second, "a leader")
	drain(runs) // runs before the term began belong to nobody's term
	expect(leader, 3)

	// The leader's elector stops (its process shuts down): it releases,
	// and the other scheduler leads and runs from then on.
	replicas[leader].cancel()
	within(t, replicas[leader].done, 10*time.Second, "the leader's Run to return")
	if err := replicas[leader].err; !errors.Is(err, context.Canceled) {
		t.Errorf("leader's Run returned %v, want context.Canceled", err)
	}
	standby := 1 - leader
	if got := within(t, leading, 10*time.Second, "the standby to lead"); got != standby {
		t.Fatalf("scheduler %d leads, want %d", got, standby)
	}
	drain(runs) // a run of the old leader may have been reported just before it stopped
	// A slot the old leader ran may run again on the new one if its timer
	// fired late (see the package documentation): uniqueness is checked
	// within each term.
	clear(seen)
	expect(standby, 3)
}

// drain empties ch.
func drain[T any](ch chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// within returns the next value on ch, failing t after d.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s", d, what)
		panic("unreachable")
	}
}
