package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/baton-go/baton/backend"
)

// checkOwnDir refuses dir, the default lock directory in the temporary
// directory (a user without a home), unless it is a directory of this
// user's that no one else may write: any user may create
// /tmp/baton-<uid> first, as a directory of their own or a link to one,
// and then read, rewrite or delete this user's lock records (two holders
// at once, tokens that start again). A directory that does not exist (for
// status) is fine; lock and run have just created it.
func checkOwnDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	var why string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		why = "is a symbolic link"
	case st != nil && int(st.Uid) != os.Getuid():
		why = fmt.Sprintf("belongs to another user (uid %d)", st.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		why = fmt.Sprintf("may be written by other users (mode %v)", fi.Mode().Perm())
	default:
		return nil
	}
	return fmt.Errorf("%w: the default lock directory %s %s: this user (uid %d) has no home directory, so the default is in the temporary directory, where another user may have made it first to read or rewrite this user's locks; give a directory of this user's own with --dir or $%s (or remove %s if it is yours)",
		backend.ErrMisconfigured, dir, why, os.Getuid(), EnvDir, dir)
}
