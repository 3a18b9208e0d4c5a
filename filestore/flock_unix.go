//go:build linux || darwin

package filestore

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// lockHandle is an open lock file. Closing it drops the flock.
type lockHandle int

// openLockFile opens (creating if needed) the lock file at path. Reading is
// enough for flock; the file is never written.
func openLockFile(path string, perm fs.FileMode) (lockHandle, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC, uint32(perm.Perm()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return lockHandle(fd), nil
	}
}

// tryLock takes an exclusive flock without blocking. It reports false if
// another open file description holds it.
func (h lockHandle) tryLock() (bool, error) {
	for {
		err := unix.Flock(int(h), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		default:
			return false, err
		}
	}
}

// close drops the flock (if held) with the file.
func (h lockHandle) close() { _ = unix.Close(int(h)) }
