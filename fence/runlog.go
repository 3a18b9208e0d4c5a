package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// DefaultRunLogTable is the name NewRunLog uses for an empty table name.
const DefaultRunLogTable = "baton_runs"

// runLogPrivileges are the privileges that RunLog's statements need on
// its table.
const runLogPrivileges = "SELECT, INSERT"

// RunLog is an idempotency record for scheduled work: one row per job and
// slot (the scheduled time the run is for), under a unique key. Claiming a
// slot in the transaction that does the slot's work makes the work happen
// once per slot, even if two holders ever ran it (a paused holder whose
// lease ended, a replica whose clock is behind):
//
//	CREATE TABLE IF NOT EXISTS baton_runs (
//		job text NOT NULL, slot timestamptz NOT NULL,
//		done_at timestamptz NOT NULL DEFAULT now(),
//		PRIMARY KEY (job, slot))
//
// Claim inserts the row with ON CONFLICT DO NOTHING. A concurrent Claim of
// the same slot waits on the unique key until the first transaction ends:
// if it committed, the second gets false; if it rolled back, the second
// claims the slot. Like SQLGuard, this holds only for work done in the
// same transaction, on the same database, and a claimer stopped inside its
// transaction holds the slot's later claimers until it ends (see SQLGuard
// for the bound: idle_in_transaction_session_timeout). SQL is PostgreSQL's.
//
// Methods are safe for concurrent use.
type RunLog struct {
	db                     *sql.DB
	table                  string
	create, insert, exists string
}

// NewRunLog returns a run log in table (DefaultRunLogTable if empty), which
// must be a valid identifier (see ValidateIdentifier). Call Ensure to
// create the table.
func NewRunLog(db *sql.DB, table string) (*RunLog, error) {
	if db == nil {
		return nil, errors.New("fence: NewRunLog: nil *sql.DB")
	}
	if table == "" {
		table = DefaultRunLogTable
	}
	if err := ValidateIdentifier(table); err != nil {
		return nil, fmt.Errorf("fence: NewRunLog: table: %w", err)
	}
	return &RunLog{
		db:    db,
		table: table,
		create: "CREATE TABLE IF NOT EXISTS " + table + " (job text NOT NULL, slot timestamptz NOT NULL, " +
			"done_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (job, slot))",
		insert: "INSERT INTO " + table + " (job, slot) VALUES ($1, $2) ON CONFLICT (job, slot) DO NOTHING",
		exists: "SELECT EXISTS (SELECT 1 FROM " + table + " WHERE job = $1 AND slot = $2)",
	}, nil
}

// Table returns the table's name.
func (r *RunLog) Table() string { return r.table }

// Ensure creates the table if it does not exist, in a transaction as
// SQLGuard.Ensure does.
func (r *RunLog) Ensure(ctx context.Context) error {
	return ensure(ctx, r.db, r.table, runLogPrivileges, r.create)
}

// durableCommit makes the transaction's commit durable on the server when
// synchronous_commit is off, and leaves any other setting (on,
// remote_write, remote_apply, local) as it is.
const durableCommit = "SELECT set_config('synchronous_commit', 'local', true) WHERE current_setting('synchronous_commit') = 'off'"

// slotKey is the stored form of a slot: UTC, at the microsecond precision
// of timestamptz. Slots closer than a microsecond are the same slot.
func slotKey(slot time.Time) time.Time { return slot.UTC().Truncate(time.Microsecond) }

// Claim records in tx that job's slot is done and reports true, or reports
// false if a committed transaction already claimed it (then tx must not do
// the slot's work). The claim commits or rolls back with tx.
//
// If synchronous_commit is off (set on the server, database or role for
// speed), a commit returns before it is durable and a crash of PostgreSQL
// forgets it: the slot would run again. So Claim sets it to local for tx
// (SET LOCAL): tx's commit waits until its WAL is on the server's disk.
// Other settings are left alone.
func (r *RunLog) Claim(ctx context.Context, tx *sql.Tx, job string, slot time.Time) (bool, error) {
	if tx == nil {
		return false, errors.New("fence: Claim: nil *sql.Tx")
	}
	if _, err := tx.ExecContext(ctx, durableCommit); err != nil {
		return false, dbError(fmt.Sprintf("claim %q slot %v", job, slot), r.table, runLogPrivileges, r.create, err)
	}
	res, err := tx.ExecContext(ctx, r.insert, job, slotKey(slot))
	if err != nil {
		return false, dbError(fmt.Sprintf("claim %q slot %v", job, slot), r.table, runLogPrivileges, r.create, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("fence: claim %q slot %v: rows affected: %w", job, slot, err)
	}
	return n > 0, nil
}

// Exec runs work once for job's slot: in a new transaction it claims the
// slot, runs work if the claim succeeded, and commits. It reports whether
// work ran and committed. If the slot was already done it returns false
// and nil without calling work. On any error before the commit the
// transaction is rolled back, so the slot stays unclaimed; an error
// matching ErrCommitUnknown means the connection ended during the commit,
// and the slot and work may have committed: Exec again runs work only if
// they did not (its claim waits for the lost transaction, which may still
// be running on the server; Done, a plain read, may say false until that
// one ends). work must not
// claim the same slot again (Exec or Claim in another transaction): that
// waits for this transaction's claim until work returns, so it waits until
// ctx ends, for ever without a deadline.
func (r *RunLog) Exec(ctx context.Context, job string, slot time.Time, work func(tx *sql.Tx) error) (ran bool, err error) {
	tx, err := begin(ctx, r.db, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if !ran {
			_ = tx.Rollback()
		}
	}()
	ok, err := r.Claim(ctx, tx, job, slot)
	if err != nil || !ok {
		return false, err
	}
	if err := work(tx); err != nil {
		return false, err
	}
	if err := commit(ctx, tx, fmt.Sprintf("%q slot %v", job, slot)); err != nil {
		return false, err
	}
	return true, nil
}

// Done reports whether job's slot has been claimed by a committed
// transaction.
func (r *RunLog) Done(ctx context.Context, job string, slot time.Time) (bool, error) {
	var done bool
	if err := r.db.QueryRowContext(ctx, r.exists, job, slotKey(slot)).Scan(&done); err != nil {
		return false, dbError(fmt.Sprintf("read %q slot %v", job, slot), r.table, runLogPrivileges, r.create, err)
	}
	return done, nil
}
