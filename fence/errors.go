package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// ErrStaleToken means a write carried a fencing token smaller than the
// largest one the resource has accepted for that name: a newer holder has
// written, and the write must not take effect. Errors returned by
// SQLGuard.Check, SQLGuard.Exec, Register.Write and Register.Do match it
// with errors.Is; errors.As with *StaleTokenError gives the details.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError is the error for a rejected token.
type StaleTokenError struct {
	// Name is the fenced name (normally the lock name).
	Name string
	// Token is the rejected token.
	Token uint64
	// Stored is the largest token accepted so far for Name, if Known.
	Stored uint64
	// Known reports whether Stored could be read. An SQLGuard reads it with
	// a second query after the rejection; under REPEATABLE READ or
	// SERIALIZABLE the transaction's snapshot may not show it.
	Known bool
}

func (e *StaleTokenError) Error() string {
	if e.Known {
		return fmt.Sprintf("fence: stale fencing token for %q: %d rejected, %d already accepted", e.Name, e.Token, e.Stored)
	}
	return fmt.Sprintf("fence: stale fencing token for %q: %d rejected, a larger one was already accepted", e.Name, e.Token)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// ErrCommitUnknown means that the COMMIT of a fenced transaction
// (SQLGuard.Exec, RunLog.Exec) failed without the server refusing it: the
// connection ended while COMMIT was in flight (the session terminated, the
// server shut down or crashed, the network cut), so the transaction may
// have committed. The transaction may even still be running on the server
// when the caller sees the error (a pooler or a network cut ended the
// client's connection, not the server's session; a commit waiting for a
// synchronous standby): a plain read then finds neither its writes nor its
// token, and they may appear later. So read the outcome inside the retry:
// in SQLGuard.Exec's write (after its Check, which waits for the lost
// transaction to end, since that holds the fence row), write again only
// what is not there. A retry with the same token is accepted as the same
// holder writing again, so a retry that does not look first may apply the
// write twice. RunLog.Exec needs no such care: its claim waits for the lost
// transaction's, and runs work only if that one rolled back.
// A commit that the server refused with an ERROR (a deferred constraint, a
// serialization failure) rolled back, and its error does not match.
var ErrCommitUnknown = errors.New("fence: commit outcome unknown")

// commit commits tx (the transaction of what), and wraps its error with
// ErrCommitUnknown unless COMMIT was not sent (ctx had ended: database/sql
// rolls back instead) or the server answered it with an ERROR.
func commit(ctx context.Context, tx *sql.Tx, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fence: commit %s: not sent, rolled back: %w", what, err)
	}
	return commitError(what, tx.Commit())
}

// commitError classifies err, the error of tx.Commit for the transaction
// of what (nil: committed). Drivers report the server's answer with a
// SQLState method (pgx, lib/pq); classes 08 (connection exception) and 57
// (operator intervention: shutdown, termination) come with the end of the
// session, not a refusal, and so does an error with no SQLSTATE.
func commitError(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrTxDone) { // database/sql rolled back first (ctx ended)
		return fmt.Errorf("fence: commit %s: rolled back: %w", what, err)
	}
	if c := sqlState(err); len(c) == 5 && c[:2] != "08" && c[:2] != "57" {
		return fmt.Errorf("fence: commit %s: refused, rolled back: %w", what, err)
	}
	return fmt.Errorf("fence: commit %s: the connection ended while COMMIT was in flight, "+
		"so it may have committed (and may still be running on the server); read what it wrote inside the retry's "+
		"fenced transaction, after its check, before writing again: %w: %w", what, ErrCommitUnknown, err)
}

// sqlState returns the SQLSTATE of the server's error in err's chain, or
// "". Drivers report it with a SQLState method (pgx, lib/pq).
func sqlState(err error) string {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return coded.SQLState()
	}
	return ""
}

// ErrPoolMode means that the statements reached PostgreSQL through a
// connection pooler (PgBouncer, or another) in a pooling mode that they,
// or the driver's way of sending them, cannot work under. The error names
// the mode and the fix. Nothing was written: retrying does not help until
// the configuration changes.
var ErrPoolMode = errors.New("fence: the connection pooler's mode does not fit")

// dbError wraps err, the error of a statement (what) on table, and names
// the fix when an operator caused it: the table is not found (42P01), the
// role lacks privileges on it (42501; privs are those the statements
// need), the transaction is read-only (25006), the table was altered so
// that the statements no longer fit it (its primary key dropped: 42P10; a
// column renamed or dropped: 42703; a column's type changed: 42804, 22003;
// create is the table the statements need), the driver's prepared
// statement was missing on the server connection that ran it, or already
// there (26000, 42P05: fence itself prepares nothing, so a pooler shared
// server connections between the driver's clients; see ErrPoolMode).
func dbError(what, table, privs, create string, err error) error {
	if perr := poolerError(what, err); perr != nil {
		return perr
	}
	switch sqlState(err) {
	case "26000", "42P05":
		return fmt.Errorf("fence: %s: the driver's prepared statement was missing on the server connection "+
			"that ran it, or already there: a pooler in transaction or statement mode (PgBouncer before 1.21, "+
			"or with max_prepared_statements = 0) hands each transaction any server connection; have the "+
			"driver send statements unprepared (pgx: default_query_exec_mode=exec or simple_protocol in the "+
			"connection string; lib/pq: binary_parameters=yes), or pool in session mode: %w: %w", what, ErrPoolMode, err)
	case "42P10", "42703", "42804", "22003":
		return fmt.Errorf("fence: %s: table %s does not have the columns and primary key the statements need: "+
			"alter it back to %q (dropping it loses the tokens or runs it records): %w", what, table, create, err)
	case "42P01":
		return fmt.Errorf("fence: %s: table %s not found: if the role's search_path changed, name its schema "+
			"(schema.table); if it was dropped, create it with Ensure (a new table remembers nothing): %w", what, table, err)
	case "42501":
		return fmt.Errorf("fence: %s: the role lacks privileges on %s: GRANT %s ON %s TO the role: %w", what, table, privs, table, err)
	case "25006":
		return fmt.Errorf("fence: %s: the transaction is read-only (a hot standby, default_transaction_read_only "+
			"on, or TxOptions.ReadOnly): connect to the primary: %w", what, err)
	}
	return fmt.Errorf("fence: %s: %w", what, err)
}

// poolerError explains PgBouncer's refusal of what, and returns nil for
// any other error. PgBouncer gives all its own errors one code (08P01,
// protocol violation), so their messages tell them apart:
//   - statement pooling refuses transactions, which the helpers need
//     (ErrPoolMode);
//   - query_wait_timeout: no server connection came in time (a paused
//     database, or an exhausted pool);
//   - query timeout: a statement, or a transaction idle between two,
//     outlasted query_timeout.
func poolerError(what string, err error) error {
	if sqlState(err) != "08P01" {
		return nil
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, "statement pooling mode"):
		return fmt.Errorf("fence: %s: the pooler runs in statement mode (PgBouncer's pool_mode = statement), "+
			"which refuses transactions, and the fence helpers need one so that the token check or claim and "+
			"the writes commit together: connect them to a database pooled in transaction or session mode "+
			"(PgBouncer: pool_mode=transaction on the database's line in [databases]): %w: %w", what, ErrPoolMode, err)
	case strings.Contains(msg, "query_wait_timeout"):
		return fmt.Errorf("fence: %s: the pooler found no server connection for it within query_wait_timeout: "+
			"its database was paused (PgBouncer's PAUSE, until RESUME), PostgreSQL refused new connections, or "+
			"every server connection of the pool (default_pool_size) was held by an open transaction (in session "+
			"mode, by a client), as a writer stopped in its transaction holds one until it ends; SHOW POOLS and "+
			"SHOW SERVERS on PgBouncer's admin console tell which; raise default_pool_size above the transactions "+
			"open at once, or bound them (idle_transaction_timeout): %w", what, err)
	case strings.Contains(msg, "query timeout"):
		return fmt.Errorf("fence: %s: the pooler ended the connection after its query_timeout, which PgBouncer "+
			"counts from the client's last request, so a transaction idle that long ends too; a check or claim "+
			"waits for the row lock of any other writer of the name still in its transaction, for as long as "+
			"that writer holds it: set query_timeout above the longest fenced transaction, or to 0 and bound the "+
			"transactions with idle_transaction_timeout: %w", what, err)
	}
	return nil
}
