package testenv

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// envIdle makes the test binary block instead of running tests: the
// stand-in server of TestReapOrphanedServers.
const envIdle = "BATON_TESTENV_IDLE"

// The servers' output pumps and process waiters are goroutines; every one
// must end when its server is stopped.
func TestMain(m *testing.M) {
	if os.Getenv(envIdle) == "1" {
		select {}
	}
	goleak.VerifyTestMain(m)
}
