package supervise

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes this process a child subreaper
// (PR_SET_CHILD_SUBREAPER): descendants orphaned by the death of their
// parent (a shell's background job after the shell exited) become its
// children instead of init's, so that ReapOrphans can reap them and
// KillOrphans can end them. As PID 1 of a container, the process is their
// parent anyway.
//
// It returns ErrForeignProc (having become a subreaper) if /proc shows
// another PID namespace than this process's, where orphans cannot be
// found: ReapOrphans and KillOrphans then do nothing.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return checkProc()
}

// checkProc returns ErrForeignProc if /proc shows another PID namespace
// than this process's (entered without mounting its own /proc): its pids,
// and so its parent pids, are not this process's numbers for them.
func checkProc() error {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return fmt.Errorf("reading /proc/self: %w", err)
	}
	if self != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("%w: /proc/self is %s, this process is %d", ErrForeignProc, self, os.Getpid())
	}
	return nil
}

// orphan is a child of this process that StartGroup did not start.
type orphan struct {
	pid, pgrp int
	zombie    bool
}

// orphansLocked lists the children of this process that came to it as a
// subreaper from a command started by StartGroup: unregistered children
// (not CMD, not a watchdog) that are in a process group StartGroup created,
// or in another session (a daemon that called setsid). As PID 1 every
// unregistered child outside this process's own group counts. Children
// the program started itself (credential plugins, test servers) stay in its
// session and are left to their exec.Cmd. The registry must be locked.
func orphansLocked() ([]orphan, error) {
	if err := checkProc(); err != nil {
		return nil, err
	}
	self, ownGroup := os.Getpid(), unix.Getpgrp()
	ownSession, err := unix.Getsid(0)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []orphan
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || registry.has(pid) {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != self || st.pgrp == ownGroup {
			continue
		}
		_, ours := registry.groups[st.pgrp]
		if ours || st.session != ownSession || self == 1 {
			out = append(out, orphan{pid: pid, pgrp: st.pgrp, zombie: st.state == 'Z'})
		}
	}
	return out, nil
}

type procStat struct {
	state               byte
	ppid, pgrp, session int
}

// readStat parses /proc/PID/stat: "pid (comm) state ppid pgrp ...", where
// comm may hold spaces and parentheses.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, errors.New("malformed stat")
	}
	var n [3]int
	for i := range n {
		if n[i], err = strconv.Atoi(string(f[i+1])); err != nil {
			return procStat{}, errors.New("malformed stat")
		}
	}
	return procStat{state: f[0][0], ppid: n[0], pgrp: n[1], session: n[2]}, nil
}

// ReapOrphans reaps the orphans (see BecomeSubreaper) that have exited, so
// that none stays a zombie, and returns how many it reaped. Call it on
// SIGCHLD. It never reaps a process started by StartGroup or one in this
// process's own process group.
func ReapOrphans() int {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	list, err := orphansLocked()
	if err != nil {
		return 0
	}
	n := 0
	for _, o := range list {
		if o.zombie && reap(o.pid) {
			n++
		}
	}
	return n
}

// KillOrphans SIGKILLs and reaps every orphan (see orphansLocked for
// which children count), repeating while killing one orphans more (its
// children come to this subreaper), at most a few rounds, each bounded by
// timeout. Call it at the end of a term, after End: then no descendant of
// the term's command outlives it, even one that left its process group for
// a session of its own. Orphans in the process group of a term still
// running (another in-process supervisor) are left alone. It returns how
// many it killed.
func KillOrphans(timeout time.Duration) int {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	killed := 0
	for round := 0; round < 8; round++ {
		list, err := orphansLocked()
		if err != nil {
			break
		}
		list = slices.DeleteFunc(list, func(o orphan) bool { return registry.has(o.pgrp) })
		if len(list) == 0 {
			break
		}
		for _, o := range list {
			if !o.zombie {
				_ = unix.Kill(o.pid, unix.SIGKILL)
				killed++
			}
		}
		for _, o := range list {
			if !o.zombie {
				_, _ = WaitExit(o.pid, timeout)
			}
			reap(o.pid)
		}
	}
	// The groups of ended terms are empty now, or hold only processes that
	// are not this process's children: forget them.
	for g := range registry.groups {
		if !registry.has(g) {
			delete(registry.groups, g)
		}
	}
	return killed
}

// reap collects the exit status of child pid if it has exited, without
// blocking. It reports whether it did.
func reap(pid int) bool {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && got == pid
	}
}
