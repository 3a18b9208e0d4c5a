package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process of another machine that shares the lock directory (NFS) takes
// a lock this machine's `lock` or `run` holds: its claim, made under
// another boot ID, counts as expired here, and this machine's claim
// counted as expired there. The CLI cannot prevent that, but must not go on
// as if it were a store failure: it stops CMD and exits 78 naming the
// cause. The other machine's write is made by hand, as the file backend
// writes a record (a new file renamed over the old one).
func TestLockTakenByAnotherMachine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  string
		args func(dir string) []string
	}{
		{"lock", func(dir string) []string {
			return lockArgs(dir, "shared", "--", exe(), cmdFenceWorker)
		}},
		{"run", func(dir string) []string {
			return runArgs(dir, "shared", "here", worker()...)
		}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			t.Parallel()
			dir, f := t.TempDir(), newFence(t)
			p := startCLI(t, tc.cmd, f.env(), tc.args(dir)...)
			f.waitWrite(t, "write by CMD", 15*time.Second, false, func(fenceWrite) bool { return true })
			takeAsAnotherMachine(t, filepath.Join(dir, "shared.json"))
			if code := p.wait(15 * time.Second); code != 78 {
				t.Fatalf("exit code %d, want 78; stderr:\n%s", code, p.stderr)
			}
			for _, want := range []string{"another machine uses the directory", "boot-of-another-machine"} {
				if !strings.Contains(p.stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, p.stderr)
				}
			}
		})
	}
}

// takeAsAnotherMachine rewrites the held record at path as a claim of
// another holder, made under another boot ID, with the next token.
func takeAsAnotherMachine(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatal(err)
	}
	token, err := rec["token"].(json.Number).Int64()
	if err != nil {
		t.Fatal(err)
	}
	rec["holder"], rec["nonce"], rec["boot_id"] = "there", "nonce-there", "boot-of-another-machine"
	rec["token"] = token + 1
	out, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".other-machine"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A lock taken by another machine while CMD runs, and found so only at
// its release (CMD exited before the next renewal), is the same
// misconfiguration: lock exits 78 naming it, not with CMD's 0 and no word.
func TestLockFoundTakenAtRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(t.TempDir(), "finish")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A TTL of a minute: no renewal comes before CMD exits.
	p := startCLI(t, "lock", nil, "lock", "--name", "shared", "--dir", dir, "--ttl", "60s", "--",
		"sh", "-c", `echo started; read x < "$0"`, fifo)
	p.stdout.waitFor(t, "started", 15*time.Second)
	takeAsAnotherMachine(t, filepath.Join(dir, "shared.json"))
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // waits for CMD to read
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("done\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if code := p.wait(15 * time.Second); code != 78 {
		t.Fatalf("exit code %d, want 78; stderr:\n%s", code, p.stderr)
	}
	for _, want := range []string{"another machine uses the directory", "boot-of-another-machine"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.stderr)
		}
	}
}
