package schedule_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

// A RunLogLedger behind a paused PgBouncer (PAUSE, or after KILL) does
// not answer: its Done waits until the run's context ends at
// LockAtMostFor, and fails with only "context canceled" from the driver.
// The slot is skipped, as it must be, but the error must name why the
// wait ended (ErrLockAtMostFor), or the operator reads of a cancelled
// scheduler.
func TestRunLogLedgerPausedPooler(t *testing.T) {
	pg := testenv.StartPostgres(t)
	bouncer := testenv.StartPgBouncer(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", bouncer.DSN("transaction", "default_query_exec_mode=exec"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	runs, err := fence.NewRunLog(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ledger, err := schedule.NewRunLogLedger(runs)
	if err != nil {
		t.Fatal(err)
	}
	bouncer.Admin(ctx, "PAUSE transaction")
	defer bouncer.Admin(ctx, "RESUME transaction")

	failed := make(chan schedule.Event, 1)
	var once sync.Once
	s, err := schedule.New(memstore.New(), ledger,
		schedule.WithLogger(slog.New(slog.DiscardHandler)),
		schedule.WithObserver(func(e schedule.Event) {
			if e.Outcome == schedule.Error {
				once.Do(func() { failed <- e })
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	job := func(context.Context, schedule.Run) error { ran <- struct{}{}; return nil }
	if err := s.Add("report", "* * * * * *", job, schedule.LockAtMostFor(time.Second)); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	var e schedule.Event
	select {
	case e = <-failed:
	case <-ctx.Done():
		t.Fatal("no slot failed while the ledger's pooler was paused")
	}
	stop()
	<-done
	select {
	case <-ran:
		t.Fatal("the job ran although the ledger could not be read")
	default:
	}
	if !errors.Is(e.Err, schedule.ErrLockAtMostFor) {
		t.Fatalf("slot error = %v, want it to name why the ledger's wait ended (ErrLockAtMostFor)", e.Err)
	}
}
