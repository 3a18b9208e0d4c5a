package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// envtestDirMark is in the arguments of every server envtest starts: its
// certificate and data directories are made with this prefix.
const envtestDirMark = "k8s_test_framework_"

// reapOrphanedServers kills the kube-apiserver and etcd processes from
// assets that envtest started for a test binary that has died, and returns
// how many it signalled. envtest starts them in a process group of their
// own and with no parent-death signal, so a test binary stopped by ^C, by
// go test's -timeout or by kill leaves them running: orphans (parent 1),
// which use ports, memory and inotify instances until the file backend's
// tests fail with "too many open files". A server whose test binary still
// runs has that binary as its parent and is never touched, nor is a
// process without envtest's directory in its arguments.
func reapOrphanedServers(assets string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isOrphanedServer(pid, assets) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// isOrphanedServer reports whether process pid runs kube-apiserver or etcd
// from assets for envtest and has been reparented to init.
func isOrphanedServer(pid int, assets string) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil || filepath.Dir(exe) != filepath.Clean(assets) {
		return false
	}
	if base := filepath.Base(exe); base != "kube-apiserver" && base != "etcd" {
		return false
	}
	if parentPID(pid) != 1 {
		return false
	}
	args, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(args, []byte(envtestDirMark))
}

// parentPID returns the parent of pid from /proc/PID/stat, or -1. The
// command name in parentheses may hold spaces, so the fields are read
// after its last ')'.
func parentPID(pid int) int {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(stat[i+1:])) // state, ppid, ...
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}
