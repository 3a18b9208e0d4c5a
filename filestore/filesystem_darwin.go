package filestore

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// fileSystemOf reads dir's file system type with statfs(2).
func fileSystemOf(dir string) (FileSystem, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return FileSystem{}, fmt.Errorf("file: statfs %s: %w", dir, err)
	}
	name := unix.ByteSliceToString(st.Fstypename[:])
	switch name {
	case "nfs", "smbfs", "afpfs", "webdav", "cifs", "macfuse", "osxfuse":
		return FileSystem{Type: name, Shared: true}, nil
	}
	return FileSystem{Type: name}, nil
}
