package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestbinHint is the command that builds kube-apiserver and etcd from the Go
// module proxy into the test binary cache (tools/testbin/build.sh).
const TestbinHint = "make testbin"

// KubeAssets returns the directory holding kube-apiserver and etcd for
// controller-runtime's envtest: $KUBEBUILDER_ASSETS if set, else the
// tools/testbin cache (TestbinDir). Pass it as
// envtest.Environment.BinaryAssetsDirectory. If neither holds both binaries,
// the test fails when CI=true and is skipped otherwise, naming TestbinHint.
//
// It first kills the servers from that directory that envtest started for
// test binaries that have died since (on Linux; see reapOrphanedServers),
// and logs how many.
func KubeAssets(t testing.TB) string {
	t.Helper()
	dir, err := FindKubeAssets()
	if err != nil {
		unavailable(t, "%v", err)
	}
	if n := reapOrphanedServers(dir); n > 0 {
		t.Logf("testenv: killed %d kube-apiserver and etcd processes left running by test binaries that died", n)
	}
	return dir
}

// FindKubeAssets returns the directory KubeAssets returns, or an error that
// says where it looked and how to build the binaries.
func FindKubeAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		if err := hasKubeAssets(dir); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s: %v; build them with: %s", dir, err, TestbinHint)
		}
		return dir, nil
	}
	dir, err := TestbinDir()
	if err != nil {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is not set and %v; build kube-apiserver and etcd with: %s", err, TestbinHint)
	}
	if err := hasKubeAssets(dir); err != nil {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is not set and the test binary cache %s is not built (%v); build it with: %s", dir, err, TestbinHint)
	}
	return dir, nil
}

func hasKubeAssets(dir string) error {
	var missing []string
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if !isExecutable(filepath.Join(dir, name)) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no executable %s in %s", strings.Join(missing, " or "), dir)
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// TestbinDir returns the directory that tools/testbin/build.sh builds into
// and prints with --print-dir:
//
//	${BATON_TESTBIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/testbin}/k8s-<kube>-etcd-<etcd>
//
// with the versions pinned in tools/testbin/go.mod (k8s.io/kubernetes) and
// tools/testbin/etcd/go.mod (go.etcd.io/etcd/server/v3), found by walking up
// from the working directory (a package directory under go test). It does not
// check that the directory exists. Keep it in step with build.sh.
func TestbinDir() (string, error) {
	base := os.Getenv("BATON_TESTBIN_DIR")
	if base == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home := os.Getenv("HOME")
			if home == "" {
				return "", errors.New("neither BATON_TESTBIN_DIR, XDG_CACHE_HOME nor HOME is set")
			}
			cache = filepath.Join(home, ".cache")
		}
		base = filepath.Join(cache, "baton", "testbin")
	}
	tools, err := findTestbinSource()
	if err != nil {
		return "", err
	}
	kube, err := requiredVersion(filepath.Join(tools, "go.mod"), "k8s.io/kubernetes")
	if err != nil {
		return "", err
	}
	etcd, err := requiredVersion(filepath.Join(tools, "etcd", "go.mod"), "go.etcd.io/etcd/server/v3")
	if err != nil {
		return "", err
	}
	key := "k8s-" + strings.TrimPrefix(kube, "v") + "-etcd-" + strings.TrimPrefix(etcd, "v")
	return filepath.Join(base, key), nil
}

// findTestbinSource returns the tools/testbin directory of the repository
// holding the working directory.
func findTestbinSource() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		tools := filepath.Join(dir, "tools", "testbin")
		if _, err := os.Stat(filepath.Join(tools, "build.sh")); err == nil {
			return tools, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no tools/testbin/build.sh above %s (run the tests inside the baton repository or set KUBEBUILDER_ASSETS)", wd)
		}
		dir = parent
	}
}

// requiredVersion returns module's version in the require directives of
// the go.mod file at path, reading it the way build.sh's modver does.
func requiredVersion(path, module string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == module {
			return f[1], nil
		}
		if len(f) >= 3 && f[0] == "require" && f[1] == module {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("%s requires no %s", path, module)
}
