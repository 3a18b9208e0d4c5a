package cli

import (
	"fmt"

	"github.com/baton-go/baton/filestore"
)

// fileSystemCheck is the file backend's row for the file system of the lock
// directory: it warns about a network file system, whose users on other
// machines would not be excluded, and one in memory, where tokens restart
// after a reboot.
func fileSystemCheck(st store) check {
	const label = "file system"
	fs, ok := st.(*filestore.Store)
	if !ok {
		return check{label, resultSkip, "not checked: the store could not be opened (see the store row)", ""}
	}
	info, err := fs.FileSystem()
	switch {
	case err != nil:
		return check{label, resultWarn, "cannot tell what file system the lock directory is on: " + err.Error(), "keep the lock directory on a local, persistent file system"}
	case info.Shared:
		return check{label, resultWarn, fmt.Sprintf("%s is on %s, a network file system: processes on other machines that use it are not excluded by processes here (each machine counts the others' claims as expired; a process here stops, exit 78, only once it finds its own lock taken by one)", fs.Dir(), info.Type),
			"keep every process that shares this lock directory on this machine, or use a backend made for several machines (--backend lease, etcd or redis)"}
	case info.Volatile:
		return check{label, resultWarn, fmt.Sprintf("%s is on %s, in memory: a reboot loses the fencing counters, so tokens start again from the bottom", fs.Dir(), info.Type),
			"use a directory on a persistent file system (--dir, or $BATON_DIR): the default under /var/lib or ~/.local/state is one"}
	}
	return check{label, resultPass, fmt.Sprintf("%s is on %s, a local file system", fs.Dir(), info.Type), ""}
}
