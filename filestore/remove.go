package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Removing a lock deletes its three files, so its epoch file no longer
// keeps its fencing counter. The directory keeps one instead: the floor,
// the largest token of every lock removed from it, in the file
// .baton-removed (a line of JSON such as {"version":1,"token":42}). A
// record created from nothing starts above the floor (see createToken),
// so a removed lock's tokens go on increasing; other locks created after
// a removal start above it too, which costs nothing (tokens only have to
// increase per lock).
//
// Removals of different locks update the floor under the flock of
// .baton-removed.lock, which is never removed, and write it durably
// (temporary file .baton-removed.tmp, fsync, rename, directory fsync)
// before deleting anything. Readers take no lock: the floor only grows,
// and a lock's files are deleted under its own flock after the floor is
// written, so whoever creates the lock again (under its flock) reads the
// new floor. No lock name starts with a dot, so these names are the
// store's own, and List, which reads only records, skips them.
//
// A lock file is deleted last, while its flock is held; a process that
// opened it before and waits for its flock finds, once it has it, that the
// path no longer names the file it locked, and opens the path again (see
// Store.lock).
const (
	floorName   = ".baton-removed"
	floorLock   = ".baton-removed.lock"
	floorTemp   = ".baton-removed.tmp"
	floorMaxLen = 1 << 10 // bytes of a floor file
)

// floorFile is the content of the floor file.
type floorFile struct {
	Version int    `json:"version"`
	Token   uint64 `json:"token"`
}

// Remove implements backend.Remover: it deletes key's record, epoch file
// and lock file, under the lock file's flock, if the record holds no live
// claim; the fencing counter carries on above the directory's floor (the
// largest token of every lock removed from the directory). A claim that
// has expired on the machine's monotonic clock counts as ended, since
// every process on the machine judges it alike, even if its holder never
// released it. A live claim, or one kept only in the guard of a deleted
// record (see Deleted records in the package documentation), gives a
// *backend.HeldError. If the record is missing (deleted by hand, or a
// removal cut short by a crash), the guard stands for it. Remove returns
// nil if the lock has no lock file (it was removed already, or never
// created), and nil leaving the files if neither record nor guard can be
// read (a lock file written by a version of this package before guards,
// whose record was deleted: its epoch file alone keeps its counter).
//
// Every process that uses the directory must run a version of this
// package that has Remove (and so checks, after taking a lock file's
// flock, that the file was not removed): an older one could lock a
// removed file while another process locks its successor.
func (s *Store) Remove(ctx context.Context, key string) error {
	if err := s.checkWrite(ctx, key); err != nil {
		return err
	}
	if err := s.checkForeign(key); err != nil {
		return err
	}
	return fsError(s.remove(ctx, key), s.dir)
}

func (s *Store) remove(ctx context.Context, key string) error {
	p := s.paths(key)
	h, err := s.lock(ctx, p.lock, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // never created, or removed already
	}
	if err != nil {
		return fmt.Errorf("file: lock %q: %w", key, err)
	}
	defer h.close()
	_, r, err := s.read(key, p.record)
	if err != nil {
		return err
	}
	now, err := s.now()
	if err != nil {
		return err
	}
	g := s.readGuard(p, key) // written before the record: never behind it
	if r == nil {
		r = g // deleted by hand, or a removal cut short
	}
	if r == nil {
		return nil // no record and no guard: the files keep the counter
	}
	if held := r.held(now, s.bootID); held != nil {
		return held
	}
	top := r.token
	if g != nil {
		top = max(top, g.token)
	}
	if err := s.raiseFloor(ctx, top); err != nil {
		return fmt.Errorf("file: removing lock %q: %w", key, err)
	}
	// The epoch file first and the lock file last: a crash in between
	// leaves a record that the next acquisition continues, or only a lock
	// file.
	for _, path := range []string{p.epoch, p.record, p.lock} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file: removing lock %q: %w", key, err)
		}
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("file: removing lock %q: %w", key, err)
	}
	s.seen.forget(key)
	return nil
}

// raiseFloor makes the directory's floor at least token, durably.
func (s *Store) raiseFloor(ctx context.Context, token uint64) error {
	h, err := s.lock(ctx, filepath.Join(s.dir, floorLock), true)
	if err != nil {
		return err
	}
	defer h.close()
	floor, err := s.readFloor()
	if err != nil || floor >= token {
		return err
	}
	b, _ := json.Marshal(floorFile{Version: recordVersion, Token: token}) // integers only
	if err := s.replace(filepath.Join(s.dir, floorTemp), filepath.Join(s.dir, floorName), append(b, '\n')); err != nil {
		return fmt.Errorf("writing the floor of removed locks: %w", err)
	}
	return nil
}

// readFloor returns the directory's floor: 0 if no lock was removed. A
// floor file that does not decode strictly is corrupt, and never
// overwritten: that could make a removed lock's tokens repeat.
func (s *Store) readFloor() (uint64, error) {
	path := filepath.Join(s.dir, floorName)
	data, err := readLimited(path, floorMaxLen)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("file: reading the floor of removed locks: %w", err)
	}
	var w struct {
		Version *int    `json:"version"`
		Token   *uint64 `json:"token"`
	}
	err = decodeStrict(data, floorMaxLen, "floor", &w)
	switch {
	case err != nil:
	case w.Version == nil || w.Token == nil:
		err = corrupt("a floor file needs the fields version and token")
	case *w.Version != recordVersion:
		err = formatVersion("floor file", int64(*w.Version))
	}
	if errors.Is(err, errNewerFormat) {
		return 0, fmt.Errorf("file: %s: %w", path, err)
	}
	if err != nil {
		return 0, fmt.Errorf(`file: %s: %w; it keeps the largest fencing token of the locks removed from %s: write it again as {"version":1,"token":N}, N at least the largest token that the resources these locks protect have seen (deleting it lets removed locks' tokens start again at 1)`, path, err, s.dir)
	}
	return *w.Token, nil
}
