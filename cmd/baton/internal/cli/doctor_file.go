package cli

import (
	"fmt"
	"os"

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
	if err := writeProbe(fs.Dir()); err != nil {
		return check{label, resultFail, fmt.Sprintf("cannot write a file of %d bytes in %s: %v", probeSize, fs.Dir(), err),
			"free space (or inodes, or the user's quota) on that file system, or use a directory on another one (--dir, or $BATON_DIR)"}
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
	case info.Type == "overlay":
		return check{label, resultWarn, fmt.Sprintf("%s is on overlay, as a container's own root file system is: if it is one, no other container sees these locks (each container of the same image locks its own copy of the directory, and none excludes another), and they go with the container, so a new one's tokens start again from the bottom", fs.Dir()),
			"give the containers that share these locks a volume mounted at this directory (or --dir, or $BATON_DIR, naming one)"}
	}
	return check{label, resultPass, fmt.Sprintf("%s is on %s, a local file system", fs.Dir(), info.Type), ""}
}

// dirModeCheck is the file backend's row for who may write the lock
// directory: a user who may delete or rename a lock's files can free a
// held lock for a second holder, or make its tokens start again.
func dirModeCheck(st store) check {
	const label = "directory"
	fs, ok := st.(*filestore.Store)
	if !ok {
		return check{label, resultSkip, "not checked: the store could not be opened (see the store row)", ""}
	}
	fi, err := os.Stat(fs.Dir())
	if err != nil {
		return check{label, resultWarn, "cannot read the mode of the lock directory: " + err.Error(), ""}
	}
	dir, perm, fix := fs.Dir(), fi.Mode().Perm(), fmt.Sprintf("chmod o-w %s, or use a directory that only the processes sharing these locks may write (--dir, or $BATON_DIR)", fs.Dir())
	switch {
	case perm&0o002 != 0 && fi.Mode()&os.ModeSticky == 0:
		return check{label, resultFail, fmt.Sprintf("%s (mode %#o) may be written by every user of this machine: any of them may delete or replace a lock's files, freeing a held lock for a second holder or making its tokens start again", dir, perm), fix}
	case perm&0o002 != 0:
		return check{label, resultWarn, fmt.Sprintf("%s (mode %#o, sticky) may be written by every user of this machine: any of them may create a lock's files first, and so hold the lock up or refuse this user", dir, perm|0o1000), fix}
	case perm&0o020 != 0:
		return check{label, resultPass, fmt.Sprintf("%s (mode %#o): only its owner and group may write it", dir, perm), ""}
	}
	return check{label, resultPass, fmt.Sprintf("%s (mode %#o): only its owner may write it", dir, perm), ""}
}

// bootIDCheck is the file backend's row for the boot ID that claims carry:
// a container that shows one of its own (systemd-nspawn, LXC) and the
// processes outside it count each other's claims as expired.
func bootIDCheck(st store) check {
	const label = "boot ID"
	fs, ok := st.(*filestore.Store)
	if !ok {
		return check{label, resultSkip, "not checked: the store could not be opened (see the store row)", ""}
	}
	if fs.ContainerBootID() {
		return check{label, resultWarn, "this process sees a boot ID of its own, mounted over /proc/sys/kernel/random/boot_id (systemd-nspawn and LXC give each container one): processes on this machine outside this container, or in another such container, that share the lock directory count this one's claims as expired and it counts theirs so, and they do not exclude each other (a process finds out, and exits 78, only if it finds its own lock taken)",
			"share the lock directory only among the processes of this container, or use --backend etcd or redis across containers"}
	}
	return check{label, resultPass, "claims carry the kernel's boot ID: every process on this machine that shares the lock directory sees the same", ""}
}

// probeSize is the size of writeProbe's file: more than a lock's files
// take (a record and its temporary copy, a 1 KiB epoch file).
const probeSize = 8 << 10

// writeProbe writes probeSize bytes to a new file in dir and removes it:
// filestore.New's probe only creates an empty file, which a full file
// system (or a user over quota) still allows.
func writeProbe(dir string) (err error) {
	f, err := os.CreateTemp(dir, ".baton-doctor-*")
	if err != nil {
		return err
	}
	defer func() {
		_ = f.Close()
		if rerr := os.Remove(f.Name()); err == nil {
			err = rerr
		}
	}()
	_, err = f.Write(make([]byte, probeSize))
	return err
}
