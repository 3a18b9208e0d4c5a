package fence_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testenv"
)

// An operator who sets synchronous_commit = off (a common tuning) makes a
// commit return before its WAL is written: a crash then forgets it. A
// slot that RunLog.Exec reported as run must still be done after a crash,
// or the ledger's "durable when Record returns nil" fails and the slot
// runs again. The WAL writer is slowed so that nothing else writes the
// commit out before the crash.
func TestPostgresRunLogSurvivesCrash(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresArgs(
		"-c", "synchronous_commit=off", "-c", "wal_writer_delay=10000"))
	db := openDB(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	rl, err := fence.NewRunLog(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil { // the table itself survives
		t.Fatal(err)
	}
	slot := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	if ran, err := rl.Exec(ctx, "job", slot, func(*sql.Tx) error { return nil }); !ran || err != nil {
		t.Fatalf("Exec = %v, %v", ran, err)
	}
	pg.Kill()
	pg.Start()
	db = openDB(t, pg)
	after, err := fence.NewRunLog(db, "")
	if err != nil {
		t.Fatal(err)
	}
	if done, err := after.Done(ctx, "job", slot); !done || err != nil {
		t.Fatalf("Done after a crash = %v, %v; want true: Exec reported the slot as run", done, err)
	}
	// The session's setting is left as the operator made it.
	var setting string
	if err := db.QueryRowContext(ctx, "SHOW synchronous_commit").Scan(&setting); err != nil || setting != "off" {
		t.Fatalf("synchronous_commit = %q, %v; want the server's off", setting, err)
	}
}
