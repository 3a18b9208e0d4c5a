package filestore

import (
	"bytes"
	"fmt"
	"os"

	"github.com/baton-go/baton/backend"
)

// The lock file NAME.lock also keeps a copy of the record, the guard,
// which write puts there just before the record itself (so the guard is
// never behind the record). rm NAME.json leaves the lock file (removing it
// without its flock would break the flock protocol for every process;
// Remove deletes it only with the record, under its flock, and only when
// no claim is live), so a Store that finds
// the record missing still sees the last claim, even one it never saw in
// the record (a process started after the deletion), and does not acquire
// before that claim has expired on the machine's monotonic clock.
//
// The guard is written in place (one pwrite, padded with spaces to a
// multiple of guardBlock, so a new guard normally covers the old one
// whole) and without fsync: after a crash of the machine every claim has
// ended anyway (claims name the boot they were made in), and a process
// that dies mid-write is the claim's holder, whose work died with it. A
// guard that does not decode (an empty lock file, as an older version
// leaves it; a torn write) is ignored, which leaves the rules of seen.go.
const guardBlock = 1 << 10

// writeGuard writes r to p's lock file as its guard.
func (s *Store) writeGuard(p paths, r *record) error {
	enc := r.encode()
	buf := bytes.Repeat([]byte{' '}, (len(enc)+guardBlock-1)/guardBlock*guardBlock)
	copy(buf, enc)
	f, err := openFile(p.lock, os.O_WRONLY)
	if err != nil {
		return fmt.Errorf("file: writing the guard of lock %q: %w", r.key, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("file: writing the guard of lock %q: %w", r.key, err)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > int64(len(buf)) {
		if err := f.Truncate(int64(len(buf))); err != nil {
			return fmt.Errorf("file: writing the guard of lock %q: %w", r.key, err)
		}
	}
	return nil
}

// readGuard returns the claim kept in p's lock file for key, or nil if
// there is none that decodes.
func (s *Store) readGuard(p paths, key string) *record {
	data, err := readFile(p.lock)
	if err != nil {
		return nil
	}
	data = bytes.TrimRight(data, " ")
	if len(data) == 0 {
		return nil
	}
	r, err := decodeRecord(data)
	if err != nil || r.key != key {
		return nil
	}
	return &r
}

// guardHeld returns a *backend.HeldError if key's guard holds a claim that
// is live at machine time now (the record is missing: someone deleted
// it), else nil.
func (s *Store) guardHeld(p paths, key string, now int64) *backend.HeldError {
	if g := s.readGuard(p, key); g != nil {
		return g.held(now, s.bootID)
	}
	return nil
}

// freeGuard frees the claim of g kept in p's guard, if it is still g's
// (the record is missing: someone deleted it under g's holder, whose
// release says its work has stopped). A failure only makes others wait
// for the claim to expire, so it is not reported.
func (s *Store) freeGuard(p paths, g backend.Grant) {
	gd := s.readGuard(p, g.Key)
	if gd == nil || !gd.owns(g.Holder, g.Nonce) || gd.token != g.Token {
		return
	}
	r := free(*gd)
	_ = s.writeGuard(p, &r)
}
