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
	magic := uint32(st.Type)
	if fs, ok := linuxFileSystems[magic]; ok {
		return fs, nil
	}
	return FileSystem{Type: fmt.Sprintf("0x%x", magic)}, nil
}

// linuxFileSystems are the file systems whose magic numbers fileSystemOf
// names: the shared and volatile ones, and common local ones.
var linuxFileSystems = map[uint32]FileSystem{
	unix.NFS_SUPER_MAGIC:       {Type: "nfs", Shared: true},
	unix.SMB_SUPER_MAGIC:       {Type: "smb", Shared: true},
	unix.SMB2_SUPER_MAGIC:      {Type: "smb2", Shared: true},
	unix.CIFS_SUPER_MAGIC:      {Type: "cifs", Shared: true},
	unix.V9FS_MAGIC:            {Type: "9p", Shared: true},
	unix.CEPH_SUPER_MAGIC:      {Type: "ceph", Shared: true},
	unix.AFS_SUPER_MAGIC:       {Type: "afs", Shared: true},
	unix.AFS_FS_MAGIC:          {Type: "afs", Shared: true},
	unix.CODA_SUPER_MAGIC:      {Type: "coda", Shared: true},
	unix.NCP_SUPER_MAGIC:       {Type: "ncp", Shared: true},
	unix.OCFS2_SUPER_MAGIC:     {Type: "ocfs2", Shared: true},
	unix.FUSE_SUPER_MAGIC:      {Type: "fuse", Shared: true},
	0x0bd00bd0:                 {Type: "lustre", Shared: true},
	0x01161970:                 {Type: "gfs2", Shared: true},
	unix.TMPFS_MAGIC:           {Type: "tmpfs", Volatile: true},
	unix.RAMFS_MAGIC:           {Type: "ramfs", Volatile: true},
	unix.EXT4_SUPER_MAGIC:      {Type: "ext2/3/4"},
	unix.XFS_SUPER_MAGIC:       {Type: "xfs"},
	unix.BTRFS_SUPER_MAGIC:     {Type: "btrfs"},
	unix.OVERLAYFS_SUPER_MAGIC: {Type: "overlay"},
	0x2fc12fc1:                 {Type: "zfs"},
	0xf2f52010:                 {Type: "f2fs"},
}
