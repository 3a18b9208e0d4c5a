package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
)

// Every change of a record is a compare-and-swap, so that the flock is
// held for as short a time as possible: a process that is stopped while
// it holds the flock (SIGSTOP, a frozen cgroup, docker pause) blocks the
// lock for every process until it resumes or dies, and the holder's
// renewals, which are most of the writes, must not widen that window with
// disk syncs.
//
//  1. Without the flock: read the record (readers need no lock: records
//     are replaced by rename) and the machine clock, compute the next
//     record, write it to a temporary file of its own and fsync it.
//  2. Under the flock: read the record again; if it changed, or the claim
//     it holds expired in the meantime, start over. Else write the guard
//     (one pwrite, see guard.go) and rename the temporary file over the
//     record.
//  3. Without the flock: fsync the directory, then report success.
//
// So the flock covers one read, one pwrite and one rename, none of them
// synced. A change that must write more than the record (a new epoch,
// see epoch.go; the guard of a deleted record) is rare and runs wholly
// under the flock, as does a change that lost the race fastTries times.
//
// A crash between the steps leaves the old record or the new one (renamed
// only once complete and synced) and at worst a temporary file, which New
// removes once it is older than staleTemp.
const (
	fastTries = 3
	staleTemp = time.Minute
)

// errSlowPath is returned by a change that needs the flock (slow is false).
var errSlowPath = errors.New("file: the change needs the file lock")

// errChanged means the record changed between the read and the flock.
var errChanged = errors.New("file: the record changed")

// A change computes a lock's next record from old (nil: the record is
// missing) at machine time now: the record to write, nil to write nothing,
// or an error. Unless slow is true it must not write files; if it would,
// it returns errSlowPath and is called again under the file lock.
type change func(p paths, old *record, now int64, slow bool) (*record, error)

// update applies fn to key's record. It returns the record written (nil:
// none) and the machine time of the read that fn's decision was based on.
// A file system error is marked with its sentinel (fsError).
func (s *Store) update(ctx context.Context, key string, fn change) (*record, int64, error) {
	r, now, err := s.apply(ctx, key, fn)
	return r, now, fsError(err, s.dir)
}

// apply is update without the marking of file system errors.
func (s *Store) apply(ctx context.Context, key string, fn change) (*record, int64, error) {
	if err := s.checkWrite(ctx, key); err != nil {
		return nil, 0, err
	}
	p := s.paths(key)
	for range fastTries {
		r, now, err := s.swap(ctx, p, key, fn)
		switch {
		case errors.Is(err, errSlowPath):
			return s.updateLocked(ctx, p, key, fn)
		case !errors.Is(err, errChanged):
			return r, now, err
		}
	}
	return s.updateLocked(ctx, p, key, fn)
}

// checkWrite returns the error of a write to key that cannot start: an
// invalid name, a read-only store, an ended ctx.
func (s *Store) checkWrite(ctx context.Context, key string) error {
	if err := backend.ValidateName(key); err != nil {
		return fmt.Errorf("file: %w", err)
	}
	if s.readOnly {
		return fmt.Errorf("file: lock %q: %w: the store was opened read-only (filestore.ReadOnly)", key, backend.ErrForbidden)
	}
	return ctx.Err()
}

// swap is one compare-and-swap of key's record (steps 1 to 3 above).
func (s *Store) swap(ctx context.Context, p paths, key string, fn change) (*record, int64, error) {
	data, old, r, now, err := s.compute(key, p, fn, false)
	if err != nil || r == nil {
		return nil, now, err
	}
	temp, err := s.writeTemp(p, r)
	if err != nil {
		return nil, 0, err
	}
	if s.beforeSwap != nil {
		s.beforeSwap()
	}
	renamed, err := s.swapLocked(ctx, p, key, data, old, now, r, temp)
	if !renamed {
		_ = os.Remove(temp)
	}
	if err != nil {
		return nil, 0, err
	}
	if err := syncDir(s.dir); err != nil {
		return nil, 0, fmt.Errorf("file: writing the record for lock %q: %w", key, err)
	}
	return r, now, nil
}

// swapLocked is step 2: it renames temp over the record if the record is
// still data and old's claim, live or not at now, is still so.
func (s *Store) swapLocked(ctx context.Context, p paths, key string, data []byte, old *record, now int64, r *record, temp string) (bool, error) {
	h, err := s.lock(ctx, p.lock, true)
	if err != nil {
		return false, fmt.Errorf("file: lock %q: %w", key, err)
	}
	defer h.close()
	cur, err := readFile(p.record)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("file: lock %q: %w", key, err)
	}
	now2, err := s.now()
	if err != nil {
		return false, err
	}
	if !bytes.Equal(cur, data) || s.live(old, now) != s.live(old, now2) {
		return false, errChanged
	}
	if err := s.writeGuard(p, r); err != nil { // first: see guard.go
		return false, err
	}
	if err := os.Rename(temp, p.record); err != nil {
		return false, fmt.Errorf("file: writing the record for lock %q: %w", key, err)
	}
	return true, nil
}

// compute reads key's record (see read) and then the machine clock, and
// calls fn on them: it returns the record read (and its bytes), fn's next
// record and the machine time.
func (s *Store) compute(key string, p paths, fn change, slow bool) (data []byte, old, next *record, now int64, err error) {
	data, old, err = s.read(key, p.record)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	if now, err = s.now(); err != nil {
		return nil, nil, nil, 0, err
	}
	next, err = fn(p, old, now, slow)
	return data, old, next, now, err
}

// live reports whether r holds a claim that is live at machine time now.
func (s *Store) live(r *record, now int64) bool {
	return r != nil && r.holder != "" && r.remaining(now, s.bootID) > 0
}

// updateLocked applies fn to key's record wholly under the file lock.
func (s *Store) updateLocked(ctx context.Context, p paths, key string, fn change) (*record, int64, error) {
	h, err := s.lock(ctx, p.lock, true)
	if err != nil {
		return nil, 0, fmt.Errorf("file: lock %q: %w", key, err)
	}
	defer h.close()
	_, _, r, now, err := s.compute(key, p, fn, true)
	if err != nil || r == nil {
		return nil, now, err
	}
	if err := s.writeGuard(p, r); err != nil { // first: see guard.go
		return nil, 0, err
	}
	temp, err := s.writeTemp(p, r)
	if err == nil {
		if err = os.Rename(temp, p.record); err != nil {
			_ = os.Remove(temp)
		}
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("file: writing the record for lock %q: %w", key, err)
	}
	return r, now, nil
}

// writeTemp writes r to a new temporary file beside p.record, synced, and
// returns its path. Each write has a file of its own (a random suffix):
// it is written without the flock.
func (s *Store) writeTemp(p paths, r *record) (string, error) {
	temp := fmt.Sprintf("%s-%016x", p.temp, rand.Uint64())
	f, err := createFile(temp, s.perm)
	if err != nil {
		return "", fmt.Errorf("file: writing the record for lock %q: %w", r.key, err)
	}
	_, err = f.Write(r.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(temp)
		return "", fmt.Errorf("file: writing the record for lock %q: %w", r.key, err)
	}
	return temp, nil
}

// removeStaleTemps removes the temporary record files in dir older than
// staleTemp: left by a process that died between writing and renaming
// one. A process that was only stopped that long finds its file gone, and
// its change fails; nothing else depends on a temporary file. Errors are
// ignored: a file left behind is only clutter.
func removeStaleTemps(dir string, now time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() || !isTemp(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// isTemp reports whether name is a temporary record file of writeTemp:
// it ends in tempSuffix, a dash and 16 hex digits. No other file of the
// store ends so (lock names can contain the suffix, but their files end
// in .lock, .json or .epoch).
func isTemp(name string) bool {
	i := strings.LastIndex(name, tempSuffix+"-")
	if i < 0 {
		return false
	}
	hex := name[i+len(tempSuffix)+1:]
	return len(hex) == 16 && strings.Trim(hex, "0123456789abcdef") == ""
}
