package schedule_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

// Two replicas share a lock backend and a ledger, and both schedule the
// same every-second job. Each slot runs on one of them only.
func Example() {
	// In production: a networked backend (kube, etcd, redis) and a
	// RunLogLedger, or on one machine the file backend and a FileLedger.
	store := memstore.New()
	ledger := schedule.NewMemoryLedger()
	quiet := slog.New(slog.DiscardHandler)

	var (
		mu       sync.Mutex
		runs     = map[time.Time]int{}      // runs per slot
		attempts = map[time.Time]int{}      // replicas that attempted each slot
		bothSaw  = make(chan time.Time, 10) // slots both replicas attempted
	)
	report := func(ctx context.Context, run schedule.Run) error {
		// Write with run.Token to fence late writers (see package fence).
		mu.Lock()
		runs[run.Slot]++
		mu.Unlock()
		return nil
	}
	observe := func(e schedule.Event) {
		mu.Lock()
		defer mu.Unlock()
		if attempts[e.Slot]++; attempts[e.Slot] == 2 {
			bothSaw <- e.Slot
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range []string{"replica-a", "replica-b"} {
		s, err := schedule.New(store, ledger,
			schedule.WithLogger(quiet),
			schedule.WithObserver(observe),
			schedule.WithLockOptions(baton.WithIdentity(id)))
		if err != nil {
			log.Fatal(err)
		}
		err = s.Add("report", "* * * * * *", report,
			schedule.LockAtLeastFor(500*time.Millisecond),
			schedule.LockAtMostFor(10*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		wg.Go(func() { _ = s.Run(ctx) })
	}

	slot := <-bothSaw
	cancel()
	wg.Wait()
	mu.Lock()
	fmt.Println("runs of the slot:", runs[slot])
	mu.Unlock()
	// Output:
	// runs of the slot: 1
}

func ExampleLockName() {
	slot := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	name, err := schedule.LockName("nightly-report", slot)
	fmt.Println(name, err)
	// Output:
	// nightly-report.20261130t030000z <nil>
}

// A nightly job in the Berlin time zone that catches up at most one missed
// night, runs at most two hours, and keeps its slot locked for five
// minutes so that a replica whose clock is up to five minutes behind finds
// the slot taken even if the ledger lost its record.
func ExampleScheduler_Add() {
	var s *schedule.Scheduler // from schedule.New
	err := s.Add("nightly-report", "CRON_TZ=Europe/Berlin 0 3 * * *",
		func(ctx context.Context, run schedule.Run) error {
			return nil // the work, under ctx, fenced with run.Lock and run.Token
		},
		schedule.CatchUp(1, 24*time.Hour),
		schedule.LockAtMostFor(2*time.Hour),
		schedule.LockAtLeastFor(5*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
}
