package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/supervise"
)

// baton release --force frees a lock held by a live `baton lock`: the holder
// is told at its next renewal and kills its command; the next holder gets a
// larger token.
func TestReleaseForce(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	p := startCLI(t, "lock", f.env(), lockArgs(dir, "stuck", "--identity", "worker-1", "--", exe(), cmdFenceWorker)...)
	w := f.waitWrite(t, "write by CMD", 15*time.Second, false, func(fenceWrite) bool { return true })

	code, out, stderr := runCLI(t, "release", "--dir", dir, "stuck", "--force")
	if code != 0 {
		t.Fatalf("release: exit code %d; stderr: %s", code, stderr)
	}
	if want := `released lock "stuck", held by "worker-1" with token 1; the next holder gets a larger token`; !strings.Contains(out, want) {
		t.Errorf("release output %q, want %q", out, want)
	}
	if code := p.wait(15 * time.Second); code != 1 {
		t.Fatalf("the holder's baton lock exited %d, want 1 (lock lost); stderr:\n%s", code, p.stderr)
	}
	if exited, _ := supervise.WaitExit(w.Pid, 10*time.Second); !exited {
		t.Errorf("the holder's CMD (pid %d) still runs", w.Pid)
	}
	if r := requireFree(t, dir, "stuck"); r.Token != 1 {
		t.Errorf("token after forced release = %d, want the counter kept at 1", r.Token)
	}
	code, out, _ = runCLI(t, "release", "--dir", dir, "stuck", "--force")
	if code != 0 || !strings.Contains(out, `lock "stuck" was not held (last token 1); nothing to do`) {
		t.Errorf("second release: exit %d, output %q", code, out)
	}
}

func TestReleaseErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"release", "--dir", dir, "x"}, 2, `release of lock "x" needs --force`},
		{[]string{"release", "--dir", dir, "--force"}, 2, `release takes exactly one lock NAME, got 0 arguments`},
		{[]string{"release", "--dir", dir, "Bad", "--force"}, 2, `NAME: invalid lock name`},
		{[]string{"release", "--dir", dir, "missing", "--force"}, 1, `lock "missing" not found in file store`},
		{[]string{"release", "--dir", filepath.Join(dir, "typo"), "x", "--force"}, 1, `lock "x" not found: ` + filepath.Join(dir, "typo") + ` does not exist`},
	} {
		code, _, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("baton %s: exit %d, stderr %q; want exit %d containing %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "typo")); err == nil {
		t.Errorf("release of a lock in a directory that does not exist created it")
	}
}
