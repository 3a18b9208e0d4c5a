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
	pg := testenv.StartPostgres(t, testenv.PostgresArgs(
		"-c", "synchronous_standby_names=nobody", "-c", "synchronous_commit=local"))
	bouncer := testenv.StartPgBouncer(t, pg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	direct := openDB(t, pg)
	g, data := newGuard(ctx, t, direct, "reread")
	pooled, err := fence.NewSQLGuard(openDSN(t, bouncer.DSN("transaction", "default_query_exec_mode=exec")), fence.WithTable(g.Table()))
	if err != nil {
		t.Fatal(err)
	}
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
