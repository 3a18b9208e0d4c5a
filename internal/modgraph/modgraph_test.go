package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// localModules are the repository's modules that a consumer may reach:
// each is replaced by its directory, as a released version would be
// fetched by its tag.
var localModules = []string{
	"", "internal/testenv", "kubestore", "etcdstore", "redisstore", "fence", "batonprom", "schedule",
	"adapter/batonlock", "adapter/gocronlock", "adapter/logrbridge", "cmd/baton",
}

func TestRootOnlyConsumerGraph(t *testing.T) {
	mods := consumerGraph(t, "github.com/baton-go/baton", "github.com/baton-go/baton/memstore")
	// The consumer, baton and what the root module requires.
	if len(mods) > 5 {
		t.Errorf("a program importing only the root package has %d modules in its graph, want at most 5: %v", len(mods), mods)
	}
}

func TestRedisConsumerGraph(t *testing.T) {
	mods := consumerGraph(t, "github.com/baton-go/baton/redisstore")
	for _, heavy := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "go.etcd.io/etcd/client/v3"} {
		if slices.Contains(mods, heavy) {
			t.Errorf("a program importing redisstore has %s in its graph: %v", heavy, mods)
		}
	}
}

// consumerGraph writes a module that imports pkgs, resolves it and returns
// the module paths in its `go mod graph`, without versions.
func consumerGraph(t *testing.T, pkgs ...string) []string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	var gomod, main strings.Builder
	gomod.WriteString("module example.com/consumer\n\ngo 1.26.0\n\n")
	for _, m := range localModules {
		path := strings.TrimSuffix("github.com/baton-go/baton/"+m, "/")
		gomod.WriteString("replace " + path + " => " + filepath.Join(root, m) + "\n")
	}
	main.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		main.WriteString("\t_ \"" + p + "\"\n")
	}
	main.WriteString(")\n\nfunc main() {}\n")
	write(t, filepath.Join(dir, "go.mod"), gomod.String())
	write(t, filepath.Join(dir, "main.go"), main.String())
	goCmd(t, dir, "mod", "tidy")
	goCmd(t, dir, "build", "./...")
	seen := map[string]bool{}
	for _, line := range strings.Split(goCmd(t, dir, "mod", "graph"), "\n") {
		for _, f := range strings.Fields(line) {
			seen[strings.SplitN(f, "@", 2)[0]] = true
		}
	}
	// go@1.26.0 and toolchain@go1.26.x are the go and toolchain lines of
	// go.mod files, not modules.
	for _, notModule := range []string{"go", "toolchain"} {
		delete(seen, notModule)
	}
	var mods []string
	for m := range seen {
		mods = append(mods, m)
	}
	slices.Sort(mods)
	t.Logf("%d modules for %v: %v", len(mods), pkgs, mods)
	return mods
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/baton-go/baton\n") {
		t.Fatalf("repository root not found from %s: its go.mod is not the root module's (%v)", root, err)
	}
	return root
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
