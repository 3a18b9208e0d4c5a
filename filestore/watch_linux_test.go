package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// await fails the test if ch yields nothing (or is closed, unless wantClosed)
// within a generous bound; events normally arrive within microseconds.
func await(t *testing.T, ch <-chan struct{}, wantClosed bool, what string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if ok == !wantClosed {
				return
			}
			if ok { // a pending change before the close
				continue
			}
			t.Fatalf("%s: channel closed", what)
		case <-timer.C:
			t.Fatalf("%s: nothing within 10s", what)
		}
	}
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	watcher, writer := newStore(t, dir, nil), newStore(t, dir, nil)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch, err := watcher.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if cap(ch) != 1 {
		t.Errorf("channel capacity %d, want 1", cap(ch))
	}
	g := mustAcquire(t, writer, "w", req("h", "n", time.Minute))
	await(t, ch, false, "after acquire")
	if _, err := writer.Renew(bg, g); err != nil {
		t.Fatal(err)
	}
	await(t, ch, false, "after renew")
	if err := writer.Release(bg, g); err != nil {
		t.Fatal(err)
	}
	await(t, ch, false, "after release")
	if err := os.Remove(recordPath(dir, "w")); err != nil {
		t.Fatal(err)
	}
	await(t, ch, false, "after removal")

	// Many changes fold into one pending value; nothing blocks.
	for range 5 {
		g := mustAcquire(t, writer, "w", req("h", "n", time.Minute))
		if err := writer.Release(bg, g); err != nil {
			t.Fatal(err)
		}
	}
	await(t, ch, false, "after several changes")

	cancel()
	await(t, ch, true, "after cancel")
}

func TestWatchLongName(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	key := ""
	for len(key) < 250 {
		key += "long-name."
	}
	key += "x"
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch, err := s.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, key, req("h", "n", time.Minute))
	await(t, ch, false, "after acquire")
}

func TestWatchEndsWhenDirectoryGoes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	s := newStore(t, dir, nil)
	ch, err := s.Watch(bg, "w") // never cancelled: the watch must end by itself
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	await(t, ch, true, "after the directory was removed")
	if _, err := s.Watch(bg, "w"); err == nil {
		t.Fatal("Watch on a removed directory succeeded")
	}
}

func TestWatchCancelledContext(t *testing.T) {
	s := newStore(t, t.TempDir(), nil)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := s.Watch(ctx, "w"); err == nil {
		t.Fatal("Watch with a cancelled context succeeded")
	}
}

// TestWatchOutOfDescriptors: a watch that cannot get an inotify instance
// (inotify_init1 answers EMFILE for the user's max_user_instances and for
// the process's open files alike) names both limits; the engine then
// polls and logs that error.
func TestWatchOutOfDescriptors(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lowerNofile(t)
	_, err = s.Watch(context.Background(), "job")
	if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "fs.inotify.max_user_instances") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("Watch = %v, want EMFILE naming max_user_instances and ulimit -n", err)
	}
}
