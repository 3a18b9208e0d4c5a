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

// openDSN opens dsn, closed at the end of t.
func openDSN(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// pooledGuard starts a PostgreSQL and, in front of it, a PgBouncer with
// opts, and returns the PgBouncer and a guard, its table made, on the
// database pooled in transaction mode, with pgx sending statements
// unprepared.
func pooledGuard(ctx context.Context, t *testing.T, opts ...testenv.PgBouncerOption) (*testenv.PgBouncer, *fence.SQLGuard) {
	t.Helper()
	bouncer := testenv.StartPgBouncer(t, testenv.StartPostgres(t), opts...)
	g, err := fence.NewSQLGuard(openDSN(t, bouncer.DSN("transaction", "default_query_exec_mode=exec")))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return bouncer, g
}

// holdRow starts an Exec of name with token 1 whose write runs hold, and
// returns once its check holds name's fence row (and a server connection),
// with a channel that gets Exec's error when hold has returned.
func holdRow(ctx context.Context, t *testing.T, g *fence.SQLGuard, name string, hold func(*sql.Tx) error) <-chan error {
	t.Helper()
	checked, held := make(chan struct{}), make(chan error, 1)
	go func() {
		held <- g.Exec(ctx, name, 1, func(tx *sql.Tx) error {
			close(checked)
			return hold(tx)
		})
	}()
	select {
	case <-checked:
		return held
	case err := <-held:
		t.Fatalf("the holding Exec of %q returned before its write: %v", name, err)
		return nil
	}
}

// wantPoolMode fails t unless err is a refusal that names the pooler's
// mode and fix (want, in its message), and not a stale token.
func wantPoolMode(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, fence.ErrPoolMode) || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("%s = %v, want an error matching ErrPoolMode (not ErrStaleToken)", what, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s = %v, want it to name the fix (%s)", what, err, want)
	}
}

// pgx's default (QueryExecModeCacheStatement) prepares each statement
// under a name of its own and runs it again by that name. Through a pooler
// in transaction mode, the name was prepared on one server connection and
// the next transaction gets another: two replicas sharing one server
// connection find it already there (42P05), and one whose server
// connection was replaced (RECONNECT, server_lifetime) finds it missing
// (26000). Nothing is written either way; the error must say why, and how
// to configure the driver, not only "prepared statement already exists".
func TestPgBouncerPreparedStatements(t *testing.T) {
	pg := testenv.StartPostgres(t)
	bouncer := testenv.StartPgBouncer(t, pg, testenv.PgBouncerSetting("default_pool_size", "1"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	a, b := openDSN(t, bouncer.DSN("transaction")), openDSN(t, bouncer.DSN("transaction"))
	guardA, err := fence.NewSQLGuard(a)
	if err != nil {
		t.Fatal(err)
	}
	guardB, err := fence.NewSQLGuard(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := guardA.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	runs, err := fence.NewRunLog(a, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	nop := func(*sql.Tx) error { return nil }
	const fix = "default_query_exec_mode=exec"
	// A prepares the statements on the only server connection.
	if err := guardA.Exec(ctx, "job", 1, nop); err != nil {
		t.Fatalf("first Exec through the pooler: %v", err)
	}
	if _, err := runs.Exec(ctx, "job", time.Unix(0, 0), nop); err != nil {
		t.Fatalf("first RunLog.Exec through the pooler: %v", err)
	}
	wantPoolMode(t, "Exec of a second replica", guardB.Exec(ctx, "job", 2, nop), fix)

	// The server connection is replaced once it is released.
	bouncer.Admin(ctx, "RECONNECT transaction")
	wantPoolMode(t, "Exec after RECONNECT", guardA.Exec(ctx, "job", 3, nop), fix)
	_, err = runs.Exec(ctx, "job", time.Unix(60, 0), nop)
	wantPoolMode(t, "RunLog.Exec after RECONNECT", err, fix)

	direct, err := fence.NewSQLGuard(openDB(t, pg))
	if err != nil {
		t.Fatal(err)
	}
	if tok, _, err := direct.Token(ctx, "job"); err != nil || tok != 1 {
		t.Fatalf("Token = %d, %v; want 1: a refused Exec wrote", tok, err)
	}
}

// PgBouncer in statement mode refuses transactions, which the helpers
// need: the token check and the writes must commit together. Every call
// that writes must say so, naming the mode and the fix, and Ensure must
// say it already, when a program sets up, not at its first write (a
// scheduled job's, hours later).
func TestPgBouncerStatementMode(t *testing.T) {
	pg := testenv.StartPostgres(t)
	bouncer := testenv.StartPgBouncer(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pooled := newCalls(t, openDSN(t, bouncer.DSN("statement", "default_query_exec_mode=exec")))
	const fix = "pool_mode=transaction"
	wantPoolMode(t, "SQLGuard.Ensure", pooled.guard.Ensure(ctx), fix)
	wantPoolMode(t, "RunLog.Ensure", pooled.runs.Ensure(ctx), fix)

	// With the tables made directly, the writes still fail.
	direct := newCalls(t, openDB(t, pg))
	if err := errors.Join(direct.guard.Ensure(ctx), direct.runs.Ensure(ctx)); err != nil {
		t.Fatal(err)
	}
	nop := func(*sql.Tx) error { return nil }
	wantPoolMode(t, "SQLGuard.Exec", pooled.guard.Exec(ctx, "job", 1, nop), fix)
	_, err := pooled.runs.Exec(ctx, "job", time.Unix(0, 0), nop)
	wantPoolMode(t, "RunLog.Exec", err, fix)
}

// Through PgBouncer in transaction and session modes, with the driver
// sending statements unprepared (both of pgx's ways), the helpers keep
// every guarantee they give on a direct connection: each transaction
// keeps one server connection from BEGIN to COMMIT, so the token check,
// its row lock and the writes stay together.
func TestPgBouncerSuite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	for _, c := range []struct{ mode, exec string }{
		{"transaction", "exec"}, {"transaction", "simple_protocol"}, {"session", "exec"},
	} {
		t.Run(c.mode+"/"+c.exec, func(t *testing.T) {
			pg := testenv.StartPostgres(t) // the suite's tables are per database
			bouncer := testenv.StartPgBouncer(t, pg, testenv.PgBouncerSetting("default_pool_size", "4"))
			db := openDSN(t, bouncer.DSN(c.mode, "default_query_exec_mode="+c.exec))
			db.SetMaxOpenConns(20)
			runSuite(ctx, t, db)
		})
	}
}

// When every server connection of PgBouncer's pool is held (here by a
// writer inside its transaction: a stopped holder holds one so), the
// others wait in PgBouncer's queue until query_wait_timeout, then get
// PgBouncer's bare "query_wait_timeout", as they do when the database is
// paused (PAUSE). The error must name both causes, and how to size or
// bound the pool.
func TestPgBouncerPoolExhausted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	bouncer, g := pooledGuard(ctx, t,
		testenv.PgBouncerSetting("default_pool_size", "1"),
		testenv.PgBouncerSetting("query_wait_timeout", "1"))
	release := make(chan struct{})
	held := holdRow(ctx, t, g, "held", func(*sql.Tx) error { <-release; return nil })
	wantExhausted := func(what string, err error) {
		t.Helper()
		if err == nil || errors.Is(err, fence.ErrStaleToken) || errors.Is(err, fence.ErrPoolMode) {
			t.Fatalf("%s = %v, want PgBouncer's query_wait_timeout", what, err)
		}
		if !strings.Contains(err.Error(), "default_pool_size") {
			t.Errorf("%s = %v, want it to name the exhausted pool (default_pool_size)", what, err)
		}
	}
	wantExhausted("Exec", g.Exec(ctx, "other", 1, func(*sql.Tx) error { return nil }))
	_, _, err := g.Token(ctx, "other")
	wantExhausted("Token", err)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the holding writer: %v", err)
	}

	// A paused database makes the same error: it must not blame the pool
	// alone. Before query_wait_timeout, a caller's deadline ends the wait:
	// the error must name the pooler too, not only the deadline.
	bouncer.Admin(ctx, "PAUSE transaction")
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	deadlineErr := g.Exec(short, "other", 1, func(*sql.Tx) error { return nil })
	err = g.Exec(ctx, "other", 1, func(*sql.Tx) error { return nil })
	bouncer.Admin(ctx, "RESUME transaction")
	wantExhausted("Exec while paused", err)
	if !strings.Contains(err.Error(), "PAUSE") {
		t.Errorf("Exec while paused = %v, want it to name PAUSE", err)
	}
	if !errors.Is(deadlineErr, context.DeadlineExceeded) || !strings.Contains(deadlineErr.Error(), "PgBouncer paused") {
		t.Errorf("Exec while paused, ended by its deadline = %v, want the deadline and a paused pooler named", deadlineErr)
	}
}

// syncStandbyPooled starts a PostgreSQL whose commits wait for a
// synchronous standby that never comes when a transaction asks
// (syncCommit), and a PgBouncer in front of it. It returns the PgBouncer,
// a direct connection, a guard on a new fence table (prefix) with its data
// table through that, and a guard on the same table through PgBouncer in
// transaction mode.
func syncStandbyPooled(ctx context.Context, t *testing.T, prefix string) (*testenv.PgBouncer, *sql.DB, *fence.SQLGuard, string, *fence.SQLGuard) {
	t.Helper()
	pg := testenv.StartPostgres(t, testenv.PostgresArgs(
		"-c", "synchronous_standby_names=nobody", "-c", "synchronous_commit=local"))
	bouncer := testenv.StartPgBouncer(t, pg)
	direct := openDB(t, pg)
	g, data := newGuard(ctx, t, direct, prefix)
	pooled, err := fence.NewSQLGuard(openDSN(t, bouncer.DSN("transaction", "default_query_exec_mode=exec")), fence.WithTable(g.Table()))
	if err != nil {
		t.Fatal(err)
	}
	return bouncer, direct, g, data, pooled
}

// A commit in flight when PgBouncer drops the connections (KILL on its
// admin console, as an operator moving a database does; RECONNECT and a
// restart end the same way) may have committed: the client gets only
// PgBouncer's "database removed" (SQLSTATE 08P01), whatever PostgreSQL did.
// Exec must report ErrCommitUnknown. Here the commit waits for a
// synchronous standby, so it is committed locally but not yet answered;
// once PostgreSQL ends that wait, the write is there.
func TestPgBouncerCommitLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	bouncer, direct, g, data, pooled := syncStandbyPooled(ctx, t, "killed")
	done := make(chan error, 1)
	go func() {
		done <- pooled.Exec(ctx, "job", 1, func(tx *sql.Tx) error {
			if err := syncCommit(tx); err != nil {
				return err
			}
			return put(data, "x", "one", 1)(tx)
		})
	}()
	awaitSyncRep(ctx, t, direct, done, countSyncRep)
	bouncer.Admin(ctx, "KILL transaction")
	err := <-done
	bouncer.Admin(ctx, "RESUME transaction") // KILL pauses the database too
	awaitSyncRep(ctx, t, direct, nil, terminateSyncRep)
	if v := get(ctx, t, direct, data, "x"); v != "one" {
		t.Fatalf("x = %q: the commit did not take effect, the test injected nothing ambiguous (Exec: %v)", v, err)
	}
	if !errors.Is(err, fence.ErrCommitUnknown) || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Exec = %v, want an error matching ErrCommitUnknown (only): the write committed", err)
	}
	if tok, _, err := g.Token(ctx, "job"); err != nil || tok != 1 {
		t.Fatalf("Token = %d, %v; want the committed 1", tok, err)
	}
}

// PgBouncer's query_timeout ends a statement that runs longer, and a
// check waits for the fence row lock of another writer of the name that
// is still in its transaction: the next holder's check is cut off while a
// stopped writer holds the row. The error must say why and which setting
// to change, not only PgBouncer's "query timeout".
func TestPgBouncerQueryTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, g := pooledGuard(ctx, t, testenv.PgBouncerSetting("query_timeout", "3"))
	waited := make(chan struct{})
	held := holdRow(ctx, t, g, "job", func(tx *sql.Tx) error {
		// Short requests, far apart less than query_timeout, which lets
		// them and the transaction between them through.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-waited:
				return nil
			case <-tick.C:
			}
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
				return err
			}
		}
	})
	err := g.Exec(ctx, "job", 2, func(*sql.Tx) error { return nil })
	close(waited)
	if err == nil || errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Exec waiting for the row lock = %v, want PgBouncer's query timeout", err)
	}
	if !strings.Contains(err.Error(), "idle_transaction_timeout") {
		t.Errorf("Exec waiting for the row lock = %v, want it to name query_timeout's fix", err)
	}
	if err := <-held; err != nil {
		t.Fatalf("the holding writer: %v", err)
	}
}
