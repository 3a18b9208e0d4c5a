//go:build linux

package safety

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/internal/testenv"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// The PostgreSQL rows: the fenced register kept in a real PostgreSQL,
// which decides every fenced operation through fence.SQLGuard.Exec, as
// the resource users fence does.
//
// The register's handlers (register_test.go) run each fenced read and
// write as one SQLGuard transaction under the register's mutex and
// record what PostgreSQL decided: accepted, refused (ErrStaleToken), or,
// when the session ended while COMMIT was in flight (ErrCommitUnknown),
// what the write log says happened. Calling PostgreSQL under the mutex
// keeps the recorded order PostgreSQL's own (one transaction at a time),
// so the checker judges PostgreSQL's decisions with no change; the cost
// is that fence's row lock never meets a concurrent writer here (package
// fence's own tests cover that). The contenders are unchanged: a paused
// holder's late write still reaches PostgreSQL with its old token.
//
// The lock runs on the file backend: the rows test the fence, not the
// lock store, and it needs no server.

// pgDecideWithin bounds how long the register keeps retrying one fenced
// operation whose outcome PostgreSQL has not given yet (a restart).
const pgDecideWithin = 30 * time.Second

// pgRetryEvery is the pause between two attempts at an undecided
// operation: PostgreSQL announces no restart to wait for.
const pgRetryEvery = 20 * time.Millisecond

// The register's tables, beside fence's own: the fenced value of each
// scenario (named after its lock), and a log of the writes that
// committed, by the op's Seq, which says after the fact whether a commit
// whose session ended took effect, and what the audit compares the
// recorded history with.
const (
	pgRegTable   = "CREATE TABLE IF NOT EXISTS safety_reg (name text PRIMARY KEY, val bigint NOT NULL)"
	pgWriteTable = "CREATE TABLE IF NOT EXISTS safety_writes (name text, id bigint, tok bigint NOT NULL, " +
		"before bigint NOT NULL, val bigint NOT NULL, PRIMARY KEY (name, id))"
	pgRegRow  = "INSERT INTO safety_reg (name, val) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING"
	pgReadSQL = "SELECT val FROM safety_reg WHERE name = $1"
	// pgWriteSQL sets the value, logs the write and returns the value it
	// overwrote, in one statement (one snapshot).
	pgWriteSQL = "WITH old AS (SELECT val FROM safety_reg WHERE name = $1), " +
		"upd AS (UPDATE safety_reg SET val = $4 WHERE name = $1), " +
		"log AS (INSERT INTO safety_writes (name, id, tok, before, val) SELECT $1, $2, $3, val, $4 FROM old) " +
		"SELECT val FROM old"
	pgWrittenSQL = "SELECT before FROM safety_writes WHERE name = $1 AND id = $2"
	pgSyncRepSQL = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' LIMIT 1"
)

// pgFenceDB is the PostgreSQL server of a backend's fenced registers.
// Its commits do not wait for a standby (synchronous_commit = local),
// except those a fault asks to, which wait for one that never comes
// (synchronous_standby_names = nobody), as in fence/commit_test.go.
type pgFenceDB struct{ pg *testenv.Postgres }

// pgFenceEnv is the file backend with its fenced registers in PostgreSQL.
func pgFenceEnv(t *testing.T) *backendEnv {
	be := fileEnv(t)
	be.fenceDB = &pgFenceDB{pg: testenv.StartPostgres(t, testenv.PostgresArgs(
		"-c", "synchronous_standby_names=nobody", "-c", "synchronous_commit=local"))}
	return be
}

// pgRegister is one scenario's fenced register in PostgreSQL.
type pgRegister struct {
	pg    *testenv.Postgres
	ctx   context.Context // ends with the scenario
	db    *sql.DB         // the register's transactions
	admin *sql.DB         // the faults' and the audit's queries
	guard *fence.SQLGuard
	name  string // the fenced name and the register's row: the lock's

	// hang makes the next accepted write's commit wait for a standby
	// that never comes, until a fault ends its session.
	hang atomic.Bool
	// stall makes the next accepted write send its backend's pid on
	// stalled after its statement, and wait for resume before Exec
	// commits, so that a fault can end its session before the COMMIT.
	stall   atomic.Bool
	stalled chan int
	resume  chan struct{}
	// undecided counts the write attempts whose Exec returned an error
	// other than ErrStaleToken, and lastUndecided holds the last one's;
	// ambiguous counts those whose error matched ErrCommitUnknown, and
	// committed and rolledBack what the retries found of them in the write
	// log; retries counts the attempts made again after an error that
	// decided nothing.
	undecided, ambiguous, committed, rolledBack, retries atomic.Int64
	lastUndecided                                        atomic.Value // string
	// mislabelled counts the writes whose Exec said they rolled back (an
	// error matching neither ErrStaleToken nor ErrCommitUnknown) and
	// that the write log showed committed: fence's contract broken.
	mislabelled atomic.Int64
}

// register opens the fenced register of the scenario locking lock.
func (d *pgFenceDB) register(t *testing.T, lock string) *pgRegister {
	t.Helper()
	open := func() *sql.DB {
		db, err := sql.Open("pgx", d.pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	p := &pgRegister{pg: d.pg, ctx: t.Context(), db: open(), admin: open(), name: lock,
		stalled: make(chan int, 1), resume: make(chan struct{}, 1)}
	// A connection of the admin's kept idle across a restart would fail
	// its next query: each of its queries opens one of its own.
	p.admin.SetMaxIdleConns(0)
	g, err := fence.NewSQLGuard(p.db)
	if err != nil {
		t.Fatal(err)
	}
	p.guard = g
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := g.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{pgRegTable, pgWriteTable} {
		if _, err := p.admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.admin.ExecContext(ctx, pgRegRow, lock); err != nil {
		t.Fatal(err)
	}
	return p
}

// read has PostgreSQL decide a fenced read with tok. A read writes only
// the fence token, with the same result if made again, so an attempt
// that decided nothing is simply made again.
func (p *pgRegister) read(tok uint64) (bool, int64, error) {
	ctx, cancel := context.WithTimeout(p.ctx, pgDecideWithin)
	defer cancel()
	for {
		var val int64
		err := p.guard.Exec(ctx, p.name, tok, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, pgReadSQL, p.name).Scan(&val)
		})
		if ok, decided := verdict(err); decided {
			return ok, val, nil
		}
		if werr := p.again(ctx); werr != nil {
			return false, 0, fmt.Errorf("%w (last attempt: %w)", werr, err)
		}
	}
}

// write has PostgreSQL decide the fenced write of val with tok, op seq of
// the history. An attempt that decided nothing is made again, as
// ErrCommitUnknown's documentation says: the retry's write first looks in
// the write log, after its Check (which waits for the lost transaction,
// should it still run), and writes only if the lost attempt did not.
func (p *pgRegister) write(seq int, tok uint64, val int64) (bool, int64, error) {
	ctx, cancel := context.WithTimeout(p.ctx, pgDecideWithin)
	defer cancel()
	var lastErr error // the last attempt's, if it decided nothing
	for {
		var before int64
		var found bool
		err := p.guard.Exec(ctx, p.name, tok, func(tx *sql.Tx) (err error) {
			before, found, err = p.writeTx(ctx, tx, seq, tok, val, lastErr != nil)
			return err
		})
		if ok, decided := verdict(err); decided {
			p.resolved(lastErr, found)
			return ok, before, nil
		}
		if errors.Is(err, fence.ErrCommitUnknown) {
			p.ambiguous.Add(1)
		}
		p.lastUndecided.Store(err.Error())
		p.undecided.Add(1)
		// A later attempt's error that is not ErrCommitUnknown (PostgreSQL
		// still down) leaves the lost commit's outcome as unknown.
		if lastErr == nil || !errors.Is(lastErr, fence.ErrCommitUnknown) {
			lastErr = err
		}
		if werr := p.again(ctx); werr != nil {
			return false, 0, fmt.Errorf("%w (last attempt: %w)", werr, err)
		}
	}
}

// resolved counts what a decided retry found of the earlier attempt that
// failed with lastErr (nil: there was none).
func (p *pgRegister) resolved(lastErr error, found bool) {
	switch unknown := errors.Is(lastErr, fence.ErrCommitUnknown); {
	case unknown && found:
		p.committed.Add(1)
	case unknown:
		p.rolledBack.Add(1)
	case found:
		p.mislabelled.Add(1)
	}
}

// writeTx is write's work in tx: if lookFirst, it reports found (and the
// value it overwrote) when an earlier attempt's write is in the log, and
// does nothing more; else it writes, its commit made to wait for the
// standby if p.hang asks, and stalls if p.stall asks.
func (p *pgRegister) writeTx(ctx context.Context, tx *sql.Tx, seq int, tok uint64, val int64, lookFirst bool) (before int64, found bool, err error) {
	if lookFirst {
		switch err := tx.QueryRowContext(ctx, pgWrittenSQL, p.name, seq).Scan(&before); {
		case err == nil:
			return before, true, nil
		case !errors.Is(err, sql.ErrNoRows):
			return 0, false, err
		}
	}
	if p.hang.CompareAndSwap(true, false) {
		if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return 0, false, err
		}
	}
	if err := tx.QueryRowContext(ctx, pgWriteSQL, p.name, seq, int64(tok), val).Scan(&before); err != nil {
		return 0, false, err
	}
	if p.stall.CompareAndSwap(true, false) {
		return before, false, p.stallTx(ctx, tx)
	}
	return before, false, nil
}

// stallTx sends tx's backend pid on p.stalled and waits for p.resume.
func (p *pgRegister) stallTx(ctx context.Context, tx *sql.Tx) error {
	var pid int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return err
	}
	p.stalled <- pid
	select {
	case <-p.resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// verdict reports whether err, an Exec's, is PostgreSQL's decision, and
// which: nil accepted, ErrStaleToken refused. Any other error leaves the
// operation undecided.
func verdict(err error) (ok, decided bool) {
	switch {
	case err == nil:
		return true, true
	case errors.Is(err, fence.ErrStaleToken):
		return false, true
	}
	return false, false
}

// again counts one more attempt and waits before it, or says why there
// is none.
func (p *pgRegister) again(ctx context.Context) error {
	p.retries.Add(1)
	select {
	case <-ctx.Done():
		return fmt.Errorf("PostgreSQL decided nothing within %v: %w", pgDecideWithin, ctx.Err())
	case <-time.After(pgRetryEvery):
		return nil
	}
}

// awaitSyncRep waits until a session's COMMIT waits for the standby that
// never comes (hang), and returns its backend's pid.
func (p *pgRegister) awaitSyncRep(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		var pid int
		err := p.admin.QueryRowContext(ctx, pgSyncRepSQL).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("looking for a commit waiting for the standby: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no fenced commit waited for the standby within a minute")
		case <-time.After(5 * time.Millisecond): // polling PostgreSQL's view: no event to wait on
		}
	}
}

// commitLost ends the session of one of the holder's fenced writes while
// its COMMIT is in flight or about to be sent. In the first of every
// three rounds an operator terminates the session (pg_terminate_backend)
// while its COMMIT waits for a synchronous standby: it committed locally.
// In the second PostgreSQL is restarted with a fast shutdown, which ends
// every session, at the same point, and keeps the register waiting for it.
// In the third the operator terminates the session after the write's
// statement and before Exec sends COMMIT, which then meets a closed
// session: it rolled back. Exec cannot tell these apart (ErrCommitUnknown);
// the register must record what the write log shows, and the lock and
// the register go on.
func (h *harness) commitLost(round, minWrites int) {
	h.t.Helper()
	p := h.reg.pg
	if p == nil {
		h.t.Fatalf("the %q fault needs the fenced register in PostgreSQL (backendEnv.fenceDB)", faultCommitLost)
	}
	h.reg.await(fmt.Sprintf("%d accepted writes of the holder", minWrites), 60*time.Second, func(s *snapshot) bool {
		return s.fMax > 0 && s.writesAt[s.fMax] >= minWrites
	})
	seen, seenAmbiguous, seenCommitted := p.undecided.Load(), p.ambiguous.Load(), p.committed.Load()
	var at time.Duration
	switch round % 3 {
	case 0:
		p.hang.Store(true)
		pid := p.awaitSyncRep(h.t)
		at = h.reg.now()
		p.terminate(h.t, pid)
	case 1:
		p.hang.Store(true)
		p.awaitSyncRep(h.t)
		at = h.reg.now()
		p.pg.Restart()
	default:
		p.stall.Store(true)
		var pid int
		select {
		case pid = <-p.stalled:
		case <-time.After(60 * time.Second):
			h.t.Fatalf("no fenced write stalled before its COMMIT within 60s")
		}
		at = h.reg.now()
		p.terminate(h.t, pid)
		p.resume <- struct{}{}
	}
	h.reg.await("the register's verdict on the write whose session ended", pgDecideWithin+10*time.Second, func(*snapshot) bool {
		return p.undecided.Load() > seen
	})
	if p.ambiguous.Load() == seenAmbiguous {
		h.t.Errorf("Exec's error for a write whose session ended before its COMMIT was answered does not match ErrCommitUnknown: %v", p.lastUndecided.Load())
		return
	}
	h.writeAfter("fenced commit's session ended", at)
	// The retry has decided by now (the register's mutex orders it
	// before the write awaited). Its COMMIT had reached PostgreSQL in the
	// first two ways, not in the third: else the fault injected nothing
	// of what the round is for.
	if wantCommitted, committed := round%3 != 2, p.committed.Load() > seenCommitted; committed != wantCommitted {
		h.t.Errorf("round %d: the write whose session ended committed: %v, want %v (the write log decides; the fault missed its point)", round, committed, wantCommitted)
	}
}

// terminate ends the session of backend pid, as an operator's
// pg_terminate_backend, and waits until the backend has exited.
func (p *pgRegister) terminate(t *testing.T, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var ok bool
	if err := p.admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1, 60000)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
}

// audit compares the history the register recorded with what PostgreSQL
// holds: every write it recorded as accepted, and only those, in the
// write log with the same token and values; the register's last value;
// the fence token, the largest accepted. It fails the row if Exec ever
// said that a write rolled back which had committed.
func (p *pgRegister) audit(t reporter, ops []op) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type row struct{ tok, before, val int64 }
	log := map[int]row{}
	rows, err := p.admin.QueryContext(ctx, "SELECT id, tok, before, val FROM safety_writes WHERE name = $1", p.name)
	if err != nil {
		t.Errorf("audit: reading the write log: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var r row
		if err := rows.Scan(&id, &r.tok, &r.before, &r.val); err != nil {
			t.Errorf("audit: %v", err)
			return
		}
		log[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Errorf("audit: %v", err)
		return
	}
	var top uint64
	var last, accepted int64
	for _, o := range ops {
		if o.OK {
			top = max(top, o.Tok)
		}
		if !o.Write || !o.OK {
			continue
		}
		accepted++
		last = o.FIn
		r, ok := log[o.Seq]
		if !ok || r.tok != int64(o.Tok) || r.before != o.FBefore || r.val != o.FIn {
			t.Errorf("audit: op %d (token %d, %d over %d) recorded as accepted; PostgreSQL's write log has %+v (present: %v)", o.Seq, o.Tok, o.FIn, o.FBefore, r, ok)
		}
		delete(log, o.Seq)
	}
	for id, r := range log {
		t.Errorf("audit: PostgreSQL committed write %d (%+v), which the register did not record as accepted", id, r)
	}
	var val int64
	if err := p.admin.QueryRowContext(ctx, pgReadSQL, p.name).Scan(&val); err != nil || val != last {
		t.Errorf("audit: PostgreSQL's value is %d (%v), the register's last accepted write %d", val, err, last)
	}
	if tok, _, err := p.guard.Token(ctx, p.name); err != nil || tok != top {
		t.Errorf("audit: the fence token is %d (%v), the largest the register recorded as accepted %d", tok, err, top)
	}
	if n := p.mislabelled.Load(); n > 0 {
		t.Errorf("audit: Exec said %d writes rolled back (not ErrCommitUnknown) that had committed", n)
	}
	t.Logf("PostgreSQL accepted %d fenced writes; %d commits ended with their session (ErrCommitUnknown): %d had committed, %d had rolled back; %d attempts made again",
		accepted, p.ambiguous.Load(), p.committed.Load(), p.rolledBack.Load(), p.retries.Load())
}
