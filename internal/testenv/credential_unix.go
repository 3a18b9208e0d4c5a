//go:build unix

package testenv

import (
	"os/exec"
	"syscall"
)

// setCredential makes cmd run as uid:gid, with no supplementary groups. It
// keeps whatever else SysProcAttr holds (such as the parent-death signal,
// which Linux sets after switching credentials).
func setCredential(cmd *exec.Cmd, uid, gid uint32) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
}
