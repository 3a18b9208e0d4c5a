// Package procstat reads another process's CPU time from /proc, for the
// reports that show what a store server spent.
package procstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU returns the CPU time (user+system) used so far by the process whose
// command line contains match (not this process), or -1 if there is none
// or it cannot tell (not Linux).
func CPU(match string) time.Duration {
	if match == "" {
		return -1
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmd), match) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			return -1
		}
		f := strings.Fields(string(st)[strings.LastIndex(string(st), ")")+2:])
		if len(f) < 13 {
			return -1
		}
		user, _ := strconv.Atoi(f[11])
		sys, _ := strconv.Atoi(f[12])
		return time.Duration(user+sys) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	return -1
}
