package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const repoRoot = "../.."

// built is what one `make image` wrote.
type built struct {
	out   string // IMAGE_OUT
	log   string // make's output: the commands it ran
	img   v1.Image
	cfg   *v1.ConfigFile
	files map[string]entry // the layer, by path
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// TestImage runs `make image` once and checks what it wrote: the config, the
// layer, the binary in it (run as `baton version`), the tarball, and that
// the Dockerfile builds the same way.
func TestImage(t *testing.T) {
	b := makeImage(t)
	t.Run("config", func(t *testing.T) { checkConfig(t, b) })
	t.Run("layer", func(t *testing.T) { checkLayer(t, b) })
	t.Run("binary", func(t *testing.T) { checkBinary(t, b) })
	t.Run("version", func(t *testing.T) { checkVersion(t, b) })
	t.Run("tarball", func(t *testing.T) { checkTarball(t, b) })
	t.Run("reproducible", func(t *testing.T) { checkReproducible(t, b) })
	t.Run("dockerfile", func(t *testing.T) { checkDockerfile(t, b) })
}

func makeImage(t *testing.T) *built {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image")
	const ref = "localhost/baton:test"
	cmd := exec.CommandContext(t.Context(), "make", "-C", repoRoot, "image", "IMAGE_OUT="+out, "IMAGE="+ref)
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, log)
	}
	p, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatalf("reading the OCI layout: %v", err)
	}
	idx, err := p.ImageIndex()
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 1 {
		t.Fatalf("the layout holds %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if got := d.Annotations["io.containerd.image.name"]; got != ref {
		t.Errorf("io.containerd.image.name = %q, want %q", got, ref)
	}
	if got := d.Annotations["org.opencontainers.image.ref.name"]; got != "test" {
		t.Errorf("org.opencontainers.image.ref.name = %q, want %q", got, "test")
	}
	img, err := p.Image(d.Digest)
	must(t, err)
	cfg, err := img.ConfigFile()
	must(t, err)
	return &built{out: out, log: string(log), img: img, cfg: cfg, files: readLayer(t, img)}
}

func readLayer(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	must(t, err)
	if len(layers) != 1 {
		t.Fatalf("the image has %d layers, want 1 (no base)", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	must(t, err)
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		must(t, err)
		data, err := io.ReadAll(tr)
		must(t, err)
		files[strings.TrimSuffix(hdr.Name, "/")] = entry{hdr: hdr, data: data}
	}
}

func checkConfig(t *testing.T, b *built) {
	c := b.cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/baton"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/usr/local/bin/baton] and no cmd", c.Entrypoint, c.Cmd)
	}
	if want := script(t)["BATON_UID"] + ":" + script(t)["BATON_GID"]; c.User != want || strings.HasPrefix(want, "0:") {
		t.Errorf("user %q, want %q (non-root, from rootfs.sh)", c.User, want)
	}
	if c.WorkingDir != "/home/nonroot" || !slices.Equal(c.Env, []string{"PATH=/usr/local/bin"}) {
		t.Errorf("workdir %q env %q", c.WorkingDir, c.Env)
	}
	if b.cfg.OS != "linux" || b.cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", b.cfg.OS, b.cfg.Architecture, runtime.GOARCH)
	}
	if !b.cfg.Created.Equal(epoch) {
		t.Errorf("created %v, want the epoch", b.cfg.Created)
	}
}

func checkLayer(t *testing.T, b *built) {
	s := script(t)
	uid, user := s["BATON_UID"], s["BATON_USER"]
	home := "home/" + user
	wantMode := map[string]int64{
		"usr/local/bin/baton": 0o755, "etc/passwd": 0o644, "etc/group": 0o644,
		"etc/ssl/certs/ca-certificates.crt": 0o644, "tmp": 0o1777, home: 0o755,
	}
	for p, mode := range wantMode {
		e, ok := b.files[p]
		if !ok {
			t.Errorf("%s missing from the layer", p)
			continue
		}
		if e.hdr.Mode != mode {
			t.Errorf("%s mode %o, want %o", p, e.hdr.Mode, mode)
		}
	}
	for p, e := range b.files {
		if _, ok := wantMode[p]; !ok && e.hdr.Typeflag == tar.TypeDir && e.hdr.Mode != 0o755 {
			t.Errorf("directory %s mode %o, want 755", p, e.hdr.Mode)
		}
		wantUID := 0
		if p == home {
			wantUID = atoi(t, uid)
		}
		if e.hdr.Uid != wantUID || !e.hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d mtime %v, want uid %d at the epoch", p, e.hdr.Uid, e.hdr.ModTime, wantUID)
		}
	}
	wantPasswd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		user + ":x:" + uid + ":" + s["BATON_GID"] + ":" + user + ":/" + home + ":/sbin/nologin\n"
	if got := string(b.files["etc/passwd"].data); got != wantPasswd {
		t.Errorf("/etc/passwd:\n%s\nwant:\n%s", got, wantPasswd)
	}
	if got, want := string(b.files["etc/group"].data), "root:x:0:\n"+user+":x:"+s["BATON_GID"]+":\n"; got != want {
		t.Errorf("/etc/group:\n%s\nwant:\n%s", got, want)
	}
	certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	must(t, err)
	if got := b.files["etc/ssl/certs/ca-certificates.crt"].data; !bytes.Equal(got, certs) || !bytes.Contains(got, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("the CA bundle in the layer (%d bytes) is not the build machine's (%d bytes)", len(got), len(certs))
	}
}

// checkBinary reads the build settings the toolchain recorded in the binary
// and compares them with rootfs.sh's, and checks that it is static.
func checkBinary(t *testing.T, b *built) {
	bin := b.files["usr/local/bin/baton"].data
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("reading the binary's build info: %v", err)
	}
	s := script(t)
	want := map[string]string{
		"CGO_ENABLED": s["BATON_CGO_ENABLED"],
		"-trimpath":   "true",
		"-tags":       s["BATON_TAGS"],
		"GOOS":        "linux",
		"GOARCH":      runtime.GOARCH,
	}
	if want["CGO_ENABLED"] != "0" || !strings.Contains(s["BATON_BUILDFLAGS"], "-trimpath") {
		t.Errorf("rootfs.sh: CGO_ENABLED=%q and flags %q, want 0 and -trimpath", want["CGO_ENABLED"], s["BATON_BUILDFLAGS"])
	}
	got := map[string]string{}
	for _, st := range bi.Settings {
		got[st.Key] = st.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("build setting %s = %q, want %q", k, got[k], v)
		}
	}
	if bi.Path != "github.com/baton-go/baton/cmd/baton" {
		t.Errorf("binary of %q, want github.com/baton-go/baton/cmd/baton", bi.Path)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	must(t, err)
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v)", p.Type)
		}
	}
	// With -trimpath the toolchain does not record -ldflags (they may hold
	// paths): check their effects instead. -s drops the symbol table, -w
	// the DWARF sections, and -buildid= the build ID note.
	if s["BATON_LDFLAGS"] != "-s -w -buildid=" {
		t.Fatalf("rootfs.sh: -ldflags %q; this test checks the effects of \"-s -w -buildid=\"", s["BATON_LDFLAGS"])
	}
	for _, sec := range f.Sections {
		if sec.Name == ".symtab" || sec.Name == ".note.go.buildid" ||
			strings.HasPrefix(sec.Name, ".debug") || strings.HasPrefix(sec.Name, ".zdebug") {
			t.Errorf("the binary has section %s: the -ldflags were not applied", sec.Name)
		}
	}
}

// checkVersion extracts the binary from the layer and runs `baton version`
// and `baton --version`.
func checkVersion(t *testing.T, b *built) {
	bin := filepath.Join(t.TempDir(), "baton")
	must(t, os.WriteFile(bin, b.files["usr/local/bin/baton"].data, 0o755))
	bi, err := buildinfo.ReadFile(bin)
	must(t, err)
	// The toolchain stamps the revision in a git checkout whose .git is a
	// directory (not in a worktree, whose .git is a file).
	revision, modified := "unknown", "unknown"
	if fi, err := os.Stat(filepath.Join(repoRoot, ".git")); err == nil && fi.IsDir() {
		rev, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
		if err == nil {
			revision, modified = strings.TrimSpace(string(rev)), "(true|false)"
		}
	}
	// The version is a pseudo-version from the commit when built from a
	// checkout, "(devel)" without one.
	want := regexp.MustCompile(`^baton (\(devel\)|v\S+)\n` +
		`revision: ` + regexp.QuoteMeta(revision) + `\n` +
		`modified: ` + modified + `\n` +
		`go: ` + regexp.QuoteMeta(bi.GoVersion+" linux/"+runtime.GOARCH) + `\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("baton %s: %v\n%s", args[0], err, out)
		}
		if !want.Match(out) {
			t.Errorf("baton %s printed\n%s\nwant to match %s", args[0], out, want)
		}
	}
	if v := bi.Main.Version; revision != "unknown" && v != "(devel)" && !strings.Contains(v, revision[:12]) {
		t.Errorf("module version %q does not name revision %s", v, revision[:12])
	}
}

// checkTarball reads the docker-load tarball: the same config and layer.
func checkTarball(t *testing.T, b *built) {
	tag, err := name.NewTag("localhost/baton:test")
	must(t, err)
	img, err := tarball.ImageFromPath(filepath.Join(b.out, "baton.tar"), &tag)
	if err != nil {
		t.Fatalf("reading baton.tar as %s: %v", tag, err)
	}
	got, err := img.ConfigName()
	must(t, err)
	want, err := b.img.ConfigName()
	must(t, err)
	if got != want {
		t.Errorf("baton.tar has config %s, the OCI layout %s", got, want)
	}
}

// checkReproducible packs the same tree again: the same image digest.
func checkReproducible(t *testing.T, b *built) {
	dir := filepath.Join(t.TempDir(), "oci")
	err := run([]string{"-rootfs", filepath.Join(b.out, "rootfs"), "-name", "localhost/baton:test",
		"-platform", "linux/" + runtime.GOARCH, "-oci", dir})
	must(t, err)
	p, err := layout.FromPath(dir)
	must(t, err)
	idx, err := p.ImageIndex()
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	want, err := b.img.Digest()
	must(t, err)
	if got := im.Manifests[0].Digest; got != want {
		t.Errorf("packing the same tree again gave %s, first %s", got, want)
	}
}

// checkDockerfile checks that `make image` and the Dockerfile both build
// with rootfs.sh (so with the same flags and user), that neither builds on
// its own, and that the Dockerfile's final stage matches the image's config.
func checkDockerfile(t *testing.T, b *built) {
	const runScript = "sh tools/image/rootfs.sh"
	if !strings.Contains(b.log, runScript) || strings.Contains(b.log, "go build") {
		t.Errorf("make image does not build with %s alone; it ran:\n%s", runScript, b.log)
	}
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	final := stages[len(stages)-1]
	var scriptRuns int
	for _, st := range stages {
		for _, in := range st {
			if strings.Contains(in, "go build") {
				t.Errorf("Dockerfile builds on its own: %s", in)
			}
			if strings.HasPrefix(in, "RUN ") && strings.Contains(in, runScript+" /rootfs") {
				scriptRuns++
			}
		}
	}
	// The ARGs before the first FROM, the build stage, the final stage.
	if scriptRuns != 1 || len(stages) != 3 {
		t.Errorf("Dockerfile: %d parts and %d runs of %s, want 3 and 1", len(stages), scriptRuns, runScript)
	}
	c := b.cfg.Config
	entrypoint, err := json.Marshal(c.Entrypoint)
	must(t, err)
	want := []string{
		"FROM scratch",
		"COPY --from=build /rootfs/ /",
		`LABEL org.opencontainers.image.source="` + c.Labels["org.opencontainers.image.source"] +
			`" org.opencontainers.image.title="` + c.Labels["org.opencontainers.image.title"] + `"`,
		"ENV " + strings.Join(c.Env, " "),
		"USER " + c.User,
		"WORKDIR " + c.WorkingDir,
		"ENTRYPOINT " + strings.ReplaceAll(string(entrypoint), ",", ", "),
	}
	if !slices.Equal(final, want) {
		t.Errorf("the Dockerfile's final stage:\n%s\nwant (from the image make wrote):\n%s",
			strings.Join(final, "\n"), strings.Join(want, "\n"))
	}
}

// parseDockerfile returns the instructions before the first FROM and those
// of each stage, continuation lines joined with single spaces, comments
// dropped.
func parseDockerfile(t *testing.T, path string) [][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	var stages [][]string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if more, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(strings.TrimSpace(more) + " ")
			continue
		}
		cur.WriteString(line)
		in := cur.String()
		cur.Reset()
		if strings.HasPrefix(in, "FROM ") || stages == nil {
			stages = append(stages, nil)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

// script returns the settings rootfs.sh assigns (NAME=value lines, quotes
// removed): the one source of the build flags and the user.
func script(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("rootfs.sh")
	must(t, err)
	vars := map[string]string{}
	re := regexp.MustCompile(`(?m)^(BATON_[A-Z_]+)=("([^"]*)"|(\S*))$`)
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		vars[m[1]] = m[3] + m[4]
	}
	for _, k := range []string{"BATON_CGO_ENABLED", "BATON_BUILDFLAGS", "BATON_TAGS", "BATON_LDFLAGS", "BATON_USER", "BATON_UID", "BATON_GID"} {
		if _, ok := vars[k]; !ok {
			t.Fatalf("rootfs.sh does not set %s", k)
		}
	}
	return vars
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	must(t, err)
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
