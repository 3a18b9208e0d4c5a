// Package fence helps the protected resource reject late writers.
//
// A lease cannot stop a process that was paused (SIGSTOP, a VM migration, a
// long GC pause) after it checked its lease and before its write arrived:
// the write lands after another holder started. Only the resource can
// reject it, by remembering the largest fencing token (baton.Lease.Token)
// it has accepted and refusing smaller ones. This package does that for
// three kinds of resources:
//
//   - SQLGuard: a fence table in the same SQL database as the protected
//     data. Guard.Check runs one conditional upsert inside the caller's
//     transaction, so the token check and the protected writes commit or
//     roll back together.
//   - RunLog: an idempotency record for "job + slot", so that the effects of
//     one scheduled slot happen once even if two holders ever ran it.
//   - Register: an in-memory guard for one process (files it alone writes,
//     tests).
//
// Every check fails with an error matching ErrStaleToken when a newer
// holder has already written.
//
// # Connection poolers
//
// Through PgBouncer in transaction or session mode the helpers keep their
// guarantees: a transaction keeps one server connection from BEGIN to
// COMMIT. In transaction mode the driver must not carry prepared
// statements from one transaction to the next (pgx:
// default_query_exec_mode=exec); statement mode refuses the transactions
// the helpers need. Both are reported with errors matching ErrPoolMode.
// docs/poolers.md in the repository says what to configure and what
// PAUSE, KILL, restarts and an exhausted pool look like.
//
// # Portability
//
// SQLGuard and RunLog issue PostgreSQL SQL (INSERT ... ON CONFLICT, $n
// placeholders, bigint and timestamptz columns) through database/sql and
// work with any PostgreSQL driver (pgx's stdlib adapter, lib/pq). This
// package imports no driver. Other databases need their own upsert: the
// statement must insert the row or update it only when the stored token is
// <= the new one, report zero affected rows otherwise, and lock the row
// until the transaction ends. Beware MySQL's ON DUPLICATE KEY UPDATE, which
// reports 0 rows for an update that leaves the value unchanged (an equal
// token) unless the client sets CLIENT_FOUND_ROWS.
package fence
