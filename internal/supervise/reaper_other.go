//go:build unix && !linux

package supervise

import (
	"errors"
	"time"
)

// BecomeSubreaper is not supported on this platform: orphans go to init.
func BecomeSubreaper() error { return errors.ErrUnsupported }

// ReapOrphans does nothing on this platform.
func ReapOrphans() int { return 0 }

// KillOrphans does nothing on this platform.
func KillOrphans(time.Duration) int { return 0 }
