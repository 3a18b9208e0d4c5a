package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/baton-go/baton/backend"
)

// machineNow reads CLOCK_MONOTONIC: shared by every process on the machine
// (in one time namespace), never stepped, and the clock the Go runtime
// itself uses for timers and for the monotonic reading of time.Now, so the
// store and the lock engine measure a lease on the same clock. It stops
// during suspend, for every process alike.
func machineNow() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("file: reading CLOCK_MONOTONIC: %w", err)
	}
	return ts.Nano(), nil
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
