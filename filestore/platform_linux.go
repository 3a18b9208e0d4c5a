package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/baton-go/baton/backend"
)

// machineNow reads CLOCK_MONOTONIC as the machine's initial time namespace
// counts it: shared by every process on the machine, never stepped, and,
// but for a constant offset, the clock the Go runtime itself uses for
// timers and for the monotonic reading of time.Now, so the store and the
// lock engine measure a lease alike. It stops during suspend, for every
// process alike. A process in a time namespace of its own (unshare --time,
// a container restored by CRIU) reads CLOCK_MONOTONIC shifted by its
// namespace's offset, which is subtracted here, so that a reading written
// into a record by one namespace means the same moment in every other.
// The offset is read at every call: a restored process may be in another
// namespace than before its checkpoint.
func machineNow() (int64, error) {
	off, err := monotonicOffset()
	if err != nil {
		return 0, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("file: reading CLOCK_MONOTONIC: %w", err)
	}
	return ts.Nano() - off, nil
}

const timensPath = "/proc/self/timens_offsets"

// monotonicOffset returns how far this process's time namespace shifts
// CLOCK_MONOTONIC from the initial namespace's, in nanoseconds: 0 outside
// a time namespace and on kernels without them (no timens_offsets file).
func monotonicOffset() (int64, error) {
	b, err := os.ReadFile(timensPath)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat("/proc/self/stat"); serr != nil {
			return 0, fmt.Errorf("file: reading the time namespace's clock offsets: %w: %w: /proc does not show this process (another PID namespace's /proc, or none); mount this namespace's own (mount -t proc proc /proc)", backend.ErrMisconfigured, serr)
		}
		return 0, nil // a kernel without time namespaces
	}
	if err != nil {
		return 0, fmt.Errorf("file: reading the time namespace's clock offsets: %w", err)
	}
	return parseMonotonicOffset(string(b))
}

// parseMonotonicOffset reads the monotonic line of a timens_offsets file:
// "monotonic SECONDS NANOSECONDS" (see time_namespaces(7)).
func parseMonotonicOffset(s string) (int64, error) {
	const perSec = int64(time.Second)
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "monotonic" {
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || sec > math.MaxInt64/perSec-1 || sec < math.MinInt64/perSec+1 || nsec < 0 || nsec >= perSec {
			break
		}
		return sec*perSec + nsec, nil
	}
	return 0, fmt.Errorf("file: unexpected contents of %s: %q", timensPath, s)
}

const bootIDPath = "/proc/sys/kernel/random/boot_id"

// readBootID returns the kernel's random ID for the current boot.
func readBootID() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("file: reading the boot ID: %w: %w: /proc is not mounted here (a chroot or sandbox without it); mount it (mount -t proc proc /proc)", backend.ErrMisconfigured, err)
	}
	if err != nil {
		return "", fmt.Errorf("file: reading the boot ID: %w", err)
	}
	id := string(bytes.TrimSpace(b))
	if id == "" || len(id) > maxBootIDLen {
		return "", fmt.Errorf("file: unexpected boot ID %q in %s", id, bootIDPath)
	}
	return id, nil
}

// bootIDMounted reports whether a file is mounted over the boot ID in
// this process's mount namespace: systemd-nspawn and LXC (LXD, Incus)
// give each container a random boot ID so, and the kernel's is then out
// of reach. False if /proc/self/mountinfo cannot be read.
func bootIDMounted() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return err == nil && mountedAt(string(b), bootIDPath)
}

// mountedAt reports whether mountinfo (the contents of a
// /proc/PID/mountinfo file: see proc_pid_mountinfo(5)) lists a mount whose
// mount point is path, which has none of the characters (space, tab,
// newline, backslash) that mountinfo escapes.
func mountedAt(mountinfo, path string) bool {
	for line := range strings.Lines(mountinfo) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// outsideUID returns the user ID outside this process's user namespace
// that uid (of this namespace) stands for, and whether this process is in
// a user namespace other than the machine's initial one (rootless Podman,
// Docker with userns-remap, unshare --user): there uid 0 is not root and
// may be refused files that root could open. False if /proc/self/uid_map
// cannot be read or shows the initial namespace's identity map.
func outsideUID(uid int) (int, bool) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return 0, false
	}
	return parseUIDMap(string(b), uid)
}

// parseUIDMap reads a uid_map (lines of "INSIDE OUTSIDE COUNT": see
// user_namespaces(7)) for outsideUID.
func parseUIDMap(m string, uid int) (int, bool) {
	for line := range strings.Lines(m) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.ParseInt(f[0], 10, 64)
		out, err2 := strconv.ParseInt(f[1], 10, 64)
		n, err3 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return 0, false
		}
		if in == 0 && out == 0 && n == math.MaxUint32 {
			return 0, false // the initial namespace
		}
		if int64(uid) >= in && int64(uid)-in < n {
			return int(out + int64(uid) - in), true
		}
	}
	return 0, false
}
