package supervise_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNonUnixBuildSaysUnixOnly: built for a system without Unix process
// groups (Windows), the package, and with it the baton command, stops with
// a message saying it builds on Unix-like systems only, not with
// 'undefined: syscall.Kill' and the like.
func TestNonUnixBuildSaysUnixOnly(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", ".")
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("the package built for Windows; want a build error that says it builds on Unix-like systems only")
	}
	if !strings.Contains(string(out), "builds on Unix-like systems only") || strings.Contains(string(out), "undefined:") {
		t.Errorf("building for Windows printed:\n%s\nwant only the message that it builds on Unix-like systems only", out)
	}
}
