package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testenv"
)

// A commit whose connection ends while COMMIT is in flight may have
// committed. Here it has: the commit waits for a synchronous standby that
// never comes (synchronous_commit = on for that transaction only), and
// the operator terminates the session (as a fast shutdown would). The
// transaction is committed locally; the client sees only a lost
// connection. Exec must not say that it rolled back: its error matches
// ErrCommitUnknown, and the write is indeed there.
func TestPostgresCommitLost(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PostgresArgs(
		"-c", "synchronous_standby_names=nobody", "-c", "synchronous_commit=local"))
	db := openDB(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	g, data := newGuard(ctx, t, db, "lost")

	t.Run("SQLGuard", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			done <- g.Exec(ctx, "job", 1, func(tx *sql.Tx) error {
				if err := syncCommit(tx); err != nil {
					return err
				}
				return put(data, "x", "one", 1)(tx)
			})
		}()
		awaitSyncRep(ctx, t, db, done, terminateSyncRep)
		err := <-done
		if v := get(ctx, t, db, data, "x"); v != "one" {
			t.Fatalf("x = %q: the commit did not take effect, the test injected nothing ambiguous (Exec: %v)", v, err)
		}
		if !errors.Is(err, fence.ErrCommitUnknown) {
			t.Fatalf("Exec = %v, want an error matching ErrCommitUnknown: the write committed", err)
		}
		if errors.Is(err, fence.ErrStaleToken) {
			t.Fatalf("Exec = %v matches ErrStaleToken", err)
		}
	})

	t.Run("RunLog", func(t *testing.T) {
		rl, err := fence.NewRunLog(db, "lost_runs")
		if err != nil {
			t.Fatal(err)
		}
		if err := rl.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
		slot := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
		done := make(chan error, 1)
		var ran bool
		go func() {
			var err error
			ran, err = rl.Exec(ctx, "job", slot, syncCommit)
			done <- err
		}()
		awaitSyncRep(ctx, t, db, done, terminateSyncRep)
		err = <-done
		if ok, derr := rl.Done(ctx, "job", slot); derr != nil || !ok {
			t.Fatalf("Done = %v, %v: the commit did not take effect (Exec: %v)", ok, derr, err)
		}
		if ran || !errors.Is(err, fence.ErrCommitUnknown) {
			t.Fatalf("Exec = %v, %v; want false and an error matching ErrCommitUnknown: the slot was claimed", ran, err)
		}
	})

	// A commit that the server refuses with an ERROR rolled back: its
	// outcome is known.
	t.Run("Refused", func(t *testing.T) {
		if _, err := db.ExecContext(ctx, "CREATE TABLE lost_deferred (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)"); err != nil {
			t.Fatal(err)
		}
		err := g.Exec(ctx, "refused", 1, func(tx *sql.Tx) error {
			_, err := tx.Exec("INSERT INTO lost_deferred VALUES (1), (1)")
			return err
		})
		if err == nil || errors.Is(err, fence.ErrCommitUnknown) {
			t.Fatalf("Exec = %v, want the commit's refusal, not ErrCommitUnknown", err)
		}
		if _, ok, err := g.Token(ctx, "refused"); err != nil || ok {
			t.Fatalf("Token = %v, %v after a refused commit, want none", ok, err)
		}
	})
}

// Queries of the backends whose commit waits for a synchronous standby.
// terminateSyncRep waits (PostgreSQL 14 and later) until each backend it
// ends has exited: its transaction commits only as it goes, after the
// signal, so a test that reads right after a plain pg_terminate_backend
// may find the write missing.
const (
	terminateSyncRep = "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
	countSyncRep     = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
)

// syncCommit makes tx's commit wait for a synchronous standby, which the
// tests' servers (synchronous_standby_names = nobody) never get.
func syncCommit(tx *sql.Tx) error {
	_, err := tx.Exec("SET LOCAL synchronous_commit = on")
	return err
}

// awaitSyncRep runs query (terminateSyncRep, countSyncRep) on db until it
// counts a backend whose commit waits for the standby. It fails t if the
// commit, whose call sends its error to done, returns first.
func awaitSyncRep(ctx context.Context, t *testing.T, db *sql.DB, done <-chan error, query string) {
	t.Helper()
	for {
		var n int
		if err := db.QueryRowContext(ctx, query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the commit did not wait for the standby: it returned %v", err)
		default:
		}
		time.Sleep(5 * time.Millisecond) // polling PostgreSQL's view; no event to wait on
	}
}

// After ErrCommitUnknown the lost transaction may still be running on
// PostgreSQL: here PgBouncer dropped its connection (KILL) while its COMMIT
// waited for a synchronous standby, and its backend goes on waiting, the
// fence row locked, until the wait ends (here: the session is terminated,
// and the transaction commits). A plain read in that window finds neither
// the write nor its token, and a caller that took that for a rollback and
// wrote again would apply the write twice: the retry's Check waits for the
// lost transaction, which then commits, and accepts the retry's equal
// token. The outcome is read safely inside the retry's own Exec, after its
// Check: the Check waits for the lost transaction to end, and the
// statements after it see what it did.
func TestCommitUnknownReadInRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	bouncer, direct, g, data, pooled := syncStandbyPooled(ctx, t, "reread")
	// appendA appends "a" to k's value: applied twice, it reads "aa".
	appendA := func(tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO " + data + " (k, v, token) VALUES ('k', 'a', 1) ON CONFLICT (k) DO UPDATE SET v = " + data + ".v || 'a'")
		return err
	}
	done := make(chan error, 1)
	go func() {
		done <- pooled.Exec(ctx, "job", 1, func(tx *sql.Tx) error {
			if err := syncCommit(tx); err != nil {
				return err
			}
			return appendA(tx)
		})
	}()
	awaitSyncRep(ctx, t, direct, done, countSyncRep)
	bouncer.Admin(ctx, "KILL transaction")
	if err := <-done; !errors.Is(err, fence.ErrCommitUnknown) {
		t.Fatalf("Exec = %v, want an error matching ErrCommitUnknown", err)
	}
	bouncer.Admin(ctx, "RESUME transaction") // KILL pauses the database too

	// A plain read now sees neither the write nor its token, though the
	// transaction will commit.
	if v := get(ctx, t, direct, data, "k"); v != "<none>" {
		t.Fatalf("k = %q right after the lost commit: the lost transaction had already ended, the test shows nothing", v)
	}
	if _, ok, err := g.Token(ctx, "job"); err != nil || ok {
		t.Fatalf("Token = %v, %v right after the lost commit, want none yet", ok, err)
	}

	// The retry reads the outcome after its Check, and writes only if
	// the lost transaction did not.
	var already bool
	retried := make(chan error, 1)
	go func() {
		retried <- pooled.Exec(ctx, "job", 1, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRow("SELECT count(*) FROM " + data + " WHERE k = 'k'").Scan(&n); err != nil {
				return err
			}
			if already = n > 0; already {
				return nil
			}
			return appendA(tx)
		})
	}()
	awaitLockWait(ctx, t, direct, retried) // the retry's Check waits for the lost transaction
	awaitSyncRep(ctx, t, direct, nil, terminateSyncRep)
	if err := <-retried; err != nil {
		t.Fatalf("the retry's Exec = %v", err)
	}
	if !already {
		t.Errorf("the retry's read, after its Check, did not see the lost transaction's write")
	}
	if v := get(ctx, t, direct, data, "k"); v != "a" {
		t.Errorf("k = %q, want %q: the write applied once", v, "a")
	}
}
