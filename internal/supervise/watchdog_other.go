//go:build unix && !linux

package supervise

import (
	"errors"
	"os"
	"os/exec"
	"time"
)

// HasWatchdog reports whether StartGroup starts a watchdog on this
// platform. Without one, only the supervisor enforces deadlines.
const HasWatchdog = false

func startWatchdog(time.Time) (*exec.Cmd, *os.File, error) {
	return nil, nil, errors.ErrUnsupported
}

func writeDeadline(*os.File, time.Time) error { return errors.ErrUnsupported }

func (w *watchdog) exited() bool { return false }
