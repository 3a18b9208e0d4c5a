package schedule

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/fence"
)

// A Ledger is the durable record of the slots that are done. The scheduler
// asks Done after it has acquired a slot's lock and before it runs the job,
// and calls Record after the job returned nil, still holding the lock (see
// the package documentation for what happens when Record fails).
//
// The baton Backend seam stores locks, not data, so the ledger is a store
// of its own: MemoryLedger for one process, FileLedger for one machine,
// RunLogLedger for a PostgreSQL database (fence.RunLog). The at-most-once
// guarantee lasts as long as the ledger keeps its records: a slot whose
// record is lost can run again on a replica that reaches it after its lock
// was released (see LockAtLeastFor).
//
// Slots are whole seconds; implementations may ignore sub-second parts.
// Methods must be safe for concurrent use, by many processes where the
// ledger is shared.
type Ledger interface {
	// Done reports whether job's slot has been recorded as done. An error
	// means "unknown": the scheduler then does not run the slot.
	Done(ctx context.Context, job string, slot time.Time) (bool, error)
	// Record records job's slot as done by the holder of the slot lock's
	// fencing token token. It must be durable when it returns nil, and
	// idempotent: recording a slot already recorded returns nil and may
	// keep the first record.
	Record(ctx context.Context, job string, slot time.Time, token uint64) error
}

// MemoryLedger is a Ledger in the memory of one process, for tests,
// examples and replicas that are goroutines of one process. Its records end
// with the process, and it keeps every record until then: it has no
// pruning, so its memory grows with every slot run. The zero value is not
// usable; call NewMemoryLedger.
type MemoryLedger struct {
	mu   sync.Mutex
	done map[memKey]uint64
}

type memKey struct {
	job  string
	slot int64 // Unix seconds
}

// NewMemoryLedger returns an empty MemoryLedger.
func NewMemoryLedger() *MemoryLedger { return &MemoryLedger{done: make(map[memKey]uint64)} }

// Done implements Ledger.
func (l *MemoryLedger) Done(ctx context.Context, job string, slot time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("schedule: ledger: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.done[memKey{job, slot.Unix()}]
	return ok, nil
}

// Record implements Ledger. The first record of a slot is kept.
func (l *MemoryLedger) Record(ctx context.Context, job string, slot time.Time, token uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("schedule: ledger: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := memKey{job, slot.Unix()}
	if _, ok := l.done[k]; !ok {
		l.done[k] = token
	}
	return nil
}

// Token returns the fencing token recorded for job's slot, and whether the
// slot is recorded at all.
func (l *MemoryLedger) Token(job string, slot time.Time) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.done[memKey{job, slot.Unix()}]
	return t, ok
}

// Forget deletes job's slot record, as if the ledger had lost it. It is for
// tests and for an administrator who wants a slot to run again.
func (l *MemoryLedger) Forget(job string, slot time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.done, memKey{job, slot.Unix()})
}

// RunLogLedger is a Ledger on a fence.RunLog: a PostgreSQL table with one
// row per job and slot. Replicas on any number of machines can share it.
//
// The RunLog table has no token column, so the token given to Record is
// not stored.
//
// A job can do better than recording after the fact: doing its database
// work inside RunLog.Exec(ctx, run.Job, run.Slot, ...) claims the slot in
// the same transaction as the work, so the work commits at most once per
// slot even if two holders ever ran the job (one paused past its lease).
// The scheduler's Record then finds the slot claimed, which is not an
// error.
type RunLogLedger struct {
	runs *fence.RunLog
}

// NewRunLogLedger returns a Ledger that keeps its records in runs. Call
// runs.Ensure once to create the table.
func NewRunLogLedger(runs *fence.RunLog) (*RunLogLedger, error) {
	if runs == nil {
		return nil, fmt.Errorf("schedule: NewRunLogLedger: nil *fence.RunLog")
	}
	return &RunLogLedger{runs: runs}, nil
}

// Done implements Ledger with RunLog.Done.
func (l *RunLogLedger) Done(ctx context.Context, job string, slot time.Time) (bool, error) {
	done, err := l.runs.Done(ctx, job, slot)
	if err != nil {
		return false, fmt.Errorf("schedule: ledger: %w", err)
	}
	return done, nil
}

// Record implements Ledger: it claims the slot in a transaction of its own
// and commits. A slot already claimed is not an error.
func (l *RunLogLedger) Record(ctx context.Context, job string, slot time.Time, _ uint64) error {
	if _, err := l.runs.Exec(ctx, job, slot, func(*sql.Tx) error { return nil }); err != nil {
		return fmt.Errorf("schedule: ledger: %w", err)
	}
	return nil
}
