package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FileLedger is a Ledger in a directory of the local file system, for
// replicas on one machine (the same machine as a file backend's
// directory). It survives restarts of the processes and of the machine.
//
// A record is the file DIR/JOB/20261130t030000z.done holding one line of
// JSON (job, slot, token, recorded_at). Record writes it to a temporary
// file, fsyncs it, hard-links it to its name (which fails if a record
// exists, so the first record is kept), removes the temporary name and
// fsyncs the directory: a crash leaves the record whole or absent, never
// torn. Done only checks that the file exists.
//
// Records stay until Prune removes them (a slot whose record is removed
// may run again on a replica that reaches it later, see LockAtLeastFor and
// CatchUp). Do not put the directory on a network file system.
type FileLedger struct {
	dir string
}

// NewFileLedger returns a FileLedger on dir, creating it with mode 0o700 if
// it does not exist. It fails if it cannot create a file in dir.
func NewFileLedger(dir string) (*FileLedger, error) {
	if dir == "" {
		return nil, errors.New("schedule: NewFileLedger: directory is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("schedule: ledger directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("schedule: creating ledger directory: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("schedule: ledger directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("schedule: ledger directory %s is not a directory", abs)
	}
	// Check writability by writing (permission bits do not tell about
	// read-only mounts, ACLs or root): a ledger that cannot record lets
	// every slot run and then fail to be recorded, open to a second run.
	probe, err := os.CreateTemp(abs, ".tmp-probe-*")
	if err != nil {
		return nil, fmt.Errorf("schedule: ledger directory %s is not writable by this process (uid %d): %w; "+
			"give this process write access to it, or use a directory on a writable local file system", abs, os.Geteuid(), err)
	}
	_ = probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return nil, fmt.Errorf("schedule: ledger directory %s: removing probe file: %w", abs, err)
	}
	return &FileLedger{dir: abs}, nil
}

// Dir returns the ledger's directory.
func (l *FileLedger) Dir() string { return l.dir }

func (l *FileLedger) path(job string, slot time.Time) (string, error) {
	if err := validateJobName(job); err != nil {
		return "", err
	}
	return filepath.Join(l.dir, job, slotID(slot)+".done"), nil
}

// Done implements Ledger.
func (l *FileLedger) Done(ctx context.Context, job string, slot time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("schedule: ledger: %w", err)
	}
	p, err := l.path(job, slot)
	if err != nil {
		return false, err
	}
	switch _, err := os.Stat(p); {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("schedule: ledger: %w", err)
	}
}

type fileRecord struct {
	Job        string    `json:"job"`
	Slot       time.Time `json:"slot"`
	Token      uint64    `json:"token"`
	RecordedAt time.Time `json:"recorded_at"`
}

// Record implements Ledger. A slot already recorded keeps its first record.
func (l *FileLedger) Record(ctx context.Context, job string, slot time.Time, token uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("schedule: ledger: %w", err)
	}
	p, err := l.path(job, slot)
	if err != nil {
		return err
	}
	if err := l.record(p, job, slot, token); err != nil {
		return fmt.Errorf("schedule: ledger: record %s: %w", p, err)
	}
	return nil
}

func (l *FileLedger) record(p, job string, slot time.Time, token uint64) error {
	jobDir := filepath.Dir(p)
	if _, err := os.Stat(jobDir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(jobDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := syncDir(l.dir); err != nil {
			return err
		}
	}
	data, err := json.Marshal(fileRecord{Job: job, Slot: slot.UTC().Truncate(time.Second), Token: token, RecordedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(jobDir, ".tmp-*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after the link, only the temporary name goes
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmpName, p); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(jobDir)
}

// Prune removes job's records of slots before before, and reports how
// many it removed. Keep the records of every slot a replica could still
// attempt: at least the CatchUp window, plus the clock skew between
// replicas.
func (l *FileLedger) Prune(ctx context.Context, job string, before time.Time) (int, error) {
	if err := validateJobName(job); err != nil {
		return 0, err
	}
	jobDir := filepath.Join(l.dir, job)
	entries, err := os.ReadDir(jobDir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("schedule: ledger: prune: %w", err)
	}
	n := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("schedule: ledger: prune: %w", err)
		}
		name, ok := strings.CutSuffix(e.Name(), ".done")
		if !ok {
			continue
		}
		slot, err := time.Parse("20060102t150405z", name)
		if err != nil || !slot.Before(before) {
			continue
		}
		if err := os.Remove(filepath.Join(jobDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("schedule: ledger: prune: %w", err)
		}
		n++
	}
	if n > 0 {
		if err := syncDir(jobDir); err != nil {
			return n, fmt.Errorf("schedule: ledger: prune: %w", err)
		}
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
