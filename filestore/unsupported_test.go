//go:build !linux && !darwin

package filestore

import (
	"errors"
	"testing"
)

func helperMain() int { return 2 } // no cross-process test here

func permHelperMain(string) int { return 2 }

// permHelperEnv: see permission_test.go.
const permHelperEnv = "BATON_FILE_PERM_HELPER"

func TestNewUnsupported(t *testing.T) {
	if _, err := New(t.TempDir()); !errors.Is(err, errUnsupported) {
		t.Fatalf("New = %v, want %v", err, errUnsupported)
	}
}
