package filestore

// FileSystem describes the file system of a lock directory, as far as the
// store's guarantees depend on it (see "One machine, local file system" in
// the package documentation).
type FileSystem struct {
	// Type names the file system (ext4, nfs, tmpfs...), or gives its
	// magic number in hex where the name is not known.
	Type string
	// Shared is true for a network or cluster file system (NFS, SMB,
	// 9p, Ceph, FUSE mounts such as sshfs): processes on other machines
	// may use the directory, and they do not exclude the processes here,
	// because each machine's claims count as another boot's, so expired,
	// on the others. Processes all on this machine are safe on it.
	Shared bool
	// Volatile is true for a file system in memory (tmpfs, ramfs): a
	// reboot loses the epoch files, so fencing tokens start again from
	// the bottom, and a protected resource that keeps the largest token
	// it saw refuses every holder's writes until they pass it.
	Volatile bool
}

// FileSystem returns the file system of the lock directory. The store does
// not refuse a shared or volatile one (all processes on one machine may
// share an NFS home directory safely); baton doctor warns about them.
func (s *Store) FileSystem() (FileSystem, error) { return fileSystemOf(s.dir) }
