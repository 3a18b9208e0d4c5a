//go:build linux || darwin

package filestore

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// TestSwapSeesAChangeMadeMeanwhile: a change computed from a record that
// another process replaces before the first takes the file lock is not
// written; it is computed again from the new record.
func TestSwapSeesAChangeMadeMeanwhile(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	a, b := newStore(t, dir, clk), newStore(t, dir, clk)
	mustAcquire(t, a, "k", req("old", "n0", time.Minute))
	clk.advance(2 * time.Minute) // the claim expired; a and b both take it
	var bg2 backend.Grant
	a.beforeSwap = func() {
		a.beforeSwap = nil
		bg2 = mustAcquire(t, b, "k", req("b", "n2", time.Minute))
	}
	_, err := a.TryAcquire(bg, "k", req("a", "n1", time.Minute))
	wantHeld(t, err, "b", bg2.Token, time.Minute)
	if bg2.Token != 2 {
		t.Fatalf("b's token = %d, want 2", bg2.Token)
	}
	if rec := mustGet(t, a, "k"); rec.Holder != "b" || rec.Token != 2 {
		t.Fatalf("record = %+v, want b's claim with token 2", rec)
	}
	wantNoTemps(t, dir)
}

// TestSwapSeesExpiryMeanwhile: a renew whose claim expires between the
// read and the file lock is lost, and writes nothing.
func TestSwapSeesExpiryMeanwhile(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	s := newStore(t, dir, clk)
	g := mustAcquire(t, s, "k", req("h", "n", time.Minute))
	before := mustRead(t, recordPath(dir, "k"))
	clk.advance(59 * time.Second)
	s.beforeSwap = func() { clk.advance(2 * time.Second) }
	_, err := s.Renew(bg, g)
	wantErr(t, err, backend.ErrLost, "expired")
	if after := mustRead(t, recordPath(dir, "k")); string(after) != string(before) {
		t.Fatalf("record rewritten:\n%s\nwant\n%s", after, before)
	}
	wantNoTemps(t, dir)
}

// TestSwapGivesUpToTheFileLock: a change that keeps losing the race is
// made under the file lock, where nobody can change the record.
func TestSwapGivesUpToTheFileLock(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	a, b := newStore(t, dir, clk), newStore(t, dir, clk)
	ga := mustAcquire(t, a, "k", req("a", "n", time.Minute))
	gb := ga // b renews a's claim (as another goroutine of a would)
	swaps := 0
	a.beforeSwap = func() {
		swaps++
		if _, err := b.Renew(bg, gb); err != nil {
			t.Errorf("the racing renew: %v", err)
		}
		clk.advance(time.Millisecond)
	}
	if _, err := a.Renew(bg, ga); err != nil {
		t.Fatalf("Renew that lost the race %d times: %v", fastTries, err)
	}
	if swaps != fastTries {
		t.Fatalf("%d swaps tried, want %d", swaps, fastTries)
	}
	wantNoTemps(t, dir)
}

func TestNewRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	old, fresh := filepath.Join(dir, "k"+tempSuffix+"-00000000000000aa"), filepath.Join(dir, "k"+tempSuffix+"-00000000000000bb")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	newStore(t, dir, nil)
	if names := dirNames(t, dir); !slices.Equal(names, []string{filepath.Base(fresh)}) {
		t.Fatalf("directory has %v, want only the fresh temporary file", names)
	}
}

func TestIsTemp(t *testing.T) {
	for name, want := range map[string]bool{
		"k.json.tmp-0123456789abcdef":      true,
		"k.json.tmp-0123456789abcdef.json": false, // the record of a lock with that name
		"k.json.tmp-0123456789abcdef.lock": false,
		"k.json.tmp-0123456789abcde":       false,
		"k.json.tmp-0123456789abcdeg":      false,
		"k.json.tmp":                       false, // an older version's temporary file
		"k.json":                           false,
	} {
		if got := isTemp(name); got != want {
			t.Errorf("isTemp(%q) = %v, want %v", name, got, want)
		}
	}
}

func wantNoTemps(t *testing.T, dir string) {
	t.Helper()
	for _, n := range dirNames(t, dir) {
		if isTemp(n) {
			t.Errorf("temporary file left: %s", n)
		}
	}
}
