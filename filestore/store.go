package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
)

// DefaultPermissions is the mode of the files the store creates, whatever
// the umask. New creates a missing directory with the same bits plus the
// matching search (x) bits: 0o700 by default.
const DefaultPermissions fs.FileMode = 0o600

// Store is a backend.Backend (and backend.Watcher, backend.Lister,
// backend.Remover) that keeps its records in a directory on the local file
// system. See the package documentation.
//
// A Store holds no open files or goroutines between calls, so it needs no
// Close; any number of Stores, in any number of processes on the machine,
// may use one directory at once. Its methods are safe for concurrent use.
type Store struct {
	dir    string
	perm   fs.FileMode
	bootID string
	// containerBoot: bootID is a container's own (see ContainerBootID).
	containerBoot bool
	// now reads the machine clock; wall the wall clock (status only).
	// Tests replace them.
	now      func() (int64, error)
	wall     func() time.Time
	seen     seenClaims  // see seen.go
	foreign  foreignBoot // see foreign.go
	readOnly bool        // see ReadOnly
	// beforeSwap, if set, runs between the two halves of a change's
	// compare-and-swap (see update.go). Tests set it to race a change.
	beforeSwap func()
	// lockOpened, if set, runs after lock opened a lock file and before
	// it takes the flock. Tests set it to race a removal.
	lockOpened func(path string)
}

var (
	_ backend.Backend = (*Store)(nil)
	_ backend.Watcher = (*Store)(nil)
	_ backend.Lister  = (*Store)(nil)
	_ backend.Remover = (*Store)(nil)
)

// Option configures New.
type Option func(*options)

type options struct {
	perm     fs.FileMode
	readOnly bool
}

// ReadOnly opens the store for reading only (Get, List, Watch), as status
// views need: New then neither creates the directory nor checks that it is
// writable, and every operation that would write (TryAcquire, Renew,
// Release, ForceRelease) fails with an error matching backend.ErrForbidden.
// A missing directory reads as one without locks (List) or records (Get).
func ReadOnly() Option {
	return func(o *options) { o.readOnly = true }
}

// WithPermissions sets the mode of the lock and record files the store
// creates, exactly, whatever the process's umask (the owner needs read and
// write). A missing directory is created with these bits plus search bits
// where they have read bits: WithPermissions(0o660) gives 0o770, for a
// directory shared by a group (under the common umask 022 it gave 0o750 and
// files of 0o640, which refused the group's other users). Files that exist
// keep their modes. Default DefaultPermissions. Anyone who can open a lock file can
// also hold its flock and so block the lock; anyone who can write the
// directory can rewrite records. Share the directory only with processes
// you trust to follow the protocol.
func WithPermissions(perm fs.FileMode) Option {
	return func(o *options) { o.perm = perm }
}

// New returns a Store on the directory dir, creating it (and its parents)
// if it does not exist. It fails if dir is not a directory, is not
// writable, or the platform is not supported (only Linux and macOS are).
// Here and in every operation, a permission the file system refuses gives
// an error matching backend.ErrForbidden (the engine does not retry it),
// and a read-only file system one matching backend.ErrMisconfigured; both
// name the directory and the fix.
//
// dir should be on a local file system that survives reboots if fencing
// tokens are to keep increasing across reboots: not a tmpfs such as
// /run/user/UID, and not NFS (see the package documentation).
func New(dir string, opts ...Option) (*Store, error) {
	o := options{perm: DefaultPermissions}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.perm&^fs.ModePerm != 0 || o.perm&0o600 != 0o600 {
		return nil, fmt.Errorf("file: %w: permissions %v must be permission bits only and include owner read and write (0o600)", backend.ErrInvalidOptions, o.perm)
	}
	if dir == "" {
		return nil, fmt.Errorf("file: %w: lock directory is empty", backend.ErrInvalidOptions)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: lock directory %q: %w", dir, err)
	}
	bootID, err := readBootID()
	if err != nil {
		return nil, err
	}
	if _, err := machineNow(); err != nil {
		return nil, err
	}
	st := &Store{
		dir:           abs,
		perm:          o.perm,
		bootID:        bootID,
		containerBoot: bootIDMounted(),
		now:           machineNow,
		wall:          time.Now,
		readOnly:      o.readOnly,
	}
	if o.readOnly {
		return st, nil
	}
	switch fi, err := os.Stat(abs); {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(abs, dirPerm(o.perm)); err != nil {
			return nil, fmt.Errorf("file: creating lock directory: %w", mkdirError(err, abs))
		}
		if err := chmodPastUmask(abs, dirPerm(o.perm)); err != nil {
			return nil, fmt.Errorf("file: creating lock directory: %w", fsError(err, abs))
		}
	case err != nil:
		return nil, fmt.Errorf("file: lock directory: %w", fsError(err, abs))
	case !fi.IsDir():
		return nil, fmt.Errorf("file: %w: lock directory %s is not a directory (mode %v): name a directory, or move the file", backend.ErrMisconfigured, abs, fi.Mode())
	}
	// Check writability by writing: permission bits do not tell about
	// read-only mounts, ACLs or root.
	probe, err := os.CreateTemp(abs, ".baton-probe-*")
	if err != nil {
		return nil, fmt.Errorf("file: lock directory %s is not writable: %w", abs, probeError(err, abs))
	}
	_ = probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return nil, fmt.Errorf("file: lock directory %s: removing probe file: %w", abs, err)
	}
	removeStaleTemps(abs, time.Now())
	return st, nil
}

// chmodPastUmask gives the directory dir, just created, the permission
// bits perm that the umask stripped, and keeps the setgid bit that a
// parent's setgid gave it (its files then belong to the parent's group).
func chmodPastUmask(dir string, perm fs.FileMode) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	return os.Chmod(dir, perm|fi.Mode()&fs.ModeSetgid)
}

// dirPerm adds search bits where perm has read bits.
func dirPerm(perm fs.FileMode) fs.FileMode { return perm | (perm&0o444)>>2 }

// Dir returns the absolute path of the lock directory.
func (s *Store) Dir() string { return s.dir }

// ContainerBootID reports whether this process sees a boot ID of its own
// instead of the kernel's: a file mounted over
// /proc/sys/kernel/random/boot_id, as systemd-nspawn and LXC (LXD, Incus)
// give each container. Its claims carry that ID, so processes on this
// machine outside the container, or in another such container, that share
// the directory count them as expired, and this process counts theirs so:
// they do not exclude each other (see "One machine, local file system" in
// the package documentation). baton doctor warns about it.
func (s *Store) ContainerBootID() bool { return s.containerBoot }

// TryAcquire implements backend.Backend. See the package documentation for
// when a claim counts as expired.
func (s *Store) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	if err := backend.ValidateName(key); err != nil {
		return backend.Grant{}, fmt.Errorf("file: %w", err)
	}
	if err := checkRequest(req.Holder, req.Nonce, req.TTL); err != nil {
		return backend.Grant{}, fmt.Errorf("file: lock %q: %w", key, err)
	}
	if err := s.checkForeign(key); err != nil {
		return backend.Grant{}, err
	}
	r, now, err := s.update(ctx, key, func(p paths, old *record, now int64, slow bool) (*record, error) {
		r := &record{
			key:     key,
			holder:  req.Holder,
			nonce:   req.Nonce,
			ttl:     req.TTL,
			bootID:  s.bootID,
			expires: now + int64(req.TTL),
		}
		if err := s.nextClaim(p, key, old, now, r, slow); err != nil {
			return nil, err
		}
		wall := s.wall()
		r.acquireTime, r.renewTime = wall, wall
		return r, nil
	})
	if err != nil {
		// A refusal is when this Store records a claim of another's.
		s.pruneSeen(ctx)
		return backend.Grant{}, err
	}
	s.seen.saw(key, r, now, s.bootID)
	return backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, Token: r.token, TTL: req.TTL}, nil
}

// pruneSeen forgets the claims this Store saw on locks whose records now
// show them ended, once the map of claims seen has doubled (see
// seenClaims): one read of a record per entry whose claim, as last seen,
// has ended, until ctx ends. A record that cannot be read, or is not read
// before ctx ends, keeps its entry.
func (s *Store) pruneSeen(ctx context.Context) {
	if ctx.Err() != nil {
		return // not due(): it would count a prune that reads nothing
	}
	ended, now := s.seen.due(s.now)
	if ended == nil {
		return
	}
	defer s.seen.pruned()
	for key, sc := range ended {
		if ctx.Err() != nil {
			return
		}
		if _, r, err := s.read(key, s.paths(key).record); err == nil {
			s.seen.reread(key, sc, r, now, s.bootID)
		}
	}
}

// nextClaim fills in r's token and transitions for an acquisition that
// finds old (nil if the record is missing) at machine time now, or
// returns a *backend.HeldError if the lock is, or may still be, held. It
// writes the epoch file when the record must be created or n would
// overflow (see epoch.go), or returns errSlowPath if it would and slow is
// false.
func (s *Store) nextClaim(p paths, key string, old *record, now int64, r *record, slow bool) error {
	if old == nil {
		// Deleted (or never created): the claim kept in the guard, and
		// any this Store saw, must end first; the later one decides.
		held, seen := s.guardHeld(p, key, now), s.seen.missing(key, now)
		if seen != nil && (held == nil || seen.RetryAfter > held.RetryAfter) {
			held = seen
		}
		if held != nil {
			return held
		}
		if !slow {
			return errSlowPath
		}
		t, err := s.createToken(p, key)
		r.token = t
		return err
	}
	s.seen.saw(key, old, now, s.bootID)
	if held := old.held(now, s.bootID); held != nil {
		return held
	}
	r.transitions = old.transitions
	if old.holder != r.holder {
		r.transitions++ // cannot overflow: transitions < token
	}
	if t, ok := nextToken(old.token); ok {
		r.token = t
		return s.keepEpoch(p, key, old, slow)
	}
	if !slow {
		return errSlowPath
	}
	e, err := s.nextEpoch(p, key, old)
	r.token = firstToken(e)
	return err
}

// Renew implements backend.Backend: it extends g's claim to g.TTL from now,
// if g's owner still holds it and it has not expired. An expired claim is
// lost even if nobody has taken it yet.
func (s *Store) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	if err := backend.ValidateName(g.Key); err != nil {
		return backend.Grant{}, fmt.Errorf("file: %w", err)
	}
	if err := checkRequest(g.Holder, g.Nonce, g.TTL); err != nil {
		return backend.Grant{}, fmt.Errorf("file: lock %q: %w", g.Key, err)
	}
	r, now, err := s.update(ctx, g.Key, func(_ paths, old *record, now int64, _ bool) (*record, error) {
		if old == nil {
			s.seen.missing(g.Key, now) // deleted under its holder; see seen.go
		}
		if err := s.checkOwned(g, old, now); err != nil {
			return nil, err
		}
		r := *old
		r.ttl = g.TTL
		r.expires = now + int64(g.TTL)
		r.renewTime = s.wall()
		return &r, nil
	})
	if err != nil {
		return backend.Grant{}, err
	}
	s.seen.saw(g.Key, r, now, s.bootID)
	g.Version = ""
	return g, nil
}

// Release implements backend.Backend: it frees g's key if g's owner still
// holds it and the claim has not expired, keeping the fencing counter.
func (s *Store) Release(ctx context.Context, g backend.Grant) error {
	_, _, err := s.update(ctx, g.Key, func(p paths, old *record, now int64, slow bool) (*record, error) {
		if old == nil && !slow {
			if _, err := os.Lstat(p.lock); errors.Is(err, fs.ErrNotExist) {
				return nil, s.checkOwned(g, old, now) // removed: no guard, and no lock file to create
			}
			return nil, errSlowPath // to free the guard
		}
		if old == nil {
			s.freeGuard(p, g)
		}
		if err := s.checkOwned(g, old, now); err != nil {
			return nil, err
		}
		r := free(*old)
		return &r, nil
	})
	if err != nil {
		return err
	}
	s.seen.forget(g.Key)
	return nil
}

// ForceRelease frees key whoever holds it, keeping the fencing counter: the
// next holder gets a larger token. It is an administrator's action (the
// "release" command of the CLI); a holder whose claim is force-released
// learns it at its next renew, and until then may still believe it holds
// the lock, which is what fencing tokens are for. It returns an error
// matching backend.ErrNotFound if key has no record, and succeeds if the key
// is already free.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	_, _, err := s.update(ctx, key, func(p paths, old *record, now int64, slow bool) (*record, error) {
		switch {
		case old == nil && s.guardHeld(p, key, now) != nil:
			// Deleted while held: free the claim its guard keeps.
			if !slow {
				return nil, errSlowPath
			}
			r := free(*s.readGuard(p, key))
			return nil, s.writeGuard(p, &r)
		case old == nil:
			return nil, fmt.Errorf("file: lock %q: %w (%s)", key, backend.ErrNotFound, p.record)
		case old.holder == "":
			return nil, nil
		}
		r := free(*old)
		return &r, nil
	})
	if err != nil {
		return err
	}
	s.seen.forget(key)
	return nil
}

// free returns r without holder: a record of a released key.
func free(r record) record {
	r.holder, r.nonce, r.bootID, r.expires = "", "", "", 0
	return r
}

// Get implements backend.Backend. It reads without taking the file lock:
// records are replaced by rename, so a reader sees the old or the new one.
func (s *Store) Get(ctx context.Context, key string) (backend.Record, error) {
	if err := backend.ValidateName(key); err != nil {
		return backend.Record{}, fmt.Errorf("file: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return backend.Record{}, err
	}
	defer s.pruneSeen(ctx)
	p := s.paths(key)
	_, r, err := s.read(key, p.record)
	if err != nil {
		return backend.Record{}, fsError(err, s.dir)
	}
	now, err := s.now()
	if err != nil {
		return backend.Record{}, err
	}
	if r == nil {
		s.seen.missing(key, now) // starts the count if a claim was seen
		if s.guardHeld(p, key, now) != nil {
			return s.readGuard(p, key).toRecord(now, s.bootID), nil // deleted while held
		}
		return backend.Record{}, fmt.Errorf("file: lock %q: %w (%s)", key, backend.ErrNotFound, p.record)
	}
	s.seen.saw(key, r, now, s.bootID)
	return r.toRecord(now, s.bootID), nil
}

// List implements backend.Lister: the records of all locks in the directory,
// sorted by name. Records that cannot be read or decoded are left out and
// reported, each with its path, in the error (an errors.Join); the others
// are still returned.
func (s *Store) List(ctx context.Context) ([]backend.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.dir)
	if s.readOnly && errors.Is(err, fs.ErrNotExist) {
		return nil, nil // see ReadOnly
	}
	if err != nil {
		return nil, fmt.Errorf("file: listing locks: %w", fsError(err, s.dir))
	}
	now, err := s.now()
	if err != nil {
		return nil, err
	}
	var (
		recs []backend.Record
		errs []error
	)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, recordSuffix) || strings.HasPrefix(name, ".") || e.IsDir() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path := filepath.Join(s.dir, name)
		data, err := readFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed since ReadDir
		case err != nil:
			errs = append(errs, fmt.Errorf("file: %w", fsError(err, s.dir)))
			continue
		}
		r, err := decodeRecord(data)
		if err == nil && fileBase(r.key) != strings.TrimSuffix(name, recordSuffix) {
			err = corrupt("record is for lock %q, whose record file is %s", r.key, fileBase(r.key)+recordSuffix)
		}
		if err != nil {
			errs = append(errs, corruptRecordError(path, err))
			continue
		}
		recs = append(recs, r.toRecord(now, s.bootID))
	}
	slices.SortFunc(recs, func(a, b backend.Record) int { return strings.Compare(a.Key, b.Key) })
	return recs, errors.Join(errs...)
}

// checkRequest validates an owner and TTL before anything is written, so
// that every record written decodes again.
func checkRequest(holder, nonce string, ttl time.Duration) error {
	if err := checkOwner(holder, nonce); err != nil {
		return fmt.Errorf("%w: %v", backend.ErrInvalidOptions, err)
	}
	if ttl <= 0 || ttl > maxTTL {
		return fmt.Errorf("%w: TTL %v is not in (0, %v]", backend.ErrInvalidOptions, ttl, maxTTL)
	}
	return nil
}

// checkOwned returns nil if old is g's unexpired claim, else an error
// matching backend.ErrLost that says what happened.
func (s *Store) checkOwned(g backend.Grant, old *record, now int64) error {
	lost := func(format string, args ...any) error {
		return fmt.Errorf("file: lock %q: %w: "+format, append([]any{g.Key, backend.ErrLost}, args...)...)
	}
	switch {
	case old == nil:
		return lost("the record is gone")
	case old.holder == "":
		return lost("it was released (token %d)", old.token)
	case !old.owns(g.Holder, g.Nonce) && old.bootID != s.bootID:
		return s.takenByForeignBoot(g.Key, old)
	case !old.owns(g.Holder, g.Nonce):
		return lost("it is now held by %q (token %d)", old.holder, old.token)
	case old.token != g.Token:
		return lost("the grant has token %d, the claim token %d", g.Token, old.token)
	case old.bootID != s.bootID:
		return lost("the claim was made before the machine rebooted")
	case now >= old.expires:
		return lost("the claim expired %v ago", time.Duration(now-old.expires))
	}
	return nil
}

// Waiting for a file lock held by another process: flock cannot be
// interrupted by a context, so poll with LOCK_NB, backing off from
// minLockWait to maxLockWait. Holders keep the lock only for one read,
// one pwrite and one rename (see update.go).
const (
	minLockWait = 50 * time.Microsecond
	maxLockWait = 5 * time.Millisecond
	// maxFlockWait bounds the wait: a file lock held this long is held
	// by a process that is stopped or hung, and may be for ever.
	maxFlockWait = 5 * time.Second
)

// lock opens the lock file at path (creating it if create is true; if not,
// a missing file is an error matching fs.ErrNotExist) and takes its flock,
// waiting as long as ctx allows. Remove deletes a lock file while it holds
// its flock, and another process may have opened that file before and be
// waiting for its flock; so once the flock is taken, lock checks that path
// still names the file it locked, and starts over on the file now there if
// not. Two processes never hold the flocks of two files of one name.
func (s *Store) lock(ctx context.Context, path string, create bool) (lockHandle, error) {
	for {
		h, err := openLockFile(path, s.perm, create)
		if err != nil {
			return -1, err
		}
		if s.lockOpened != nil {
			s.lockOpened(path)
		}
		if err := waitLock(ctx, h, path); err != nil {
			h.close()
			return -1, err
		}
		same, err := h.names(path)
		if same {
			return h, nil
		}
		h.close()
		if err != nil {
			return -1, err
		}
	}
}

// waitLock takes h's flock, polling until ctx ends or for maxFlockWait.
// Running out of time is backend.ErrUnavailable (retried), naming the
// file and the fix: the process that holds its flock is stuck.
func waitLock(ctx context.Context, h lockHandle, path string) error {
	var (
		wait  = minLockWait
		timer *time.Timer
		start = time.Now()
	)
	for {
		ok, err := h.tryLock()
		if err != nil {
			return fmt.Errorf("flock %s: %w", path, err)
		}
		if ok {
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		waited := time.Since(start)
		if waited >= maxFlockWait {
			return flockHeldError(path, waited, nil)
		}
		d := min(wait/2+rand.N(wait), maxFlockWait-waited) // jitter in [wait/2, 3*wait/2)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return flockHeldError(path, time.Since(start), ctx.Err())
			}
			return fmt.Errorf("waiting for the file lock %s: %w", path, ctx.Err())
		case <-timer.C:
		}
		wait = min(2*wait, maxLockWait)
	}
}

// flockHeldError is waitLock's error after waiting for the flock of path
// for waited in vain (cut short by cause, if not nil).
func flockHeldError(path string, waited time.Duration, cause error) error {
	err := fmt.Errorf("%w: another process has held the file lock %s for %v, where a holder keeps it for one read and one write: that process is stopped (SIGSTOP, a debugger) or hung on the disk; find it with fuser %s, and resume or end it",
		backend.ErrUnavailable, path, waited.Round(time.Millisecond), path)
	if cause != nil {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// read returns the record for key at path (nil if there is none) and the
// bytes it was decoded from.
func (s *Store) read(key, path string) ([]byte, *record, error) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("file: lock %q: %w", key, err)
	}
	r, err := decodeRecord(data)
	if err == nil && r.key != key {
		err = corrupt("record is for lock %q", r.key)
	}
	if err != nil {
		return nil, nil, corruptRecordError(path, err)
	}
	return data, &r, nil
}

// corruptRecordError names the record file at path that did not decode
// (err) and how to clear it without making tokens repeat.
func corruptRecordError(path string, err error) error {
	if errors.Is(err, errNewerFormat) {
		return fmt.Errorf("file: %s: %w", path, err)
	}
	return fmt.Errorf("file: %s: %w; inspect it, then delete it once no process uses the lock: its next holder starts a new epoch of tokens after the one in the .epoch file beside it, so tokens do not repeat (if that file is missing too, they start again from 1: see the filestore package doc, Fencing tokens)", path, err)
}

// readFile reads at most maxRecordLen+1 bytes, so that a huge file is
// reported as corrupt instead of filling memory.
func readFile(path string) ([]byte, error) { return readLimited(path, maxRecordLen) }

// readLimited reads at most limit+1 bytes of the regular file at path.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := openFile(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return data, nil
}

// replace replaces the file at path with data so that a crash leaves
// either the old or the new content: write temp, fsync it, rename it over
// path, fsync the directory. The caller holds the file lock that guards
// temp.
func (s *Store) replace(temp, path string, data []byte) error {
	if err := os.Remove(temp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // left over from a crash, and not ours to remove
	}
	f, err := createFile(temp, s.perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(temp, path)
	}
	if err != nil {
		_ = os.Remove(temp)
		return err
	}
	return syncDir(s.dir)
}

// createFile creates the new file path, for writing, with exactly the
// permission bits perm: the umask would strip the group bits that a
// directory shared by a group needs.
func createFile(path string, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
