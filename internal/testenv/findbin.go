package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
)

// findBinary returns the path of the program name: $env if set, else the
// first found on PATH or in dirs.
func findBinary(env, name string, dirs ...string) (string, bool) {
	if p := os.Getenv(env); p != "" {
		return p, true
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, true
		}
	}
	return "", false
}
