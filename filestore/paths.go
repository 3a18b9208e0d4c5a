package filestore

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
)

// File names. For a lock NAME the store uses
//
//	NAME.lock      opened for flock, never replaced; removed only by Remove,
//	               under its flock (see remove.go); holds a copy of the
//	               record, its guard (see guard.go)
//	NAME.json      the record, replaced atomically by rename
//	NAME.json.tmp-RANDOM  the next record while it is being written (one
//	               file per write, see update.go)
//	NAME.epoch     the epoch of the fencing counter (see epoch.go); written
//	               only when the record must be created or n overflows
//	NAME.epoch.tmp the next epoch file while it is being written
//
// Lock names are at most 253 bytes (backend.MaxNameLength) but file names at
// most 255, so names longer than maxPlainBase are shortened to a prefix, a
// '~' (which no lock name contains, so shortened and plain names never
// collide) and 128 bits of the name's SHA-256. The record holds the full
// name.
const (
	lockSuffix   = ".lock"
	recordSuffix = ".json"
	tempSuffix   = ".json.tmp"
	epochSuffix  = ".epoch"
	epochTemp    = ".epoch.tmp"
	maxPlainBase = 200
	keptPrefix   = 160
)

// fileBase returns the file name stem for a valid lock name.
func fileBase(name string) string {
	if len(name) <= maxPlainBase {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:keptPrefix] + "~" + hex.EncodeToString(sum[:16])
}

type paths struct {
	lock, record, temp, epoch, epochTemp string
}

func (s *Store) paths(name string) paths {
	base := filepath.Join(s.dir, fileBase(name))
	return paths{
		lock: base + lockSuffix, record: base + recordSuffix, temp: base + tempSuffix,
		epoch: base + epochSuffix, epochTemp: base + epochTemp,
	}
}
