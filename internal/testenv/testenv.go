// Package testenv starts real store processes for tests: redis-server today.
//
// Tests use real stores (see DESIGN.md). A helper that cannot start its store
// fails the test when the environment variable CI is "true" (CI must never
// skip a backend's tests silently) and skips it otherwise, naming the command
// that installs what is missing.
package testenv

import (
	"os"
	"strconv"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true or CI=1), where a store
// that cannot be started fails the test instead of skipping it.
func InCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// unavailable fails the test in CI and skips it elsewhere.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("testenv: "+format+" (CI=true: a store that cannot start fails the test)", args...)
	}
	t.Skipf("testenv: "+format, args...)
}
