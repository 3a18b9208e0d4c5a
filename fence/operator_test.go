package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testenv"
)

// What operators do to the tables under the fence helpers is reported as a
// failure of the database, never as a stale token, and the error names the
// fix: a dropped table (Ensure), revoked privileges (the GRANT to make),
// a read-only database (the primary).
func TestPostgresOperatorErrors(t *testing.T) {
	pg := testenv.StartPostgres(t)
	db := openDB(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	mustExec := func(db *sql.DB, q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	open := func(user string) *sql.DB {
		t.Helper()
		d, err := sql.Open("pgx", strings.Replace(pg.DSN(), "postgres@", user+"@", 1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	slot := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	nop := func(*sql.Tx) error { return nil }
	// all runs every write and read of both helpers on c.
	all := func(c calls) map[string]error {
		_, _, tokErr := c.guard.Token(ctx, "job")
		_, execErr := c.runs.Exec(ctx, "job", slot, nop)
		_, doneErr := c.runs.Done(ctx, "job", slot)
		return map[string]error{
			"SQLGuard.Exec":  c.guard.Exec(ctx, "job", 7, nop),
			"SQLGuard.Token": tokErr, "RunLog.Exec": execErr, "RunLog.Done": doneErr,
		}
	}
	// want checks that each error names fix.
	want := func(errs map[string]error, fix string) {
		t.Helper()
		for what, err := range errs {
			if err == nil || errors.Is(err, fence.ErrStaleToken) || !strings.Contains(err.Error(), fix) {
				t.Errorf("%s = %v, want an error that names the fix %q", what, err, fix)
			}
		}
	}

	t.Run("TableDropped", func(t *testing.T) {
		want(all(newCalls(t, db)), "Ensure")
		want(all(newCalls(t, db)), "search_path") // the table may be elsewhere: a new one remembers nothing
	})
	own := newCalls(t, db)
	if err := errors.Join(own.guard.Ensure(ctx), own.runs.Ensure(ctx)); err != nil {
		t.Fatal(err)
	}
	t.Run("PrivilegesRevoked", func(t *testing.T) {
		mustExec(db, "CREATE ROLE writer LOGIN")
		mustExec(db, "GRANT SELECT ON baton_fence, baton_runs TO writer")
		errs := all(newCalls(t, open("writer")))
		delete(errs, "SQLGuard.Token") // SELECT is granted
		delete(errs, "RunLog.Done")
		want(errs, "GRANT")
	})
	t.Run("ReadOnly", func(t *testing.T) {
		mustExec(db, "CREATE ROLE reader LOGIN")
		mustExec(db, "ALTER ROLE reader SET default_transaction_read_only = on")
		mustExec(db, "GRANT SELECT, INSERT, UPDATE ON baton_fence, baton_runs TO reader")
		c := newCalls(t, open("reader"))
		_, execErr := c.runs.Exec(ctx, "job", slot, nop)
		want(map[string]error{
			"SQLGuard.Exec": c.guard.Exec(ctx, "job", 7, nop),
			"RunLog.Exec":   execErr,
			"Ensure":        c.guard.Ensure(ctx),
		}, "primary")
	})
}

// A fence or run-log table altered so that its statements no longer fit
// (its primary key dropped, a column renamed) is reported with the table
// fence expects, not only PostgreSQL's message.
func TestPostgresTableAltered(t *testing.T) {
	pg := testenv.StartPostgres(t)
	db := openDB(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	nop := func(*sql.Tx) error { return nil }
	slot := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	for _, alter := range [][2]string{
		{"ALTER TABLE altered_fence DROP CONSTRAINT altered_fence_pkey", "ALTER TABLE altered_runs DROP CONSTRAINT altered_runs_pkey"},
		{"ALTER TABLE altered_fence RENAME COLUMN token TO renamed", "ALTER TABLE altered_runs RENAME COLUMN slot TO renamed"},
	} {
		g, err := fence.NewSQLGuard(db, fence.WithTable("altered_fence"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := fence.NewRunLog(db, "altered_runs")
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(g.Ensure(ctx), r.Ensure(ctx)); err != nil {
			t.Fatal(err)
		}
		for _, q := range alter {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		_, execErr := r.Exec(ctx, "job", slot, nop)
		for what, err := range map[string]error{"SQLGuard.Exec": g.Exec(ctx, "job", 1, nop), "RunLog.Exec": execErr} {
			if err == nil || errors.Is(err, fence.ErrStaleToken) || !strings.Contains(err.Error(), "PRIMARY KEY") {
				t.Errorf("after %q: %s = %v, want an error that shows the table fence expects", alter, what, err)
			}
		}
		if _, err := db.ExecContext(ctx, "DROP TABLE altered_fence, altered_runs"); err != nil {
			t.Fatal(err)
		}
	}
}

// calls are both helpers on one database, with their default tables.
type calls struct {
	guard *fence.SQLGuard
	runs  *fence.RunLog
}

func newCalls(t *testing.T, db *sql.DB) calls {
	t.Helper()
	g, err := fence.NewSQLGuard(db)
	if err != nil {
		t.Fatal(err)
	}
	r, err := fence.NewRunLog(db, "")
	if err != nil {
		t.Fatal(err)
	}
	return calls{g, r}
}
