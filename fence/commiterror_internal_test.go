package fence

import (
	"database/sql"
	"errors"
	"testing"
)

// codedError is a server error as drivers report it (pgx, lib/pq).
type codedError string

func (e codedError) Error() string    { return "server error " + string(e) }
func (e codedError) SQLState() string { return string(e) }

// The end of the session during COMMIT may come with the server's own
// message (57P01 when an operator or a fast shutdown terminates it, 08xxx
// for the connection) or with none at all; the commit may have taken
// effect in every case, so each must match ErrCommitUnknown. Only the
// server's refusal of COMMIT (an ERROR of another class) rolled back. The
// safety suite's PostgreSQL row meets the coded forms (mutant m21); the
// lost-commit tests of this package see a bare closed connection, so the
// classification is pinned here.
func TestCommitErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		err     error
		unknown bool
	}{
		{codedError("57P01"), true}, // admin_shutdown: pg_terminate_backend, pg_ctl stop -m fast
		{codedError("57P02"), true}, // crash_shutdown
		{codedError("08006"), true}, // connection_failure
		{codedError("08P01"), true}, // protocol_violation: every PgBouncer error
		{errors.New("conn closed"), true},
		{codedError("40001"), false}, // serialization_failure: refused
		{codedError("23505"), false}, // a deferred unique constraint: refused
		{sql.ErrTxDone, false},       // database/sql rolled back first
	} {
		err := commitError("x", tc.err)
		if got := errors.Is(err, ErrCommitUnknown); got != tc.unknown {
			t.Errorf("commitError(%v) = %v: matches ErrCommitUnknown %v, want %v", tc.err, err, got, tc.unknown)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("commitError(%v) = %v does not wrap the driver's error", tc.err, err)
		}
	}
	if err := commitError("x", nil); err != nil {
		t.Errorf("commitError(nil) = %v, want nil", err)
	}
}
