package docscheck

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// packages maps the package names the guides use to their import paths:
// a fragment (a block without a package clause) gets an import for each
// of these names it uses as a qualifier and does not import itself.
var packages = map[string]string{
	"baton":      "github.com/baton-go/baton",
	"backend":    "github.com/baton-go/baton/backend",
	"batontest":  "github.com/baton-go/baton/batontest",
	"filestore":  "github.com/baton-go/baton/filestore",
	"memstore":   "github.com/baton-go/baton/memstore",
	"batonlock":  "github.com/baton-go/baton/adapter/batonlock",
	"gocronlock": "github.com/baton-go/baton/adapter/gocronlock",
	"logrbridge": "github.com/baton-go/baton/adapter/logrbridge",
	"batonprom":  "github.com/baton-go/baton/batonprom",
	"etcdstore":  "github.com/baton-go/baton/etcdstore",
	"fence":      "github.com/baton-go/baton/fence",
	"kubestore":  "github.com/baton-go/baton/kubestore",
	"redisstore": "github.com/baton-go/baton/redisstore",
	"schedule":   "github.com/baton-go/baton/schedule",
	"gocron":     "github.com/go-co-op/gocron/v2",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"redis":      "github.com/redis/go-redis/v9",
	"clientv3":   "go.etcd.io/etcd/client/v3",
	"rest":       "k8s.io/client-go/rest",
	"ctrl":       "sigs.k8s.io/controller-runtime",
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"log":        "log",
	"os":         "os",
	"signal":     "os/signal",
	"slog":       "log/slog",
	"sql":        "database/sql",
	"strings":    "strings",
	"syscall":    "syscall",
	"testing":    "testing",
	"time":       "time",
}

// givens declare, with their types, the names the guides' fragments use
// without declaring them: what the surrounding program would have. A
// fragment gets a package-level variable for each of these it leaves
// undefined, and only for those.
var givens = map[string]string{
	"ctx":            "context.Context",
	"store":          "backend.Backend",
	"name":           "string",
	"lease":          "*baton.Lease",
	"run":            "schedule.Run",
	"guard":          "*fence.SQLGuard",
	"db":             "*sql.DB",
	"cfg":            "*rest.Config",
	"redisClient":    "*redis.Client",
	"otherObserver":  "baton.Observer",
	"elector":        "*gocronlock.Elector",
	"report":         "func()",
	"writeReport":    "func(context.Context, uint64) error",
	"runScheduler":   "func(context.Context, uint64) error",
	"freshNamespace": "func(*testing.T) string",
	"connect":        "func(*testing.T, string) backend.Backend",
}

// skipMarker, on the last non-blank line before a block's fence, exempts
// the block from the check; the reason in parentheses is required.
var skipMarker = regexp.MustCompile(`^<!-- snippet: skip \((.+)\) -->$`)

// TestDocsGoCompiles type-checks every ```go block of README.md and
// docs/*.md. A block with a package clause is checked as the file it is;
// any other block is a fragment: its top-level func and type declarations
// stay at file level, its other lines become the body of a function (that
// may return an error), its imports are resolved from the package names
// above, and the names in givens it leaves undefined are declared. In a
// fragment, a variable declared and not used and a missing final return
// are not errors: the rest of the function is elided. A block that cannot
// compile by construction needs <!-- snippet: skip (why) --> on the line
// before it; a skip on a block that compiles is reported as stale.
func TestDocsGoCompiles(t *testing.T) {
	blocks := docBlocks(t)
	imp := exportImporter(t, blocks)
	for _, b := range blocks {
		errs := b.check(imp)
		switch {
		case b.skip != "" && len(errs) == 0:
			t.Errorf("%s:%d: the block is marked \"snippet: skip (%s)\" but type-checks: remove the marker", b.file, b.line, b.skip)
		case b.skip == "" && len(errs) > 0:
			t.Errorf("%s:%d: the Go block does not type-check against the current packages:\n\t%s\n(fix the block, or mark one that cannot compile by construction with <!-- snippet: skip (why) --> on the line before it)",
				b.file, b.line, strings.Join(errs, "\n\t"))
		}
	}
}

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// docFiles returns the Markdown files the tests check.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// docBlocks returns the ```go blocks of every file docFiles returns.
func docBlocks(t *testing.T) []block {
	t.Helper()
	var blocks []block
	for _, f := range docFiles(t) {
		blocks = append(blocks, goBlocks(t, f)...)
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go block found in the docs: the extraction is broken")
	}
	return blocks
}

// readDoc returns the name of the file path relative to the repository's
// root, and its lines.
func readDoc(t *testing.T, path string) (string, []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(rel), strings.Split(string(data), "\n")
}

// block is one ```go block of a Markdown file.
type block struct {
	file  string   // relative to the repository root
	line  int      // of the block's first line of code
	lines []string // the code
	skip  string   // the reason of a skip marker, if any
}

var goFence = regexp.MustCompile("^```go\\s*$")

// goBlocks returns the ```go blocks of the Markdown file path.
func goBlocks(t *testing.T, path string) []block {
	t.Helper()
	rel, lines := readDoc(t, path)
	var (
		blocks []block
		cur    *block
		prev   string // the last non-blank line outside a block
	)
	for i, line := range lines {
		switch {
		case cur == nil && goFence.MatchString(strings.TrimSpace(line)):
			cur = &block{file: rel, line: i + 2}
			if m := skipMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				cur.skip = m[1]
			}
		case cur != nil && strings.HasPrefix(strings.TrimSpace(line), "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		case strings.TrimSpace(line) != "":
			prev = line
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: the ```go block is not closed", rel, cur.line)
	}
	return blocks
}

// check type-checks b and returns its errors, positioned in the Markdown
// file. A fragment is tried as the body of a function returning an error,
// then of one returning nothing; the try with fewer errors counts.
func (b block) check(imp types.Importer) []string {
	if b.isFile() {
		return b.typeCheck(imp, b.source(""), false)
	}
	var best []string
	for _, results := range []string{"error", ""} {
		given := map[string]bool{}
		for {
			errs, undefined := b.typeCheckFragment(imp, b.source(results, sortedKeys(given)...))
			added := false
			for _, u := range undefined {
				if _, ok := givens[u]; ok && !given[u] {
					given[u], added = true, true
				}
			}
			if !added {
				if best == nil || len(errs) < len(best) {
					best = errs
				}
				break
			}
		}
		if len(best) == 0 {
			return nil
		}
	}
	return best
}

// typeCheckFragment checks the fragment source src and returns its errors
// and the names they say are undefined.
func (b block) typeCheckFragment(imp types.Importer, src string) (errs, undefined []string) {
	errs = b.typeCheck(imp, src, true)
	for _, e := range errs {
		if _, name, ok := strings.Cut(e, ": undefined: "); ok {
			undefined = append(undefined, name)
		}
	}
	return errs, undefined
}

// typeCheck parses and checks src; for a fragment, it drops the errors
// that an elided rest of the function would not have.
func (b block) typeCheck(imp types.Importer, src string, fragment bool) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src, parser.SkipObjectResolution)
	if err != nil {
		return []string{err.Error()}
	}
	if fragment {
		f, err = parser.ParseFile(fset, "snippet.go", withImports(f, src), parser.SkipObjectResolution)
		if err != nil {
			return []string{err.Error()}
		}
	}
	var errs []string
	conf := types.Config{Importer: imp, Error: func(err error) {
		msg := err.(types.Error).Msg
		if fragment && (strings.HasPrefix(msg, "declared and not used") || msg == "missing return") {
			return
		}
		errs = append(errs, err.Error())
	}}
	_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
	return errs
}

// isFile reports whether b is a whole file: its first line of code is a
// package clause.
func (b block) isFile() bool {
	for _, l := range b.lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

// source returns the Go file for b: b itself if it is a file; otherwise
// its imports and declarations at file level, the givens named, and its
// other lines in func _() results { ... }. Line directives keep every
// position in the Markdown file.
func (b block) source(results string, given ...string) string {
	var head, decls, body strings.Builder
	directive := func(w *strings.Builder, i int) {
		fmt.Fprintf(w, "\n//line %s:%d:1\n", b.file, b.line+i)
	}
	if b.isFile() {
		directive(&head, 0)
		head.WriteString(strings.Join(b.lines, "\n"))
		return head.String()
	}
	head.WriteString("package snippet\n")
	for i := 0; i < len(b.lines); {
		end := declEnd(b.lines, i)
		w := &body
		if end > i {
			w = &decls
		} else {
			end = i + 1
		}
		directive(w, i)
		w.WriteString(strings.Join(b.lines[i:end], "\n"))
		i = end
	}
	var vars strings.Builder
	for _, g := range given {
		fmt.Fprintf(&vars, "var %s %s\n", g, givens[g])
	}
	return head.String() + decls.String() + "\nfunc _() " + results + " {" + body.String() + "\n}\n" + vars.String()
}

// declEnd returns the end of the file-level declaration (import, func or
// type) that starts at lines[i], or i if none does: one starts at column 0
// and ends with its line if that closes it, else at the next line that is
// "}" or ")" at column 0.
func declEnd(lines []string, i int) int {
	l := lines[i]
	if !strings.HasPrefix(l, "import ") && !strings.HasPrefix(l, "func ") && !strings.HasPrefix(l, "type ") {
		return i
	}
	if !strings.HasSuffix(l, "{") && !strings.HasSuffix(l, "(") {
		return i + 1
	}
	for j := i + 1; j < len(lines); j++ {
		if lines[j] == "}" || lines[j] == ")" {
			return j + 1
		}
	}
	return len(lines)
}

// withImports returns src with an import added for each name of packages
// that f uses as a qualifier and neither imports nor declares at file
// level.
func withImports(f *ast.File, src string) string {
	have := map[string]bool{}
	for _, s := range f.Imports {
		have[importName(s)] = true
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			have[fd.Name.Name] = true
		}
	}
	var add []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && packages[id.Name] != "" && !have[id.Name] {
				have[id.Name] = true
				add = append(add, fmt.Sprintf("import %s %q\n", id.Name, packages[id.Name]))
			}
		}
		return true
	})
	pkg, rest, _ := strings.Cut(src, "\n")
	return pkg + "\n" + strings.Join(add, "") + rest
}

func importName(s *ast.ImportSpec) string {
	if s.Name != nil {
		return s.Name.Name
	}
	path := strings.Trim(s.Path.Value, `"`)
	for name, p := range packages {
		if p == path {
			return name
		}
	}
	return path[strings.LastIndex(path, "/")+1:]
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// exportImporter returns an importer that reads the export data the go
// command builds (or finds in its cache) for the packages of the map and
// those the blocks import: one go list for all of them, instead of a
// build per block.
func exportImporter(t *testing.T, blocks []block) types.Importer {
	t.Helper()
	paths := map[string]bool{}
	for _, p := range packages {
		paths[p] = true
	}
	for _, b := range blocks {
		f, err := parser.ParseFile(token.NewFileSet(), "", b.source(""), parser.ImportsOnly)
		if err != nil {
			continue // reported by the check
		}
		for _, s := range f.Imports {
			paths[strings.Trim(s.Path.Value, `"`)] = true
		}
	}
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	if raceEnabled {
		args = append(args, "-race") // the export data the -race test builds left in the cache
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, sortedKeys(paths)...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list of the packages the docs use: %v\n%s(a path the docs import must be required in tools/docscheck/go.mod: list it in deps.go and run go mod tidy)", err, stderr.String())
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "\t")
		exports[path] = file
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file := exports[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %q: add it to the packages map and deps.go of tools/docscheck", path)
		}
		return os.Open(file)
	})
}
