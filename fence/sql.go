package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
)

// DefaultTable is the fence table's default name.
const DefaultTable = "baton_fence"

// guardPrivileges are the privileges that SQLGuard's statements need on
// the fence table (the upsert reads the stored token).
const guardPrivileges = "SELECT, INSERT, UPDATE"

// SQLGuard fences writes to a SQL database (PostgreSQL; see the package
// doc for others) with a fence table that holds, per name, the largest
// token accepted:
//
//	CREATE TABLE IF NOT EXISTS baton_fence (name text PRIMARY KEY, token bigint NOT NULL)
//
// Create it with NewSQLGuard. Its methods are safe for concurrent use.
//
// # Why one statement in the caller's transaction is enough
//
// Check runs, in the caller's transaction,
//
//	INSERT INTO baton_fence (name, token) VALUES ($1, $2)
//	ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token
//	WHERE baton_fence.token <= EXCLUDED.token
//
// and treats zero affected rows as a stale token. The statement locks the
// fence row (inserting it, or locking it for the update; PostgreSQL locks
// a conflicting row even when the WHERE clause then skips the update), and
// the lock is held until the transaction ends. So:
//
//   - Writers of one name are serialized on the fence row from their Check
//     to their commit or rollback.
//   - A writer whose Check waits for a newer holder's transaction sees,
//     under READ COMMITTED (PostgreSQL's default), the newest committed
//     token once that transaction ends: if the newer holder committed, the
//     stale writer gets zero rows and ErrStaleToken; if it rolled back, the
//     older token still stands and the waiting writer may go ahead. Under
//     REPEATABLE READ or SERIALIZABLE (WithTxOptions, or
//     default_transaction_isolation set on the database or role),
//     PostgreSQL instead fails the waiting statement with a serialization
//     error (SQLSTATE 40001) once the other transaction commits, whatever
//     the tokens: a stale writer, and a current holder that waited for an
//     older holder's write too. The caller sees the driver's error, not
//     ErrStaleToken, and must retry the whole transaction: the retry of a
//     current token goes through, that of a stale one gets ErrStaleToken.
//   - The protected writes of the transaction commit if and only if its
//     fence update commits: they commit or roll back together. A caller
//     must roll back when Check fails (Exec does).
//
// Hence committed writes of one name carry non-decreasing tokens in commit
// order: once a transaction with token t has committed, no transaction
// with a token smaller than t commits a protected write. The guarantee
// holds only for writes made in the same transaction as a successful
// Check, on the same database as the fence table. Run Check first in the
// transaction, so that the row lock is taken before the protected writes
// (writers then queue on the fence row instead of deadlocking on the
// data).
//
// A writer that stops inside its transaction (a process paused after its
// Check, a machine cut off from the database) holds every later writer
// of the name, the next lock holder's included, until that transaction
// ends: for as long as the pause lasts, or until PostgreSQL notices the
// lost connection (TCP keepalives: hours by default). If it resumes, its
// write commits: its token was accepted before the newer one came. Bound
// this in the database with idle_in_transaction_session_timeout, set for
// the writers' role (ALTER ROLE ... SET), which covers the whole
// transaction. Behind a pooler, its server connections opened before
// the ALTER ROLE keep the old value until they are replaced (PgBouncer's
// RECONNECT), and PgBouncer's idle_transaction_timeout is a bound of its
// own (docs/poolers.md). A SET LOCAL as write's first statement does not
// cover a pause between Check and that statement; a caller of Check can
// run it before Check instead. PostgreSQL then ends the stopped writer's
// session, its write is rolled back (its commit fails with SQLSTATE
// 25P03), and the next holder goes ahead. Give Exec a context with a
// deadline too.
//
// The fence row is the only record of the largest token: while it is
// gone, nothing is fenced. Deleting it, truncating the table, dropping and
// re-creating it (Ensure), or restoring it from a backup older than the
// last fenced write lets the next writer of the name through whatever its
// token, a stale one included, until the current holder writes again.
// Likewise, after a failover to an asynchronous standby, the fence tokens
// committed on the old primary but not yet replicated are lost together
// with the writes they fenced, and so are the last commits before a crash
// when synchronous_commit is off (unlike RunLog, SQLGuard leaves the
// durability of the caller's transaction as the caller set it; keep
// synchronous_commit on for the writers). A dropped table is reported (SQLSTATE
// 42P01, "relation does not exist"), as are revoked privileges (42501; the
// writers' role needs SELECT, INSERT and UPDATE on the table) and writes
// sent to a read-only standby (25006).
//
// An equal token is accepted: it is the same holder writing again. Tokens
// of different locks must not share a name (use the lock's name), and the
// tokens must come from a backend that keeps them durable (a memory or a
// restarted non-persistent Redis backend starts again from 1, and every
// write would then be rejected).
type SQLGuard struct {
	db    *sql.DB
	table string
	txOpt *sql.TxOptions

	create, upsert, load string
}

// Option configures NewSQLGuard.
type Option func(*SQLGuard)

// WithTable sets the fence table's name (default DefaultTable). It must be
// an SQL identifier, optionally schema-qualified: letters, digits and
// underscores, not starting with a digit, at most 63 bytes per part. It is
// used unquoted, so PostgreSQL folds it to lower case.
func WithTable(name string) Option { return func(g *SQLGuard) { g.table = name } }

// WithTxOptions sets the options Exec begins its transactions with
// (default nil: the database's default isolation, READ COMMITTED in
// PostgreSQL).
func WithTxOptions(o *sql.TxOptions) Option { return func(g *SQLGuard) { g.txOpt = o } }

// NewSQLGuard returns a guard on db's fence table. It does not touch the
// database; call Ensure to create the table. It fails if the table name is
// not a valid identifier or db is nil.
func NewSQLGuard(db *sql.DB, opts ...Option) (*SQLGuard, error) {
	if db == nil {
		return nil, errors.New("fence: NewSQLGuard: nil *sql.DB")
	}
	g := &SQLGuard{db: db, table: DefaultTable}
	for _, o := range opts {
		if o != nil { // as baton's options: a nil one is no option
			o(g)
		}
	}
	if err := ValidateIdentifier(g.table); err != nil {
		return nil, fmt.Errorf("fence: NewSQLGuard: table: %w", err)
	}
	g.create = "CREATE TABLE IF NOT EXISTS " + g.table + " (name text PRIMARY KEY, token bigint NOT NULL)"
	g.upsert = "INSERT INTO " + g.table + " AS f (name, token) VALUES ($1, $2) " +
		"ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token"
	g.load = "SELECT token FROM " + g.table + " WHERE name = $1"
	return g, nil
}

// Table returns the fence table's name.
func (g *SQLGuard) Table() string { return g.table }

// Ensure creates the fence table if it does not exist. It does so in a
// transaction, as Exec writes, so that a pooler that refuses transactions
// is reported (ErrPoolMode) when the program sets up, not at its first
// write.
func (g *SQLGuard) Ensure(ctx context.Context) error {
	return ensure(ctx, g.db, g.table, guardPrivileges, g.create)
}

// Check fences tx for name with token: in one conditional statement, it
// records token as name's fence token if the stored one is not larger
// (inserting the row for a new name), and locks the fence row until tx
// ends. If a larger token is stored it returns an error matching
// ErrStaleToken (a *StaleTokenError naming the rejected and, when it can
// read it, the stored token); the caller must then roll tx back. See
// SQLGuard for why the protected writes in tx then commit only in token
// order.
//
// Tokens above math.MaxInt64 do not fit the bigint column and are refused
// with an error that does not match ErrStaleToken.
func (g *SQLGuard) Check(ctx context.Context, tx *sql.Tx, name string, token uint64) error {
	if tx == nil {
		return errors.New("fence: Check: nil *sql.Tx")
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("fence: token %d for %q does not fit a bigint", token, name)
	}
	res, err := tx.ExecContext(ctx, g.upsert, name, int64(token))
	if err != nil {
		return dbError(fmt.Sprintf("check %q token %d", name, token), g.table, guardPrivileges, g.create, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: check %q token %d: rows affected: %w", name, token, err)
	}
	if n > 0 {
		return nil
	}
	// Rejected. The row is locked by this transaction now, so the stored
	// token cannot change under us; reading it is only for the message.
	stale := &StaleTokenError{Name: name, Token: token}
	var stored int64
	if err := tx.QueryRowContext(ctx, g.load, name).Scan(&stored); err == nil && stored >= 0 {
		stale.Stored, stale.Known = uint64(stored), true
	}
	return stale
}

// Exec runs write in a new transaction fenced by Check: it begins a
// transaction (with WithTxOptions' options), checks name and token, runs
// write, and commits. If the check fails, write is not called. If any step
// before the commit fails, the transaction is rolled back and the error
// returned; an error matching ErrStaleToken means a newer holder has
// written and nothing of write took effect. An error matching
// ErrCommitUnknown means the connection ended during the commit: write may
// have taken effect, or may yet; retry with a write that first reads
// whether it did (see ErrCommitUnknown). If write panics, the
// transaction is rolled back before the panic goes on, so that neither its connection nor its lock
// on name's fence row outlives the call.
//
// write must do its work through tx only; writes through other
// connections are not fenced. In particular, write must not fence name
// again (Exec, or Check in another transaction): that waits for the lock
// this transaction holds on name's fence row until write returns, so it
// waits until ctx ends, for ever without a deadline. Exec of another name
// inside write is fine, but commits on its own, and needs a second
// connection from db's pool while write holds one (with
// db.SetMaxOpenConns(1), it waits until ctx ends).
func (g *SQLGuard) Exec(ctx context.Context, name string, token uint64, write func(tx *sql.Tx) error) error {
	tx, err := begin(ctx, g.db, g.txOpt)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed { // an error, or a panic in write
			_ = tx.Rollback()
		}
	}()
	if err := g.Check(ctx, tx, name, token); err != nil {
		return err
	}
	if err := write(tx); err != nil {
		return err
	}
	if err := commit(ctx, tx, fmt.Sprintf("%q token %d", name, token)); err != nil {
		return err
	}
	committed = true
	return nil
}

// begin begins a transaction on db. If ctx ends while every connection
// of db's pool is in use, database/sql reports only ctx's error; begin
// names the pool as the cause, since the database was not at fault. If
// ctx's deadline passes while the database or a pooler (PgBouncer paused,
// or out of server connections) holds the request, the driver reports
// only the deadline; begin names the likely causes.
func begin(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, opts)
	if err == nil {
		return tx, nil
	}
	if perr := poolerError("begin", err); perr != nil {
		return nil, perr
	}
	if s := db.Stats(); ctx.Err() != nil && s.MaxOpenConnections > 0 && s.InUse >= s.MaxOpenConnections {
		return nil, fmt.Errorf("fence: begin: no free connection: all %d connections of the pool "+
			"(db.SetMaxOpenConns) were in use until ctx ended; raise the limit, or do not call "+
			"Exec inside another Exec's write, which holds one: %w", s.MaxOpenConnections, err)
	}
	if errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("fence: begin: no answer before ctx's deadline: PostgreSQL was slow or "+
			"unreachable, or a pooler in front of it held the connection or the BEGIN (PgBouncer paused, "+
			"or every server connection of its pool in use: SHOW POOLS on its admin console tells): %w", err)
	}
	return nil, fmt.Errorf("fence: begin: %w", err)
}

// ensure runs create, which creates table, in a transaction of its own.
func ensure(ctx context.Context, db *sql.DB, table, privs, create string) error {
	tx, err := begin(ctx, db, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after a commit, ErrTxDone
	if _, err := tx.ExecContext(ctx, create); err != nil {
		return dbError("create table "+table, table, privs, create, err)
	}
	if err := tx.Commit(); err != nil {
		return dbError("create table "+table, table, privs, create, err)
	}
	return nil
}

// Token returns the token stored for name, and false if name has none.
func (g *SQLGuard) Token(ctx context.Context, name string) (uint64, bool, error) {
	var t int64
	err := g.db.QueryRowContext(ctx, g.load, name).Scan(&t)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, dbError(fmt.Sprintf("read token of %q", name), g.table, guardPrivileges, g.create, err)
	}
	return uint64(t), true, nil
}

var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidateIdentifier reports whether s can be used, unquoted, as a table
// name: one identifier or schema.identifier, each part letters, digits and
// underscores, not starting with a digit, at most 63 bytes.
func ValidateIdentifier(s string) error {
	parts := []string{s}
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			parts = []string{s[:i], s[i+1:]}
			break
		}
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return fmt.Errorf("invalid SQL identifier %q: want letters, digits and underscores, not starting with a digit, at most 63 bytes, optionally schema-qualified", s)
		}
	}
	return nil
}
