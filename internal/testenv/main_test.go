package testenv

import (
	"testing"

	"go.uber.org/goleak"
)

// The servers' output pumps and process waiters are goroutines; every one
// must end when its server is stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
