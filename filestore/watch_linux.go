package filestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/baton-go/baton/backend"
	"golang.org/x/sys/unix"
)

// Events that may mean a record changed: a rename onto it (every write by
// this package), a write in place or removal (an administrator), a rename
// away from it.
const watchMask = unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// Watch implements backend.Watcher with inotify on the lock directory. The
// returned channel (buffer 1) receives a value after key's record was
// replaced, written, or removed; several changes may fold into one value.
// It is closed when ctx ends or the watch breaks (the directory was removed
// or moved, or reading inotify failed). The goroutine reading inotify ends
// with it; no file descriptor outlives it.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := backend.ValidateName(key); err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("file: watch %q: inotify_init1: %w%s", key, err, inotifyFix(err))
	}
	if _, err := unix.InotifyAddWatch(fd, s.dir, watchMask); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("file: watch %q: inotify_add_watch %s: %w%s", key, s.dir, err, inotifyFix(err))
	}
	// A non-blocking descriptor joins the runtime's poller, so Read parks
	// the goroutine and Close from another goroutine wakes it.
	f := os.NewFile(uintptr(fd), "inotify "+s.dir)
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	ch := make(chan struct{}, 1)
	target := []byte(fileBase(key) + recordSuffix)
	go func() {
		defer close(ch)
		defer func() {
			if stop() { // ctx has not ended: the watch broke; close here
				_ = f.Close()
			}
		}()
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			changed, broken := scanEvents(buf[:n], target)
			if changed {
				select {
				case ch <- struct{}{}:
				default: // a value is pending already
				}
			}
			if broken {
				return
			}
		}
	}()
	return ch, nil
}

// inotifyFix names the limit behind err, a failure to open a watch, and
// how to raise it; "" for other errors. Each waiting lock holds one
// inotify instance with one watch; without them it polls.
func inotifyFix(err error) string {
	switch {
	case errors.Is(err, unix.EMFILE):
		return " (the user's inotify instances, the fs.inotify.max_user_instances sysctl, or this process's open files, ulimit -n, are all in use: raise the limit; until then waiters poll)"
	case errors.Is(err, unix.ENOSPC):
		return " (the user's inotify watches, the fs.inotify.max_user_watches sysctl, are all in use: raise it; until then waiters poll)"
	case errors.Is(err, unix.ENFILE):
		return " (the system has no file descriptor left, the fs.file-max sysctl: raise it; until then waiters poll)"
	}
	return ""
}

// scanEvents reports whether the inotify events in buf concern the file
// named target (or may have: a queue overflow), and whether the watch has
// ended.
func scanEvents(buf, target []byte) (changed, broken bool) {
	for len(buf) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(buf[4:8])
		nameLen := int(binary.NativeEndian.Uint32(buf[12:16]))
		end := unix.SizeofInotifyEvent + nameLen
		if end > len(buf) {
			return changed, true // cannot happen: the kernel returns whole events
		}
		name := buf[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		buf = buf[end:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			changed = true
		case mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0:
			broken = true
		case bytes.Equal(name, target):
			changed = true
		}
	}
	return changed, broken
}
