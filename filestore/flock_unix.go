//go:build linux || darwin

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockHandle is an open lock file. Closing it drops the flock.
type lockHandle int

// openLockFile opens the lock file at path, creating it if create is true
// with exactly the permission bits perm (see createFile). Reading is
// enough for flock. With create false, a missing file is an error matching
// fs.ErrNotExist.
func openLockFile(path string, perm fs.FileMode, create bool) (lockHandle, error) {
	for {
		if create {
			fd, err := openRegular(path, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL, perm)
			if err == nil {
				return created(fd, path, perm)
			}
			if !errors.Is(err, fs.ErrExist) {
				return -1, err
			}
		}
		fd, err := openRegular(path, unix.O_RDONLY, perm)
		if create && errors.Is(err, fs.ErrNotExist) {
			continue // removed since: create it
		}
		if err != nil {
			return -1, err
		}
		return lockHandle(fd), nil
	}
}

// created gives fd, the lock file just created at path, the mode perm,
// past the umask.
func created(fd int, path string, perm fs.FileMode) (lockHandle, error) {
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
		_ = unix.Close(fd)
		return -1, &fs.PathError{Op: "fchmod", Path: path, Err: err}
	}
	return lockHandle(fd), nil
}

// openFile is os.OpenFile (flags os.O_RDONLY or os.O_WRONLY) for a regular
// file in the lock directory; see openRegular.
func openFile(path string, flags int) (*os.File, error) {
	fd, err := openRegular(path, flags, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openRegular opens the regular file at path (creating it with perm if
// flags has O_CREAT). It follows no symbolic link and does not wait on a
// named pipe: others may write the lock directory (a group, a sticky
// directory such as /tmp), and a link planted there would have the store
// write a record into the file the link names; a pipe would hang it.
func openRegular(path string, flags int, perm fs.FileMode) (int, error) {
	var fd int
	err := noEINTR(func() (err error) {
		fd, err = unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm.Perm()))
		return err
	})
	if err != nil {
		return -1, openError(path, err)
	}
	var st unix.Stat_t
	if err := noEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		_ = unix.Close(fd)
		return -1, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if kind := fileKind(uint32(st.Mode)); kind != "" {
		_ = unix.Close(fd)
		return -1, notRegular(path, kind)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return -1, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return fd, nil
}

// openError is the error of opening path: notRegular if path is a
// symbolic link (O_NOFOLLOW's ELOOP), else a *fs.PathError.
func openError(path string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return notRegular(path, "a symbolic link")
		}
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

// fileKind names the kind of a file of mode that is not a regular file,
// and returns "" for a regular file.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "not a regular file"
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

// fileOwner returns path, or its directory if path does not exist, with
// the user ID that owns it as this process's user namespace shows it.
func fileOwner(path string) (string, int, bool) {
	for _, p := range []string{path, filepath.Dir(path)} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil {
			return p, int(st.Uid), true
		}
	}
	return "", 0, false
}

// noEINTR calls f again while it fails with EINTR.
func noEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
