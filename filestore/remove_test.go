//go:build linux || darwin

package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
)

// Remove deletes a released lock's files, and the lock's tokens go on
// increasing when it is used again; a lock first created after the
// removal starts above the removed one's last token.
func TestRemoveKeepsCounter(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	var last backend.Grant
	for range 3 {
		last = mustAcquire(t, s, "slot", req("a", baton.NewNonce(), time.Minute))
		if err := s.Release(bg, last); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove(bg, "slot"); err != nil {
		t.Fatalf("Remove of a released lock: %v", err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{floorName, floorLock}) {
		t.Fatalf("directory after Remove: %v, want only %s and %s", names, floorName, floorLock)
	}
	if _, err := s.Get(bg, "slot"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get after Remove: %v, want ErrNotFound", err)
	}
	again := mustAcquire(t, newStore(t, dir, nil), "slot", req("b", "n", time.Minute))
	if again.Token <= last.Token {
		t.Fatalf("token %d after Remove of a lock whose last token was %d", again.Token, last.Token)
	}
	other := mustAcquire(t, s, "other", req("b", "n", time.Minute))
	if other.Token <= last.Token {
		t.Fatalf("a lock created after a removal got token %d, not above the floor %d", other.Token, last.Token)
	}
}

// Remove refuses a live claim, and one kept only in the guard of a deleted
// record, leaving them as they are; it removes a claim that expired on
// the machine's clock without a release.
func TestRemoveRefusesLiveClaims(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	s := newStore(t, dir, clk)
	const ttl = 10 * time.Second
	g := mustAcquire(t, s, "job", req("a", "n", ttl))
	wantHeld(t, s.Remove(bg, "job"), "a", g.Token, ttl)
	if _, err := s.Renew(bg, g); err != nil {
		t.Fatalf("Renew after a refused Remove: %v", err)
	}

	removeRecord(t, dir, "job")
	clk.advance(time.Second)
	wantHeld(t, s.Remove(bg, "job"), "a", g.Token, ttl-time.Second)
	if names := dirNames(t, dir); !slices.Contains(names, "job.lock") {
		t.Fatalf("a refused Remove deleted the lock file: %v", names)
	}
	// Once that claim has expired, the guard stands for the deleted record.
	clk.advance(ttl)
	if err := s.Remove(bg, "job"); err != nil {
		t.Fatalf("Remove of a deleted record whose claim expired: %v", err)
	}
	if names := dirNames(t, dir); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "job.") }) {
		t.Fatalf("Remove of a deleted record left its files: %v", names)
	}
	if g1 := mustAcquire(t, newStore(t, dir, clk), "job", req("b", "m", ttl)); g1.Token <= g.Token {
		t.Fatalf("token %d after %d", g1.Token, g.Token)
	}

	g2 := mustAcquire(t, s, "expired", req("a", "n", ttl))
	clk.advance(ttl)
	if err := s.Remove(bg, "expired"); err != nil {
		t.Fatalf("Remove of a claim expired on the machine clock: %v", err)
	}
	if _, err := s.Renew(bg, g2); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew of the removed claim: %v, want ErrLost", err)
	}
	if err := s.Release(bg, g2); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Release of the removed claim: %v, want ErrLost", err)
	}
	if names := dirNames(t, dir); slices.Contains(names, "expired.lock") {
		t.Fatalf("the late Release created the removed lock's file again: %v", names)
	}
	g3 := mustAcquire(t, newStore(t, dir, clk), "expired", req("b", "m", ttl))
	if g3.Token <= g2.Token {
		t.Fatalf("token %d after %d", g3.Token, g2.Token)
	}
}

// A process that opened a lock file before it was removed, and takes its
// flock after, must not count as holding the lock's flock: another
// process may hold the flock of the lock file created since.
func TestLockAfterRemoval(t *testing.T) {
	dir := t.TempDir()
	s, remover := newStore(t, dir, nil), newStore(t, dir, nil)
	g := mustAcquire(t, s, "job", req("a", "n", time.Minute))
	if err := s.Release(bg, g); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "job.lock")
	var other lockHandle = -1
	s.lockOpened = func(string) {
		s.lockOpened = nil
		// After s opened the lock file: remove the lock, and let another
		// process hold the flock of the file created again.
		if err := remover.Remove(bg, "job"); err != nil {
			t.Errorf("Remove: %v", err)
		}
		h, err := openLockFile(path, 0o600, true)
		if err != nil {
			t.Error(err)
			return
		}
		if ok, err := h.tryLock(); !ok || err != nil {
			t.Errorf("tryLock of the new lock file: %v, %v", ok, err)
		}
		other = h
	}
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	if h, err := s.lock(ctx, path, true); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			h.close()
		}
		t.Fatalf("lock while another process holds the new file's flock: %v, want DeadlineExceeded", err)
	}
	other.close()
	h, err := s.lock(bg, path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if same, err := h.names(path); !same || err != nil {
		t.Fatalf("lock holds a file the path does not name (%v, %v)", same, err)
	}
	// Without create, a removed lock file is not made again.
	if err := remover.Remove(bg, "never"); err != nil {
		t.Fatalf("Remove of a lock never created: %v", err)
	}
	if names := dirNames(t, dir); slices.Contains(names, "never.lock") {
		t.Fatalf("Remove created a lock file: %v", names)
	}
}

// Many Stores (as many processes would) acquire, release and remove one
// lock at once: one holder at a time, and every token larger than the
// ones before.
func TestRemoveConcurrent(t *testing.T) {
	dir := t.TempDir()
	var (
		mu       sync.Mutex
		holding  bool
		last     uint64
		removed  int
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				// A new Store each time, as a new process: a Store that saw a
				// claim waits after a removal (see Removing locks).
				s := newStore(t, dir, nil)
				g, err := s.TryAcquire(bg, "job", req(fmt.Sprint("w", w), fmt.Sprint(i), time.Minute))
				if err == nil {
					mu.Lock()
					if holding || g.Token <= last {
						failures = append(failures, fmt.Sprintf("w%d got token %d while held=%v, last token %d", w, g.Token, holding, last))
					}
					holding, last = true, g.Token
					mu.Unlock()
					runtime.Gosched() // let the others try while it holds
					mu.Lock()
					holding = false
					mu.Unlock()
					if err := s.Release(bg, g); err != nil {
						fail("Release: %v", err)
					}
				} else if !errors.Is(err, backend.ErrHeld) {
					fail("TryAcquire: %v", err)
				}
				switch err := s.Remove(bg, "job"); {
				case err == nil:
					mu.Lock()
					removed++
					mu.Unlock()
				case !errors.Is(err, backend.ErrHeld):
					fail("Remove: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failures, the first: %s", len(failures), failures[0])
	}
	if removed == 0 {
		t.Fatal("no Remove succeeded")
	}
	t.Logf("%d removals, last token %d", removed, last)
}

// A floor file that does not decode is reported with its path, and never
// overwritten: no lock is created, and no lock removed, until it is
// repaired.
func TestCorruptFloor(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	g := mustAcquire(t, s, "kept", req("a", "n", time.Minute))
	if err := s.Release(bg, g); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, floorName)
	bad := []byte(`{"version":1,"token":"7"}` + "\n")
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.TryAcquire(bg, "new", req("a", "n", time.Minute))
	wantErr(t, err, backend.ErrCorruptRecord, path)
	wantErr(t, s.Remove(bg, "kept"), backend.ErrCorruptRecord, `write it again as {"version":1,"token":N}`)
	if got := readBytes(t, path); string(got) != string(bad) {
		t.Fatalf("the corrupt floor was overwritten: %q", got)
	}
	if names := dirNames(t, dir); !slices.Contains(names, "kept.json") {
		t.Fatalf("Remove with a corrupt floor deleted the record: %v", names)
	}
}

func TestTokenAfter(t *testing.T) {
	for _, c := range []struct{ t, want uint64 }{
		{0, 1},
		{1, 2},
		{nMask - 1, nMask},
		{nMask, firstToken(1)},
		{firstToken(3) + 5, firstToken(3) + 6},
		{3<<epochShift | nMask, firstToken(4)},
	} {
		if got := tokenAfter(c.t); got != c.want {
			t.Errorf("tokenAfter(%#x) = %#x, want %#x", c.t, got, c.want)
		}
	}
}
