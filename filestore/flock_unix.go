//go:build linux || darwin

package filestore

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// lockHandle is an open lock file. Closing it drops the flock.
type lockHandle int

// openLockFile opens the lock file at path, creating it if create is true.
// Reading is enough for flock. With create false, a missing file is an
// error matching fs.ErrNotExist.
func openLockFile(path string, perm fs.FileMode, create bool) (lockHandle, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if create {
		flags |= unix.O_CREAT
	}
	for {
		fd, err := unix.Open(path, flags, uint32(perm.Perm()))
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

// names reports whether path still names the file h has open (the same
// device and inode): false if the file was removed or replaced since h
// opened it.
func (h lockHandle) names(path string) (bool, error) {
	var open, named unix.Stat_t
	if err := noEINTR(func() error { return unix.Fstat(int(h), &open) }); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	err := noEINTR(func() error { return unix.Stat(path, &named) })
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return open.Dev == named.Dev && open.Ino == named.Ino, nil
}

// noEINTR calls f again while it fails with EINTR.
func noEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
