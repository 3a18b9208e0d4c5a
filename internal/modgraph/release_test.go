package modgraph

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// releaseVersion is the version the release test publishes the tree at. It
// is never fetched from a real proxy: the test's module cache and proxy are
// temporary directories.
const releaseVersion = "v0.999.0"

// TestInstallFromRelease follows docs/modules.md's "Versions and tags" on
// the tree: every module's baton requirements set to the release version,
// cmd/baton's replace directives dropped, and each module published in a
// file-based proxy as its tag would be. A user's
// `go install github.com/baton-go/baton/cmd/baton@VERSION` must then
// resolve: it refuses a main module whose go.mod has replace or exclude
// directives, and it needs every baton module cmd/baton requires to be
// published. -n loads every package without compiling, so the test costs
// the module loading only.
func TestInstallFromRelease(t *testing.T) {
	root := repoRoot(t)
	proxy := t.TempDir()
	for _, m := range localModules {
		publish(t, proxy, root, m)
	}
	env := []string{
		// The tree's other dependencies come from the module cache's
		// download directory, a proxy layout, when it has them.
		"GOPROXY=file://" + proxy + ",file://" + filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download") + "," + goEnv(t, "GOPROXY"),
		"GOMODCACHE=" + t.TempDir(),
		"GOFLAGS=-modcacherw",
		// baton's modules come from the file proxy, never from GitHub,
		// and have no checksum database entry.
		"GOPRIVATE=", "GONOPROXY=", "GONOSUMDB=github.com/baton-go",
		"GOBIN=" + t.TempDir(),
		"GOWORK=off",
	}
	cmd := exec.Command(goBin(), "install", "-n", "github.com/baton-go/baton/cmd/baton@"+releaseVersion)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install github.com/baton-go/baton/cmd/baton@%s from the release docs/modules.md describes: %v\n%s",
			releaseVersion, err, lastLines(string(out), 20))
	}
}

// publish writes the module in directory m of root into the file-based
// proxy at releaseVersion: its go.mod as the release sets it, and a zip of
// the files git tracks in the module (a sub-directory with a go.mod of its
// own belongs to another module).
func publish(t *testing.T, proxy, root, m string) {
	t.Helper()
	path := strings.TrimSuffix("github.com/baton-go/baton/"+m, "/")
	dir := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := releaseGoMod(t, filepath.Join(root, m, "go.mod"), m == "cmd/baton")
	write(t, filepath.Join(dir, "list"), releaseVersion+"\n")
	write(t, filepath.Join(dir, releaseVersion+".info"), `{"Version":"`+releaseVersion+`"}`)
	write(t, filepath.Join(dir, releaseVersion+".mod"), gomod)
	f, err := os.Create(filepath.Join(dir, releaseVersion+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	prefix := path + "@" + releaseVersion + "/"
	for _, name := range moduleFiles(t, filepath.Join(root, m)) {
		data := []byte(gomod)
		if name != "go.mod" {
			if data, err = os.ReadFile(filepath.Join(root, m, name)); err != nil {
				t.Fatal(err)
			}
		}
		w, err := zw.Create(prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// releaseGoMod returns the go.mod at file as the release commits it: each
// baton module it requires at releaseVersion and, if dropReplace, without
// its replace directives.
func releaseGoMod(t *testing.T, file string, dropReplace bool) string {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "go.mod")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	write(t, tmp, string(data))
	var mod struct {
		Require []struct{ Path string }
		Replace []struct {
			Old struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal([]byte(goCmd(t, filepath.Dir(tmp), "mod", "edit", "-json")), &mod); err != nil {
		t.Fatal(err)
	}
	var edits []string
	for _, r := range mod.Require {
		if strings.HasPrefix(r.Path, "github.com/baton-go/baton") {
			edits = append(edits, "-require="+r.Path+"@"+releaseVersion)
		}
	}
	for _, r := range mod.Replace {
		if dropReplace {
			edits = append(edits, "-dropreplace="+strings.TrimSuffix(r.Old.Path+"@"+r.Old.Version, "@"))
		}
	}
	if len(edits) > 0 {
		goCmd(t, filepath.Dir(tmp), append([]string{"mod", "edit"}, edits...)...)
	}
	out, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// moduleFiles lists the files git tracks in dir, relative to it, without
// those of nested modules: what a tag's module zip holds.
func moduleFiles(t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s (the test publishes the files git tracks, as a tag would): %v", dir, err)
	}
	var files, nested []string
	names := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	for _, name := range names {
		if d, base := filepath.Split(name); base == "go.mod" && d != "" {
			nested = append(nested, d)
		}
	}
	for _, name := range names {
		if !hasAnyPrefix(name, nested) {
			files = append(files, name)
		}
	}
	return files
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func goBin() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

func goEnv(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(goCmd(t, t.TempDir(), "env", name))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
