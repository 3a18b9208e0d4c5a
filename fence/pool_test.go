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

// When every connection of database/sql's pool is in use, Exec waits for
// one until ctx ends. Its error must say that the pool was exhausted
// (with the fix), not only "context deadline exceeded", which reads as a
// slow or unreachable PostgreSQL.
func TestPostgresPoolExhausted(t *testing.T) {
	pg := testenv.StartPostgres(t)
	db := openDB(t, pg)
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	g, data := newGuard(ctx, t, db, "pool")
	rl, err := fence.NewRunLog(db, "pool_runs")
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s = %v, want it to end with ctx", what, err)
		}
		if !strings.Contains(err.Error(), "SetMaxOpenConns") {
			t.Errorf("%s = %v, want it to name the exhausted pool and SetMaxOpenConns", what, err)
		}
	}
	// The outer write holds the only connection; the inner calls wait.
	err = g.Exec(ctx, "outer", 1, func(tx *sql.Tx) error {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		check("SQLGuard.Exec", g.Exec(short, "inner", 1, put(data, "x", "one", 1)))
		_, err := rl.Exec(short, "job", time.Unix(0, 0), func(*sql.Tx) error { return nil })
		check("RunLog.Exec", err)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
