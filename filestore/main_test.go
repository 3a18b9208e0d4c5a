package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"go.uber.org/goleak"
)

// helperEnv is set to "1" in the child processes of
// TestCrossProcessExclusion; TestMain sends them to helperMain.
const helperEnv = "BATON_FILE_HELPER"

// timensHelper, set on Linux, is the child process of TestTimeNamespace,
// run in a time namespace of its own when timensHelperEnv names a lock
// directory.
var timensHelper func(dir string) int

const timensHelperEnv = "BATON_FILE_TIMENS_HELPER"

// usernsHelperEnv names the lock directory that the child of
// TestUserNamespacePermission, root in a user namespace of its own, may
// not write.
const usernsHelperEnv = "BATON_FILE_USERNS_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		// A child process of TestCrossProcessExclusion.
		os.Exit(helperMain())
	}
	if dirs := os.Getenv(permHelperEnv); dirs != "" {
		// A child process of TestPermissionDenied, run as another user.
		os.Exit(permHelperMain(dirs))
	}
	if dir := os.Getenv(usernsHelperEnv); dir != "" {
		_, err := New(dir)
		fmt.Println(err)
		os.Exit(0)
	}
	if dir := os.Getenv(timensHelperEnv); dir != "" && timensHelper != nil {
		os.Exit(timensHelper(dir))
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is a machine clock that moves only when told.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(int64(1000 * time.Hour)) // a machine up for a while
	return c
}

func (c *fakeClock) now() (int64, error)     { return c.ns.Load(), nil }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// newStore returns a Store on dir; with clk, its machine clock is clk.
func newStore(t testing.TB, dir string, clk *fakeClock) *Store {
	t.Helper()
	s, err := New(dir)
	if err != nil {
		t.Fatalf("New(%q): %v", dir, err)
	}
	if clk != nil {
		s.now = clk.now
	}
	return s
}

func req(holder, nonce string, ttl time.Duration) backend.Request {
	return backend.Request{Holder: holder, Nonce: nonce, TTL: ttl}
}

func mustAcquire(t *testing.T, s *Store, key string, r backend.Request) backend.Grant {
	t.Helper()
	g, err := s.TryAcquire(context.Background(), key, r)
	if err != nil {
		t.Fatalf("TryAcquire(%q, %+v): %v", key, r, err)
	}
	if g.Key != key || g.Holder != r.Holder || g.Nonce != r.Nonce || g.TTL != r.TTL {
		t.Fatalf("TryAcquire(%q, %+v) = %+v: grant does not match the request", key, r, g)
	}
	return g
}

func mustGet(t *testing.T, s *Store, key string) backend.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return rec
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func recordPath(dir, key string) string { return filepath.Join(dir, fileBase(key)+recordSuffix) }
