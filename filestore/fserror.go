package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/baton-go/baton/backend"
)

// fsError marks err, which came from the file system while using the lock
// directory dir, with the baton sentinel of its cause, and adds the fix: a
// refused permission matches backend.ErrForbidden (so the engine stops
// retrying and the CLI exits 77), a read-only file system or a file where
// a directory backend.ErrMisconfigured, a full file system or a process
// (or system) out of file descriptors backend.ErrUnavailable (retried:
// space or descriptors may be freed). Other errors, and errors already
// marked, are returned as they are.
func fsError(err error, dir string) error {
	switch {
	case err == nil, errors.Is(err, backend.ErrForbidden), errors.Is(err, backend.ErrMisconfigured), errors.Is(err, backend.ErrUnavailable):
		return err
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &markedError{err: err, mark: backend.ErrUnavailable, fix: fmt.Sprintf(
			"the file system of the lock directory %s is full (no space or no inodes left, or the user's quota reached): free space there, or use a directory on another file system", dir)}
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return &markedError{err: err, mark: backend.ErrUnavailable, fix: descriptorsFix(err)}
	case errors.Is(err, fs.ErrPermission):
		return &markedError{err: err, mark: backend.ErrForbidden, fix: permissionFix(err, dir)}
	case errors.Is(err, syscall.EROFS):
		return &markedError{err: err, mark: backend.ErrMisconfigured, fix: fmt.Sprintf(
			"the lock directory %s is on a read-only file system: use a directory on a writable local file system", dir)}
	case errors.Is(err, syscall.ENOTDIR):
		return &markedError{err: err, mark: backend.ErrMisconfigured, fix: fmt.Sprintf(
			"a file stands where the path of the lock directory %s needs a directory: name a directory, or move the file", dir)}
	}
	return err
}

// permissionFix says what to do when the file system refused err's
// operation in the lock directory dir: it names this process's user, the
// owner of the file refused, and, in a user namespace (where uid 0 is not
// root, and files of users not mapped into it show as owned by the
// overflow uid, 65534), the user this process is outside it.
func permissionFix(err error, dir string) string {
	uid, owner := os.Geteuid(), ""
	outside, inNS := outsideUID(uid)
	who := fmt.Sprintf("uid %d", uid)
	if inNS {
		who = fmt.Sprintf("uid %d in a user namespace, uid %d outside it", uid, outside)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if path, o, ok := fileOwner(pe.Path); ok && o != uid {
			owner = fmt.Sprintf(" (%s belongs to uid %d)", path, o)
			if inNS && o == overflowUID {
				owner = fmt.Sprintf(" (%s belongs to a user not mapped into this process's user namespace, shown as uid %d: map that user into the namespace, or make the files belong to uid %d)", path, o, outside)
			}
		}
	}
	return fmt.Sprintf("this process (%s) may not read or write the lock directory %s or a file in it%s: run it as the user that owns them, or give that user read and write access (for a directory shared by a group, the processes must create files group-writable: filestore.WithPermissions in Go; baton lock and run create them for their own user only)",
		who, dir, owner)
}

// overflowUID is the user ID that a user namespace shows for the owner of
// a file whose owner is not mapped into it (the kernel.overflowuid
// sysctl's default).
const overflowUID = 65534

// descriptorsFix says what to do when a process (EMFILE) or the system
// (ENFILE) has no file descriptor left to open a lock's files with: each
// operation on a lock opens its files for a moment, and a waiting lock
// keeps one inotify descriptor open.
func descriptorsFix(err error) string {
	if errors.Is(err, syscall.ENFILE) {
		return "the system has no file descriptor left (the table sized by the fs.file-max sysctl is full): close files elsewhere, or raise fs.file-max"
	}
	return "this process has reached its limit of open files (RLIMIT_NOFILE, shown by ulimit -n): raise it (ulimit -n, LimitNOFILE= in systemd), or hold fewer locks at once"
}

// mkdirError is fsError for New's failure to create the lock directory
// dir: a cause fsError does not know (a file system that allows no new
// directories, such as /proc, answers ENOENT) is a misconfiguration too.
func mkdirError(err error, dir string) error {
	m := fsError(err, dir)
	if errors.Is(m, backend.ErrForbidden) || errors.Is(m, backend.ErrMisconfigured) || errors.Is(m, backend.ErrUnavailable) {
		return m
	}
	return &markedError{err: err, mark: backend.ErrMisconfigured, fix: fmt.Sprintf(
		"the lock directory %s cannot be created there: create it by hand, or name a directory on a writable local file system", dir)}
}

// notRegular is the error for path, an entry of the lock directory that
// the store would read or write, which is kind ("a symbolic link", "a
// named pipe") instead of a regular file.
func notRegular(path, kind string) error {
	return fmt.Errorf("%w: %s is %s, not a regular file: the store opens only regular files in the lock directory (a link would have it write where the link points, a pipe would hang it); remove it, and let only the processes that share these locks write to %s",
		backend.ErrMisconfigured, path, kind, filepath.Dir(path))
}

// markedError is an error of the file system that also matches a baton
// sentinel, and says how to fix its cause.
type markedError struct {
	err, mark error
	fix       string
}

func (e *markedError) Error() string   { return e.err.Error() + "; " + e.fix }
func (e *markedError) Unwrap() []error { return []error{e.err, e.mark} }

// probeError is fsError for New's failure to create a file in the lock
// directory, which exists. A directory that answers the creation with
// ENOENT, EINVAL or EOPNOTSUPP is on a virtual file system such as procfs
// or sysfs, where no lock can ever be kept: a misconfiguration.
func probeError(err error, dir string) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP) {
		return &markedError{err: err, mark: backend.ErrMisconfigured, fix: fmt.Sprintf(
			"the file system of %s does not keep files created in it (a virtual file system, such as /proc or /sys?): use a directory on a writable local file system", dir)}
	}
	return fsError(err, dir)
}
