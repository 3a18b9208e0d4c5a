package filestore

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// machineNow reads CLOCK_UPTIME_RAW: shared by every process on the
// machine, never stepped, and the same clock as mach_absolute_time, which
// the Go runtime uses for timers and for the monotonic reading of time.Now,
// so the store and the lock engine measure a lease on the same clock. It
// stops while the machine sleeps, for every process alike.
func machineNow() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_UPTIME_RAW, &ts); err != nil {
		return 0, fmt.Errorf("file: reading CLOCK_UPTIME_RAW: %w", err)
	}
	return ts.Nano(), nil
}

// readBootID returns the kernel's ID for the current boot session.
func readBootID() (string, error) {
	id, err := unix.Sysctl("kern.bootsessionuuid")
	if err != nil {
		return "", fmt.Errorf("file: reading the boot ID (sysctl kern.bootsessionuuid): %w", err)
	}
	if id == "" || len(id) > maxBootIDLen {
		return "", fmt.Errorf("file: unexpected boot ID %q from sysctl kern.bootsessionuuid", id)
	}
	return id, nil
}

// bootIDMounted is false: macOS has no mount namespaces to give a process
// a boot ID of its own.
func bootIDMounted() bool { return false }

// outsideUID is false: macOS has no user namespaces.
func outsideUID(int) (int, bool) { return 0, false }
