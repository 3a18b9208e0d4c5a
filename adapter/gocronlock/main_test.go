package gocronlock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Schedulers, mutexes, electors and store clients are all stopped by the
// tests, so no goroutine may remain.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
