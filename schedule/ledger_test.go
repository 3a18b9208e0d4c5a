package schedule_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/schedule"
)

func TestFileLedger(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ledger")
	l, err := schedule.NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := l.Done(ctx, "report", t0); done || err != nil {
		t.Fatalf("Done on an empty ledger = %v, %v", done, err)
	}
	if err := l.Record(ctx, "report", t0, 5); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, "report", t0, 6); err != nil {
		t.Fatalf("second Record = %v, want nil (idempotent)", err)
	}
	// A new ledger on the directory (another process, after a restart)
	// sees the record.
	l2, err := schedule.NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := l2.Done(ctx, "report", t0.Add(999*time.Millisecond)); !done || err != nil {
		t.Fatalf("Done from a second ledger = %v, %v; want true", done, err)
	}
	if done, _ := l2.Done(ctx, "report", t0.Add(time.Second)); done {
		t.Fatal("the next slot is done")
	}
	// The record is whole, keeps the first token, and no temporary file
	// is left.
	data, err := os.ReadFile(filepath.Join(dir, "report", "20261130t030000z.done"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Job   string    `json:"job"`
		Slot  time.Time `json:"slot"`
		Token uint64    `json:"token"`
	}
	if err := json.Unmarshal(data, &rec); err != nil || rec.Job != "report" || !rec.Slot.Equal(t0) || rec.Token != 5 {
		t.Fatalf("record %s: %+v, %v", data, rec, err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "report"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("job directory holds %v (%v), want only the record", entries, err)
	}
	// Job names are lock names: no path tricks.
	for _, bad := range []string{"../x", "a/b", "", "."} {
		if err := l.Record(ctx, bad, t0, 1); !errors.Is(err, backend.ErrInvalidName) {
			t.Errorf("Record(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	// Concurrent records of one slot all succeed and one record stays.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := l.Record(ctx, "race", t0, uint64(i+1)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if entries, _ := os.ReadDir(filepath.Join(dir, "race")); len(entries) != 1 {
		t.Fatalf("after concurrent records the job directory holds %d files", len(entries))
	}
	// Prune removes the records before a time, and only those.
	for i := 1; i <= 3; i++ {
		if err := l.Record(ctx, "report", t0.Add(time.Duration(i)*time.Hour), 1); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := l.Prune(ctx, "report", t0.Add(2*time.Hour)); n != 2 || err != nil {
		t.Fatalf("Prune = %d, %v; want 2 records removed", n, err)
	}
	for i, want := range []bool{false, false, true, true} {
		if done, _ := l.Done(ctx, "report", t0.Add(time.Duration(i)*time.Hour)); done != want {
			t.Errorf("after Prune, slot +%dh done = %v, want %v", i, done, want)
		}
	}
	if n, err := l.Prune(ctx, "never-ran", t0); n != 0 || err != nil {
		t.Fatalf("Prune of a job without records = %d, %v", n, err)
	}
	if _, err := schedule.NewFileLedger(filepath.Join(dir, "report", "20261130t050000z.done")); err == nil {
		t.Fatal("NewFileLedger on a file succeeded")
	}
}

// NewFileLedger refuses a directory in which it cannot create files, as
// filestore.New does: otherwise every slot's job would run and only then
// fail to be recorded, slot after slot, leaving each open to a second run.
func TestFileLedgerNotWritable(t *testing.T) {
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// Permission bits do not stop root; a sysfs directory does.
		dir = "/sys/kernel"
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Skipf("running as root without %s", dir)
		}
	} else {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o700)
	}
	l, err := schedule.NewFileLedger(dir)
	if err == nil {
		t.Fatalf("NewFileLedger(%s), a directory where no file can be created, succeeded: %v", dir, l.Dir())
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "not writable") {
		t.Errorf("error %q does not name the directory and the cause", msg)
	}
}

func TestRunLogLedger(t *testing.T) {
	if _, err := schedule.NewRunLogLedger(nil); err == nil {
		t.Fatal("NewRunLogLedger(nil) succeeded")
	}
	pg := testenv.StartPostgres(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runs, err := fence.NewRunLog(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.Ensure(ctx); err != nil {
		t.Fatalf("%v\n%s", err, pg.Log())
	}
	l, err := schedule.NewRunLogLedger(runs)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := l.Done(ctx, "report", t0); done || err != nil {
		t.Fatalf("Done = %v, %v", done, err)
	}
	if err := l.Record(ctx, "report", t0, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, "report", t0, 2); err != nil {
		t.Fatalf("second Record = %v, want nil", err)
	}
	if done, err := l.Done(ctx, "report", t0); !done || err != nil {
		t.Fatalf("Done after Record = %v, %v", done, err)
	}
	// A job that claims its slot in its own transaction: the scheduler's
	// Record afterwards is not an error, and the slot is done.
	slot := t0.Add(time.Minute)
	ran, err := runs.Exec(ctx, "report", slot, func(*sql.Tx) error { return nil })
	if err != nil || !ran {
		t.Fatalf("Exec = %v, %v", ran, err)
	}
	if err := l.Record(ctx, "report", slot, 1); err != nil {
		t.Fatalf("Record after the job claimed the slot = %v", err)
	}
	if done, _ := l.Done(ctx, "report", slot); !done {
		t.Fatal("slot claimed by the job is not done")
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := l.Done(cctx, "report", slot); !errors.Is(err, context.Canceled) {
		t.Fatalf("Done with an ended context = %v", err)
	}
}

// The test in real time on the file backend: three replicas (as
// if three processes on one machine) whose wall clocks are off by 0, +2.5s
// and -5s run an every-second job for 60 slots with a shared file ledger;
// each slot runs exactly once, and its lock's files are removed once it is
// done. It takes about 70s (-short: 8 slots).
func TestExactlyOnceSkewedReplicasFileBackend(t *testing.T) {
	slots := 60
	if testing.Short() {
		slots = 8
	}
	dir := t.TempDir()
	ledger, err := schedule.NewFileLedger(filepath.Join(dir, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	offs := []time.Duration{0, 2500 * time.Millisecond, -5 * time.Second}
	cnt := newCounter()
	first := time.Now().Truncate(time.Second).Add(7 * time.Second) // every replica is up by then
	last := first.Add(time.Duration(slots-1) * time.Second)
	lastSeen := make(chan struct{})
	var once sync.Once
	var stops []func()
	for i, off := range offs {
		store, err := filestore.New(filepath.Join(dir, "locks"))
		if err != nil {
			t.Fatal(err)
		}
		obs := func(e schedule.Event) {
			switch e.Outcome {
			case schedule.Ran, schedule.AlreadyDone, schedule.Held:
			default:
				t.Errorf("replica %d, slot %v: %v (%v)", i, e.Slot, e.Outcome, e.Err)
			}
			// The replica whose clock is 5s behind is the last to reach
			// a slot.
			if i == 2 && !e.Slot.Before(last) {
				once.Do(func() { close(lastSeen) })
			}
		}
		s, err := schedule.New(store, ledger,
			schedule.WithClock(offsetClock{baton.SystemClock(), off}),
			schedule.WithLogger(quiet.With("replica", i)),
			schedule.WithObserver(obs),
			schedule.WithLockOptions(quietLock, baton.WithIdentity(fmt.Sprintf("replica-%d", i))))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add("tick", "* * * * * *", cnt.job, schedule.CatchUp(2, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, start(t, s))
	}
	select {
	case <-lastSeen:
	case <-time.After(time.Until(last) + 30*time.Second):
		t.Fatal("the replica 5s behind did not reach the last slot 25s after it was due")
	}
	for _, stop := range stops {
		stop()
	}
	// Each slot's lock is removed once the slot is done; a replica stopped
	// in the middle of a slot may leave that one.
	left, err := filepath.Glob(filepath.Join(dir, "locks", "*.json"))
	if err != nil || len(left) > len(offs) {
		t.Errorf("lock records left in the directory: %d (%v), want at most one per replica", len(left), err)
	}
	runs := cnt.snapshot()
	for s := first; !s.After(last); s = s.Add(time.Second) {
		if n := runs[s.UTC()]; n != 1 {
			t.Errorf("slot %v ran %d times, want exactly once", s.UTC(), n)
		}
	}
	for s, n := range runs {
		if n != 1 {
			t.Errorf("slot %v ran %d times", s, n)
		}
	}
}
