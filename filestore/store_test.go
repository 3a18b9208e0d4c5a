//go:build linux || darwin

package filestore

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

var bg = context.Background()

func wantHeld(t *testing.T, err error, holder string, token uint64, retryAfter time.Duration) {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) || !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("err = %v, want *HeldError matching ErrHeld", err)
	}
	if held.Holder != holder || held.Token != token || held.RetryAfter != retryAfter {
		t.Fatalf("HeldError = %+v, want holder %q token %d RetryAfter %v", held, holder, token, retryAfter)
	}
}

func wantErr(t *testing.T, err, target error, mention string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want an error matching %v", err, target)
	}
	if !strings.Contains(err.Error(), mention) {
		t.Fatalf("err = %q, want it to mention %q", err, mention)
	}
}

func TestLeaseLifecycle(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	a, b := newStore(t, dir, clk), newStore(t, dir, clk)
	const ttl = 10 * time.Second

	if _, err := a.Get(bg, "job"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get before any acquire: %v, want ErrNotFound", err)
	}
	ga := mustAcquire(t, a, "job", req("a", "n1", ttl))
	if ga.Token != 1 {
		t.Fatalf("first token %d, want 1", ga.Token)
	}
	rec := mustGet(t, b, "job")
	if rec.Holder != "a" || rec.Nonce != "n1" || rec.Token != 1 || rec.TTL != ttl || rec.Remaining != ttl || !rec.Held() || rec.Transitions != 0 {
		t.Fatalf("Get = %+v", rec)
	}
	if rec.AcquireTime.IsZero() || !rec.AcquireTime.Equal(rec.RenewTime) {
		t.Errorf("AcquireTime %v, RenewTime %v", rec.AcquireTime, rec.RenewTime)
	}

	// Held: for another owner, for the same holder with a new nonce, and
	// for the very same owner.
	clk.advance(4 * time.Second)
	_, err := b.TryAcquire(bg, "job", req("b", "m1", ttl))
	wantHeld(t, err, "a", 1, 6*time.Second)
	_, err = b.TryAcquire(bg, "job", req("a", "n2", ttl))
	wantHeld(t, err, "a", 1, 6*time.Second)
	_, err = a.TryAcquire(bg, "job", req("a", "n1", ttl))
	wantHeld(t, err, "a", 1, 6*time.Second)

	// Right owner, wrong token: not a grant this store issued.
	forged := ga
	forged.Token = 7
	_, err = a.Renew(bg, forged)
	wantErr(t, err, backend.ErrLost, "the grant has token 7, the claim token 1")

	// Renew restarts the TTL from now and keeps the token.
	g2, err := a.Renew(bg, ga)
	if err != nil || g2.Token != 1 || g2.Nonce != "n1" || g2.TTL != ttl {
		t.Fatalf("Renew = %+v, %v", g2, err)
	}
	if rec := mustGet(t, b, "job"); rec.Remaining != ttl || !rec.RenewTime.After(rec.AcquireTime) && !rec.RenewTime.Equal(rec.AcquireTime) {
		t.Fatalf("after renew Get = %+v", rec)
	}
	clk.advance(ttl - time.Nanosecond)
	_, err = b.TryAcquire(bg, "job", req("b", "m1", ttl))
	wantHeld(t, err, "a", 1, time.Nanosecond)

	// Expired but not taken: the record still names a, but is not held,
	// and a can no longer renew or release it.
	clk.advance(time.Nanosecond)
	if rec := mustGet(t, b, "job"); rec.Holder != "a" || rec.Remaining != 0 || rec.Held() {
		t.Fatalf("expired Get = %+v", rec)
	}
	before := readBytes(t, recordPath(dir, "job"))
	_, err = a.Renew(bg, ga)
	wantErr(t, err, backend.ErrLost, "expired")
	wantErr(t, a.Release(bg, ga), backend.ErrLost, "expired")
	if after := readBytes(t, recordPath(dir, "job")); !bytes.Equal(before, after) {
		t.Fatalf("a failed renew or release changed the record:\n%s\n%s", before, after)
	}

	// Takeover after expiry.
	gb := mustAcquire(t, b, "job", req("b", "m1", ttl))
	if gb.Token != 2 {
		t.Fatalf("takeover token %d, want 2", gb.Token)
	}
	_, err = a.Renew(bg, ga)
	wantErr(t, err, backend.ErrLost, `held by "b" (token 2)`)
	wantErr(t, a.Release(bg, ga), backend.ErrLost, `held by "b"`)
	if rec := mustGet(t, a, "job"); rec.Holder != "b" || rec.Token != 2 || rec.Transitions != 1 || rec.Remaining != ttl {
		t.Fatalf("after takeover Get = %+v", rec)
	}

	// Release frees the key but keeps the counter.
	if err := b.Release(bg, gb); err != nil {
		t.Fatal(err)
	}
	if rec := mustGet(t, a, "job"); rec.Holder != "" || rec.Nonce != "" || rec.Token != 2 || rec.Held() {
		t.Fatalf("after release Get = %+v", rec)
	}
	wantErr(t, b.Release(bg, gb), backend.ErrLost, "released")

	_, err = b.Renew(bg, gb)
	wantErr(t, err, backend.ErrLost, "released")
	if g := mustAcquire(t, a, "job", req("a", "n3", ttl)); g.Token != 3 {
		t.Fatalf("token after release %d, want 3", g.Token)
	}
}

func TestCounterSurvivesReleaseAndNewStore(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for i := range 5 {
		s := newStore(t, dir, nil) // a new client each round, as a new process would be
		g := mustAcquire(t, s, "counter", req("h", baton.NewNonce(), time.Minute))
		if g.Token != last+1 {
			t.Fatalf("round %d: token %d after %d", i, g.Token, last)
		}
		last = g.Token
		if err := s.Release(bg, g); err != nil {
			t.Fatal(err)
		}
	}
	if rec := mustGet(t, newStore(t, dir, nil), "counter"); rec.Token != 5 || rec.Holder != "" {
		t.Fatalf("Get = %+v", rec)
	}
}

func TestRebootExpiresClaimKeepsToken(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	before := newStore(t, dir, clk)
	before.bootID = "boot-before-the-reboot"
	mustAcquire(t, before, "job", req("a", "n1", time.Hour))
	mustAcquire(t, before, "other", req("a", "n1", time.Hour))

	// After the reboot the monotonic clock starts again near zero, far
	// below the old expiry; only the boot ID tells the claim is stale.
	clkAfter := &fakeClock{}
	clkAfter.ns.Store(int64(time.Second))
	after := newStore(t, dir, clkAfter)
	if after.bootID == before.bootID {
		t.Fatal("test needs different boot IDs")
	}
	if rec := mustGet(t, after, "job"); rec.Holder != "a" || rec.Remaining != 0 || rec.Held() {
		t.Fatalf("Get after reboot = %+v, want expired", rec)
	}
	old := backend.Grant{Key: "job", Holder: "a", Nonce: "n1", Token: 1, TTL: time.Hour}
	_, err := after.Renew(bg, old)
	wantErr(t, err, backend.ErrLost, "rebooted")
	if g := mustAcquire(t, after, "job", req("b", "m1", time.Minute)); g.Token != 2 {
		t.Fatalf("token after reboot %d, want 2", g.Token)
	}
	recs, err := after.List(bg)
	if err != nil || len(recs) != 2 || recs[0].Key != "job" || !recs[0].Held() || recs[1].Key != "other" || recs[1].Held() {
		t.Fatalf("List after reboot = %+v, %v", recs, err)
	}
}

func TestTransitions(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	s := newStore(t, dir, clk)
	step := func(holder string, want uint64) backend.Grant {
		t.Helper()
		g := mustAcquire(t, s, "t", req(holder, baton.NewNonce(), time.Second))
		if rec := mustGet(t, s, "t"); rec.Transitions != want {
			t.Fatalf("after %s acquired token %d: transitions %d, want %d", holder, g.Token, rec.Transitions, want)
		}
		return g
	}
	step("a", 0) // the first acquisition
	clk.advance(time.Second)
	step("a", 0) // the same holder again, after expiry
	clk.advance(time.Second)
	g := step("b", 1) // another holder, after expiry
	if err := s.Release(bg, g); err != nil {
		t.Fatal(err)
	}
	step("b", 2) // after a release the key was free: any acquisition changes hands
}

func TestCorruptRecordIsNeverOverwritten(t *testing.T) {
	contents := map[string]string{
		"garbage":       "garbage",
		"empty":         "",
		"newer version": `{"version":2,"token":99}`,
		"token zero":    strings.Replace(string(validHeld().encode()), `"token":42`, `"token":0`, 1),
		"other key":     strings.Replace(string(validFree().encode()), `"key":"nightly-report"`, `"key":"other"`, 1),
	}
	for name, content := range contents {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := newStore(t, dir, nil)
			key := "nightly-report"
			path := recordPath(dir, key)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			g := backend.Grant{Key: key, Holder: "host-1a2b3c4d", Nonce: "0011223344556677", Token: 42, TTL: time.Minute}
			_, err := s.TryAcquire(bg, key, req("x", "y", time.Minute))
			wantErr(t, err, backend.ErrCorruptRecord, path)
			_, err = s.Renew(bg, g)
			wantErr(t, err, backend.ErrCorruptRecord, path)
			wantErr(t, s.Release(bg, g), backend.ErrCorruptRecord, path)
			wantErr(t, s.ForceRelease(bg, key), backend.ErrCorruptRecord, path)
			_, err = s.Get(bg, key)
			wantErr(t, err, backend.ErrCorruptRecord, path)
			_, err = s.List(bg)
			wantErr(t, err, backend.ErrCorruptRecord, path)
			if got := string(readBytes(t, path)); got != content {
				t.Fatalf("record was rewritten to %q", got)
			}
			wantNoTemps(t, dir)
		})
	}
}

func TestForceRelease(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	wantErr(t, s.ForceRelease(bg, "f"), backend.ErrNotFound, "f.json")
	g := mustAcquire(t, s, "f", req("a", "n", time.Minute))
	if err := s.ForceRelease(bg, "f"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(bg, "f"); err != nil {
		t.Fatalf("ForceRelease of a free lock: %v", err)
	}
	_, err := s.Renew(bg, g)
	wantErr(t, err, backend.ErrLost, "released")
	if g := mustAcquire(t, s, "f", req("b", "m", time.Minute)); g.Token != 2 {
		t.Fatalf("token after force release %d, want 2", g.Token)
	}
}

func TestInvalidNamesTouchNothing(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	names := []string{"", "A", "../x", "..", ".", "a/b", "/etc/passwd", ".hidden", "a..b", "a\x00b", strings.Repeat("a", backend.MaxNameLength+1)}
	for _, name := range names {
		g := backend.Grant{Key: name, Holder: "h", Nonce: "n", Token: 1, TTL: time.Second}
		errs := map[string]error{}
		_, errs["TryAcquire"] = s.TryAcquire(bg, name, req("h", "n", time.Second))
		_, errs["Renew"] = s.Renew(bg, g)
		errs["Release"] = s.Release(bg, g)
		errs["ForceRelease"] = s.ForceRelease(bg, name)
		_, errs["Get"] = s.Get(bg, name)
		_, errs["Watch"] = s.Watch(bg, name)
		for op, err := range errs {
			if !errors.Is(err, backend.ErrInvalidName) {
				t.Errorf("%s(%q) = %v, want ErrInvalidName", op, name, err)
			}
		}
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("directory has %v", names)
	}
}

func TestInvalidRequestsWriteNothing(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	bad := []backend.Request{
		req("", "n", time.Second),
		req("h", "", time.Second),
		req("h", "n", 0),
		req("h", "n", -time.Second),
		req("h", "n", maxTTL+1),
		req("h\xff", "n", time.Second),
		req(strings.Repeat("h", maxOwnerLen+1), "n", time.Second),
	}
	for _, r := range bad {
		if _, err := s.TryAcquire(bg, "k", r); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("TryAcquire(%+v) = %v, want ErrInvalidOptions", r, err)
		}
		g := backend.Grant{Key: "k", Holder: r.Holder, Nonce: r.Nonce, TTL: r.TTL}
		if _, err := s.Renew(bg, g); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("Renew(%+v) = %v, want ErrInvalidOptions", g, err)
		}
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("directory has %v", names)
	}
	// The limits are inclusive: the longest accepted values round-trip.
	long := req(strings.Repeat("h", maxOwnerLen), strings.Repeat("é", maxOwnerLen/2), maxTTL)
	g := mustAcquire(t, s, "k", long)
	if _, err := s.Renew(bg, g); err != nil {
		t.Fatal(err)
	}
}

func TestLongNames(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	long := strings.Repeat("a", backend.MaxNameLength)
	long2 := strings.Repeat("a", backend.MaxNameLength-1) + "b" // same shortened prefix
	plain := strings.Repeat("c", maxPlainBase)
	for i, name := range []string{long, long2, plain} {
		g := mustAcquire(t, s, name, req("h", "n", time.Minute))
		if g.Token != 1 {
			t.Fatalf("name %d: token %d", i, g.Token)
		}
		if rec := mustGet(t, s, name); rec.Key != name || !rec.Held() {
			t.Fatalf("name %d: Get = %+v", i, rec)
		}
	}
	for _, n := range dirNames(t, dir) {
		if len(n) > 255 {
			t.Errorf("file name of %d bytes: %s", len(n), n)
		}
	}
	recs, err := s.List(bg)
	if err != nil || len(recs) != 3 || recs[0].Key != long || recs[1].Key != long2 || recs[2].Key != plain {
		t.Fatalf("List = %d records, %v", len(recs), err)
	}
}

func TestList(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	s := newStore(t, dir, clk)
	if recs, err := s.List(bg); err != nil || len(recs) != 0 {
		t.Fatalf("List of an empty directory = %v, %v", recs, err)
	}
	for _, k := range []string{"b", "a", "c"} {
		mustAcquire(t, s, k, req("h-"+k, "n", time.Minute))
	}
	if err := s.Release(bg, backend.Grant{Key: "c", Holder: "h-c", Nonce: "n", Token: 1}); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "d.json")
	misplaced := filepath.Join(dir, "e.json")
	files := map[string]string{
		bad:                              "{",
		misplaced:                        string(mustRead(t, recordPath(dir, "a"))), // a's record under e's name
		filepath.Join(dir, "x.json.tmp"): "{",
		filepath.Join(dir, ".y.json"):    "{",
		filepath.Join(dir, "notes.txt"):  "hello",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(bg)
	if len(recs) != 3 || recs[0].Key != "a" || recs[1].Key != "b" || recs[2].Key != "c" {
		t.Fatalf("List = %+v", recs)
	}
	if !recs[0].Held() || recs[0].Holder != "h-a" || recs[2].Held() || recs[2].Token != 1 {
		t.Errorf("List = %+v", recs)
	}
	wantErr(t, err, backend.ErrCorruptRecord, bad)
	wantErr(t, err, backend.ErrCorruptRecord, misplaced)
	if strings.Contains(err.Error(), "x.json.tmp") || strings.Contains(err.Error(), ".y.json") {
		t.Errorf("List reported temporary or hidden files: %v", err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := s.List(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled context: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte { return readBytes(t, path) }

func TestNew(t *testing.T) {
	t.Run("creates the directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		s := newStore(t, dir, nil)
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := fs.FileMode(0o700); fi.Mode().Perm() != want {
			t.Errorf("directory mode %v, want %v", fi.Mode().Perm(), want)
		}
		if s.Dir() != dir {
			t.Errorf("Dir() = %q", s.Dir())
		}
		mustAcquire(t, s, "k", req("h", "n", time.Second))
		for _, name := range []string{"k.lock", "k.json", "k.epoch"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if want := fs.FileMode(0o600); fi.Mode().Perm() != want {
				t.Errorf("%s mode %v, want %v", name, fi.Mode().Perm(), want)
			}
		}
		if names := dirNames(t, dir); len(names) != 3 {
			t.Errorf("directory has %v, want k.epoch, k.json and k.lock only", names)
		}
	})
	t.Run("relative path becomes absolute", func(t *testing.T) {
		t.Chdir(t.TempDir())
		s := newStore(t, "locks", nil)
		if !filepath.IsAbs(s.Dir()) {
			t.Errorf("Dir() = %q", s.Dir())
		}
	})
	t.Run("permissions", func(t *testing.T) {
		// The common umask 022 must not strip the group's write bits: a
		// group's other users were refused the files.
		// A setgid parent's setgid bit, which gives the files its group,
		// stays.
		defer syscall.Umask(syscall.Umask(0o022))
		parent := t.TempDir()
		if err := os.Chmod(parent, 0o770|fs.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "shared")
		s, err := New(dir, WithPermissions(0o660))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := fs.FileMode(0o770); fi.Mode().Perm() != want || fi.Mode()&fs.ModeSetgid == 0 {
			t.Errorf("directory mode %v, want %v with setgid", fi.Mode(), want)
		}
		mustAcquire(t, s, "k", req("h", "n", time.Second))
		for _, name := range []string{"k.lock", "k.json", "k.epoch"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o660 {
				t.Errorf("%s mode %v, want 0o660", name, fi.Mode().Perm())
			}
		}
		for _, perm := range []fs.FileMode{0o400, 0o200, 0o1600, fs.ModeDir | 0o700} {
			if _, err := New(t.TempDir(), WithPermissions(perm)); !errors.Is(err, backend.ErrInvalidOptions) {
				t.Errorf("WithPermissions(%v): %v, want ErrInvalidOptions", perm, err)
			}
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		// A setup that cannot work (the CLI exits 78), not an unknown
		// failure.
		_, err := New(path)
		if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "not a directory") || !strings.Contains(err.Error(), path) {
			t.Fatalf("New(file) = %v, want ErrMisconfigured naming it", err)
		}
		if _, err := New(filepath.Join(path, "sub")); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "a file stands where") {
			t.Fatalf("New(file/sub) = %v, want ErrMisconfigured naming the file in the way", err)
		}
	})
	t.Run("cannot be created", func(t *testing.T) {
		// procfs allows no new directory (mkdir answers ENOENT): a
		// setup that cannot work, like the cases above.
		if _, err := os.Stat("/proc/self"); err != nil {
			t.Skip("no /proc")
		}
		dir := "/proc/baton-test"
		if _, err := New(dir); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "cannot be created") {
			t.Fatalf("New(%s) = %v, want ErrMisconfigured saying it cannot be created", dir, err)
		}
	})
	t.Run("not writable", func(t *testing.T) {
		if runtime.GOOS == "linux" {
			// procfs refuses new files even to root, unlike a chmod-ed directory.
			_, err := New("/proc/self")
			if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "not writable") || !strings.Contains(err.Error(), "virtual file system") {
				t.Fatalf("New(/proc/self) = %v, want ErrMisconfigured: not writable, a virtual file system", err)
			}
		}
		if os.Geteuid() != 0 {
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o500); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, 0o700)
			if _, err := New(dir); err == nil || !strings.Contains(err.Error(), "not writable") {
				t.Fatalf("New(read-only dir) = %v, want not writable", err)
			}
		}
	})
	t.Run("empty", func(t *testing.T) {
		if _, err := New(""); !errors.Is(err, backend.ErrInvalidOptions) {
			t.Fatalf("New(\"\") = %v", err)
		}
	})
}

func TestContext(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)

	cancelled, cancel := context.WithCancel(bg)
	cancel()
	if _, err := s.TryAcquire(cancelled, "k", req("h", "n", time.Second)); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire with cancelled ctx: %v", err)
	}
	if _, err := s.Get(cancelled, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with cancelled ctx: %v", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("directory has %v", names)
	}

	// Another process holds the file lock (for example, it hangs in the
	// middle of an update): calls wait, but only as long as ctx allows.
	g := mustAcquire(t, s, "k", req("h", "n", time.Minute))
	h, err := openLockFile(filepath.Join(dir, "k.lock"), 0o600, true)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.tryLock(); !ok || err != nil {
		t.Fatalf("tryLock = %v, %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Renew(ctx, g); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew while the file is locked: %v, want DeadlineExceeded", err)
	}
	// Readers do not need the file lock.
	if rec := mustGet(t, s, "k"); !rec.Held() {
		t.Fatalf("Get = %+v", rec)
	}
	// The waiter gets the lock as soon as it is free.
	done := make(chan error, 1)
	go func() {
		_, err := s.Renew(bg, g)
		done <- err
	}()
	h.close()
	if err := <-done; err != nil {
		t.Fatalf("Renew after the file lock was freed: %v", err)
	}
}

// TestConcurrentGoroutines runs contenders with their own Stores in one
// process (flock excludes open file descriptions, not processes) and checks
// that no two hold the lock at once and tokens never repeat.
func TestConcurrentGoroutines(t *testing.T) {
	dir := t.TempDir()
	const workers, rounds = 8, 25
	var (
		holders atomic.Int32
		mu      sync.Mutex
		tokens  = map[uint64]bool{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		s := newStore(t, dir, nil)
		wg.Go(func() {
			for done := 0; done < rounds; {
				g, err := s.TryAcquire(bg, "k", req("w", baton.NewNonce(), time.Minute))
				if errors.Is(err, backend.ErrHeld) {
					continue
				}
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("worker %d holds token %d with %d holders", w, g.Token, n)
				}
				mu.Lock()
				if tokens[g.Token] {
					t.Errorf("token %d issued twice", g.Token)
				}
				tokens[g.Token] = true
				mu.Unlock()
				holders.Add(-1)
				if err := s.Release(bg, g); err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				done++
			}
		})
	}
	wg.Wait()
	if len(tokens) != workers*rounds {
		t.Fatalf("%d tokens, want %d", len(tokens), workers*rounds)
	}
	for i := uint64(1); i <= workers*rounds; i++ {
		if !tokens[i] {
			t.Fatalf("token %d missing", i)
		}
	}
}

func TestFencingCounterExhausted(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	r := validFree()
	r.key = "k"
	r.token = 1<<64 - 1
	if err := os.WriteFile(recordPath(dir, "k"), r.encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	before := readBytes(t, recordPath(dir, "k"))
	if _, err := s.TryAcquire(bg, "k", req("h", "n", time.Second)); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("TryAcquire at the last token: %v", err)
	}
	if !bytes.Equal(before, readBytes(t, recordPath(dir, "k"))) {
		t.Fatal("record changed")
	}
}

// TestWithMutex drives the store through baton's lock engine: a waiter
// blocked in Lock gets the lock when the holder unlocks, with a larger token.
func TestWithMutex(t *testing.T) {
	dir := t.TempDir()
	opts := []baton.Option{baton.WithTTL(2 * time.Second), baton.WithRenewDeadline(time.Second), baton.WithRetryPeriod(500 * time.Millisecond), baton.WithRenewInterval(300 * time.Millisecond)}
	m1, err := baton.NewMutex(newStore(t, dir, nil), "mutex", append(opts, baton.WithIdentity("one"))...)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := baton.NewMutex(newStore(t, dir, nil), "mutex", append(opts, baton.WithIdentity("two"))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	l1, err := m1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.TryLock(ctx); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryLock while held: %v", err)
	}
	got := make(chan *baton.Lease, 1)
	go func() {
		l2, err := m2.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		return
	}
	if l2.Token() <= l1.Token() || l2.Holder() != "two" {
		t.Fatalf("second lease: holder %q token %d after token %d", l2.Holder(), l2.Token(), l1.Token())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A read-only store writes nothing: it neither creates its directory nor
// probes it (the directory's modification time does not move), it reads
// what a writer wrote, and it refuses to write.
func TestReadOnly(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	ro, err := New(missing, ReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := ro.List(context.Background()); err != nil || len(recs) != 0 {
		t.Errorf("List of a missing directory: %v, %v; want no locks", recs, err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the read-only store created its directory: %v", err)
	}

	dir := t.TempDir()
	w, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, err := w.TryAcquire(context.Background(), "job", backend.Request{Holder: "h", Nonce: "n", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	ro, err = New(dir, ReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ro.Get(context.Background(), "job"); err != nil || r.Holder != "h" || r.Token != g.Token {
		t.Errorf("Get: %+v, %v; want held by h with token %d", r, err, g.Token)
	}
	if _, err := ro.TryAcquire(context.Background(), "other", backend.Request{Holder: "x", Nonce: "m", TTL: time.Minute}); !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("TryAcquire on a read-only store: %v, want ErrForbidden", err)
	}
	after, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the directory changed (mtime %v -> %v): the read-only store wrote to it", before.ModTime(), after.ModTime())
	}
}
