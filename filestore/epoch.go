package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// A fencing token is epoch<<epochShift | n. The epoch of a lock is kept in
// its companion file NAME.epoch, apart from the record. It is written only
// when the record has to be created (the record file is missing: the
// lock's first acquisition, or someone deleted the record), when n would
// overflow, and once for a record that has no epoch file (one written
// before epoch files existed, or whose epoch file was deleted). Every
// other acquisition increments n in the record alone, so the counter costs
// no extra write (and no fsync) in the common case, and deleting NAME.json
// cannot make a token repeat: the next record starts in a larger epoch.
//
// The first record of a lock (no epoch file) is in epoch 0, so its tokens
// are 1, 2, ... as before epoch files existed (unless locks were removed
// from the directory: then it starts above their floor, see remove.go);
// records written before then continue likewise.
const (
	epochShift = 40
	nMask      = 1<<epochShift - 1
	maxEpoch   = 1<<(64-epochShift) - 1
	epochLen   = 1 << 10 // bytes of an epoch file
)

// epochFile is the content of NAME.epoch: one JSON object on one line.
type epochFile struct {
	Version int    `json:"version"`
	Key     string `json:"key"`
	Epoch   uint64 `json:"epoch"`
}

// firstToken returns the first token of epoch e.
func firstToken(e uint64) uint64 { return e<<epochShift | 1 }

// nextToken returns the token after old if it stays in old's epoch.
func nextToken(old uint64) (uint64, bool) {
	if old&nMask == nMask {
		return 0, false
	}
	return old + 1, true
}

// createToken returns the first token of key's record, which is missing
// (the lock's first acquisition, or the record was removed or deleted), and
// writes its epoch to key's epoch file durably (temporary file, fsync,
// rename, directory fsync) before the caller writes a record with that
// token, so the epoch file is never behind a record on disk, even after a
// crash. The token is in the epoch after the epoch file's, if there is one
// (the record was deleted), and above the directory's floor, if locks were
// removed (see remove.go); else it is 1. The caller holds the key's file
// lock.
func (s *Store) createToken(p paths, key string) (uint64, error) {
	cur, found, err := readEpoch(key, p.epoch)
	if err != nil {
		return 0, err
	}
	floor, err := s.readFloor()
	if err != nil {
		return 0, err
	}
	t := firstToken(0)
	if found {
		if cur == maxEpoch {
			return 0, exhausted(key, p, cur)
		}
		t = firstToken(cur + 1)
	}
	if floor >= t {
		if floor >= firstToken(maxEpoch) {
			return 0, fmt.Errorf("file: lock %q: the fencing counter is exhausted (the floor of removed locks is %d)", key, floor)
		}
		t = tokenAfter(floor)
	}
	return t, s.writeEpoch(p, key, t>>epochShift)
}

// tokenAfter returns the smallest token larger than t (which is below the
// last epoch's first token): t+1, or the next epoch's first token if t is
// its epoch's last.
func tokenAfter(t uint64) uint64 {
	if next, ok := nextToken(t); ok {
		return next
	}
	return firstToken(t>>epochShift + 1)
}

// nextEpoch returns the epoch after old's, for an acquisition whose token
// would pass the end of old's epoch, and writes it to key's epoch file
// durably before the caller writes a record with a token of that epoch.
// The caller holds the key's file lock.
func (s *Store) nextEpoch(p paths, key string, old *record) (uint64, error) {
	cur, _, err := readEpoch(key, p.epoch)
	if err != nil {
		return 0, err
	}
	e := max(cur, old.token>>epochShift)
	if e == maxEpoch {
		return 0, exhausted(key, p, e)
	}
	return e + 1, s.writeEpoch(p, key, e+1)
}

func exhausted(key string, p paths, e uint64) error {
	return fmt.Errorf("file: lock %q: the fencing counter is exhausted (epoch %d in %s)", key, e, p.epoch)
}

// keepEpoch writes the epoch of old's token to key's epoch file if there
// is none, so that deleting the record later cannot make tokens repeat.
// It costs a stat per acquisition and a write once per lock; without slow,
// it returns errSlowPath instead of writing.
func (s *Store) keepEpoch(p paths, key string, old *record, slow bool) error {
	_, err := os.Lstat(p.epoch)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("file: lock %q: %w", key, err)
	case !slow:
		return errSlowPath
	}
	return s.writeEpoch(p, key, old.token>>epochShift)
}

func (s *Store) writeEpoch(p paths, key string, e uint64) error {
	b, _ := json.Marshal(epochFile{Version: recordVersion, Key: key, Epoch: e}) // strings and integers only
	if err := s.replace(p.epochTemp, p.epoch, append(b, '\n')); err != nil {
		return fmt.Errorf("file: writing the epoch file of lock %q: %w", key, err)
	}
	return nil
}

// readEpoch returns the epoch in path, and whether the file exists. A file
// that does not decode strictly is corrupt: overwriting it could make tokens
// repeat.
func readEpoch(key, path string) (uint64, bool, error) {
	data, err := readLimited(path, epochLen)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("file: lock %q: %w", key, err)
	}
	e, err := decodeEpoch(key, data)
	if err != nil {
		return 0, false, fmt.Errorf("file: %s: %w", path, err)
	}
	return e, true, nil
}

// decodeEpoch parses an epoch file for key strictly. Every error matches
// backend.ErrCorruptRecord.
func decodeEpoch(key string, data []byte) (uint64, error) {
	var w struct {
		Version *int    `json:"version"`
		Key     *string `json:"key"`
		Epoch   *uint64 `json:"epoch"`
	}
	if err := decodeStrict(data, epochLen, "epoch", &w); err != nil {
		return 0, err
	}
	switch {
	case w.Version == nil || w.Key == nil || w.Epoch == nil:
		return 0, corrupt("an epoch file needs the fields version, key and epoch")
	case *w.Version != recordVersion:
		return 0, formatVersion("epoch file", int64(*w.Version))
	case *w.Key != key:
		return 0, corrupt("epoch file is for lock %q", *w.Key)
	case *w.Epoch > maxEpoch:
		return 0, corrupt("epoch %d is not in 0..%d", *w.Epoch, uint64(maxEpoch))
	}
	return *w.Epoch, nil
}

// decodeStrict decodes data, at most limit bytes, into v, which has
// pointer fields: one JSON object with no field v lacks and nothing after
// it. Every error matches backend.ErrCorruptRecord. what names the file's
// kind.
func decodeStrict(data []byte, limit int, what string, v any) error {
	if len(data) > limit {
		return corrupt("%d bytes; %s files have at most %d", len(data), what, limit)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return notJSON(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return corrupt("data after the %s object", what)
	}
	return nil
}
