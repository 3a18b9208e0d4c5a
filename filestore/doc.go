// Package filestore is a baton backend for processes on one machine: it keeps
// lock records in a directory of the local file system. It is the embedded
// default of the baton CLI, and a way to coordinate cron jobs, services and
// scripts on a single host without a network store.
//
//	store, err := filestore.New("/var/lib/myapp/locks")
//	m, err := baton.NewMutex(store, "nightly-report")
//
// # Guarantees
//
// The store has the lease semantics of the networked backends: a claim
// lasts for its TTL from when the store handles an acquire or renew; only its
// owner (Holder and Nonce) can renew or release it; after it expires
// anyone may take it over; and every acquisition gets a fencing token
// larger than all tokens issued before for that lock name. The counter
// survives release, the end of every process, reboots, the deletion of
// the record file (see Deleted records) and the removal of the lock (see
// Removing locks); it goes backwards only if someone deletes the epoch
// file too, or restores older files.
//
// Every change is a compare-and-swap of one record: the store reads the
// record, writes the next one to a temporary file of its own and fsyncs
// it, then, under an exclusive flock(2) on the lock's .lock file, checks
// that the record is unchanged and renames the new one over it; the
// directory is fsynced before the call returns. A crash (of a process or
// of the machine) leaves the old or the new record, never a torn one.
// Readers (Get, List, status views) take no lock: a rename is atomic. A
// claim's TTL counts from the store's read of the record it replaces,
// which is after the caller sent the request and before the change is
// applied.
//
// A process that is stopped (SIGSTOP, a frozen cgroup, docker pause) while
// it holds the flock blocks that lock for every process until it resumes
// or dies. The flock is held only for one read, one in-place write and
// one rename, none of them synced (tens of microseconds), except for the
// rare changes that also write the epoch file (see below) or that lost a
// race three times in a row; the networked backends have no such window.
//
// A record that cannot be decoded is never overwritten, since that could
// reset the fencing counter: every operation on that lock returns an error
// matching backend.ErrCorruptRecord that names the file, until an
// administrator repairs or removes it.
//
// # One machine, local file system
//
// All processes using a directory must run on the same machine (or in
// containers on it that bind-mount the directory and see the kernel's boot
// ID, below, whatever their PID, UTS or time namespaces: the store compares
// no process IDs or host names, and see Clock model for time). Do not put
// the directory on NFS or another network file system: flock there is
// emulated or local to one client, and the clock below is not shared
// across machines. Use the Kubernetes, etcd or Redis backends across
// machines. Store.FileSystem says whether the directory is on a network or
// in-memory file system (baton doctor warns about both); New does not
// refuse them, since processes all on one machine may share, say, an NFS
// home directory.
//
// A claim made on another machine sharing the directory (or in a VM or a
// sandbox with a kernel of its own, or in a container that shows a boot ID
// of its own: systemd-nspawn and LXC, LXD and Incus mount a random one over
// /proc/sys/kernel/random/boot_id; Docker, Podman and Kubernetes show the
// kernel's) carries another boot ID, so it counts as expired here exactly
// as a claim made before a reboot does (see Clock model), and this
// machine's claims count as expired there: neither side excludes the
// other, and no read of a record can tell. A Store finds out when it finds
// a claim of its own taken by a claim of another boot, which on one kernel
// cannot happen but from such a container: that Renew or Release returns
// the loss matching both backend.ErrLost and backend.ErrMisconfigured,
// naming the other boot, and from then on the Store's TryAcquire and
// Remove refuse with backend.ErrMisconfigured, so an Elector or a
// scheduler stops instead of taking, one after the other, claims the other
// machine does not see. Until then two holders may work at once; their
// tokens are in order only where flock excludes across the machines, which
// it need not (above). Store.ContainerBootID says whether this process
// sees a container's own boot ID (baton doctor warns about it); processes
// outside the container cannot tell.
//
// Processes that can open the lock files can hold their flock and so block
// a lock; processes that can write the directory can rewrite records. New
// creates a missing directory with mode 0o700 and files with 0o600 (see
// WithPermissions); share it only with cooperating processes. The store
// opens only regular files in it, following no symbolic link: a link, a
// named pipe or a directory where a lock's file belongs (planted by
// another user of a group-writable or sticky directory) is refused with
// backend.ErrMisconfigured, instead of the store writing where the link
// points or hanging on the pipe.
//
// # Clock model
//
// Expiry is judged on the machine's monotonic clock, which every process
// on the machine reads alike and which never jumps when the wall clock is
// set: CLOCK_MONOTONIC on Linux, CLOCK_UPTIME_RAW on macOS. These are the
// clocks behind the monotonic reading of Go's time.Now, so the store and
// the lock engine (baton.Lease) measure a lease on the same clock and the
// holder's validity (send time + TTL - margin) always ends before the
// store's expiry (apply time + TTL). Both clocks stop while the machine is
// suspended, for every process at once; a clock that counts suspend
// (CLOCK_BOOTTIME) would let a contender take over right after resume while
// the holder's engine, on Go's clock, still counts its lease as valid.
//
// A claim stores its expiry as a reading of that clock together with the
// boot ID (/proc/sys/kernel/random/boot_id on Linux, the
// kern.bootsessionuuid sysctl on macOS). The monotonic clock restarts at
// boot, so a claim made in another boot always counts as expired: after a
// reboot every lock is free, and its fencing counter continues where it
// was. A Linux time namespace (unshare --time, a container restored by
// CRIU) shifts its processes' monotonic clock by an offset; the store
// subtracts it (read from /proc/self/timens_offsets at every reading), so
// records hold the machine's initial time namespace's clock and processes
// in different time namespaces share a directory safely.
//
// The wall-clock times in a record (acquire_time, renew_time) are only for
// people reading status views; the store never compares them.
//
// # Files
//
// For a lock NAME the directory holds NAME.lock (used for flock, and
// holding a copy of the record, its guard: see Deleted records; removed
// only by Store.Remove, under its flock, since removing a lock file
// while another process waits on it would otherwise let two processes
// lock different files), NAME.json (the record), NAME.epoch (the epoch of
// the fencing counter, below), and briefly NAME.json.tmp and
// NAME.epoch.tmp. Once a lock was removed, the directory also holds
// .baton-removed and .baton-removed.lock (see Removing locks). Names
// longer than 200 bytes are shortened to their first 160 bytes, '~' and
// 32 hex digits of their SHA-256; the record holds the full name. List and
// the status views show the records only.
//
// The sanctioned way to free a held lock is a forced release (baton
// release NAME --force, or Store.ForceRelease): it keeps the counter, and
// the holder learns of it at its next renew. Do not delete NAME.json to free
// a lock; it does not free it sooner (see Deleted records).
//
// # Fencing tokens and the epoch file
//
// A token is epoch<<40 | n. n is kept in the record and incremented by
// each acquisition, which writes the record only. The epoch is kept in
// NAME.epoch, one line of JSON such as
//
//	{"version":1,"key":"nightly-report","epoch":3}
//
// written (durably, before the record) only when the record must be
// created (the lock's first acquisition: epoch 0, so the first tokens are
// 1, 2, ..., unless locks were removed from the directory: see Removing
// locks; or the record file was deleted: the epoch goes up by one), when
// n would pass 2^40-1, and once for a record that has no epoch file
// (written by an older version of this package, whose tokens simply
// continue). So deleting NAME.json cannot make tokens repeat. A corrupt
// epoch file is treated like a corrupt record: reported with its path,
// never overwritten.
//
// To reset a lock's counter on purpose (tokens start at 1 again), stop
// every process that uses the lock, delete NAME.json and NAME.epoch, and
// make the resources that check the lock's tokens forget the largest token
// they saw (or they refuse the new holders' writes); if locks were removed
// from the directory, the new tokens start above the floor in
// .baton-removed instead of at 1. Deleting NAME.epoch
// alone does no harm as long as the record stays: the next acquisition
// writes it again from the record's token.
//
// # Deleted records
//
// If NAME.json is deleted while its claim is live (rm by an operator or a
// clean-up job), the holder is not told at once: it keeps working until
// its next renew, which then fails with an error matching backend.ErrLost and
// never recreates the record. Every write of the record first writes a
// copy of it, the guard, into NAME.lock, which rm NAME.json leaves (the
// lock file is never removed). So a Store that finds the record missing
// reads the last claim from the guard, even if it never saw the record (a
// process started after the deletion), and refuses to acquire, with a
// *backend.HeldError naming that claim's holder and token, until the claim
// has expired on the machine's monotonic clock. A Store that also saw the
// claim in the record waits for the later of that and its own rule: the
// expiry it last saw, or the moment it first found the record missing plus
// the claim's TTL (the rule for a lock file without a guard, as an older
// version leaves it). Get reports a guarded claim as held. The holder's
// Release of a deleted record (its work has stopped) still returns ErrLost
// but frees its claim in the guard, and ForceRelease frees a claim kept
// only in the guard. Deleting NAME.lock as well is outside the protocol: it
// breaks the file lock that every write relies on.
//
// A Store keeps the claims it saw in memory, one per lock it found held.
// So that a process trying many locks once each (schedule's lock per
// slot) does not keep one for ever per name, each time that map has
// doubled past 256 entries the Store reads the records of the claims that
// have ended as last seen, and forgets those whose record shows no live
// claim: a later deletion of such a record cannot hide a claim it saw. A
// claim whose record is missing is kept as long as the rule above makes
// this Store wait for it, and forgotten at a later prune.
//
// # Removing locks
//
// Store.Remove (backend.Remover) deletes a lock's three files if its
// record holds no live claim, for lock names used once: package schedule
// removes each slot's lock once the slot is done, so that an every-minute
// job does not leave 1.5 million files a year (three per run). The fencing
// counter survives: the directory keeps the largest token of every lock
// removed from it in .baton-removed (one line of JSON, written durably
// before the lock's files are deleted, under the flock of
// .baton-removed.lock), and a record created from nothing starts above
// it, so a removed lock that is used again gets larger tokens than before.
// (Every lock of the directory created after a removal starts above it as
// well.) A corrupt .baton-removed is reported with its path and the fix,
// and never overwritten; until it is repaired no lock can be created in
// the directory or removed from it (locks that have a record work on).
//
// Remove deletes the lock file last, while it holds its flock. Every
// operation, once it holds a lock file's flock, checks that the lock
// file's path still names the file it locked, and opens it again if not;
// so every process that uses the directory must run a version of this
// package with Remove. A Store that saw a live claim on a lock that is
// then released and removed waits as for a deleted record (see Deleted
// records) before it acquires the lock again: remove only locks that will
// not be used again soon.
//
// # Record format
//
// NAME.json is one JSON object on one line, with exactly these fields:
//
//		{"version":1,"key":"nightly-report","holder":"host-1a2b3c4d","nonce":"0011223344556677",
//		 "token":42,"ttl_ns":15000000000,"boot_id":"3c454b82-b157-4c7f-9f86-6d594cb37345",
//		 "expires_mono_ns":86412345678901,"acquire_time":"2025-01-02T03:04:05.123456789Z",
//		 "renew_time":"2025-01-02T03:04:10.123456789Z","transitions":7}
//
//	  - version: the format version, 1. Other versions are refused (matching
//	    backend.ErrCorruptRecord), not overwritten; the error of a larger one
//	    says that a newer baton wrote it, to run that version, and not to
//	    delete the file. The epoch and floor files' versions likewise.
//	  - key: the lock name (backend.ValidateName).
//	  - holder, nonce: the owner of the current or last claim; both empty when
//	    the lock is free (released). At most 1024 bytes each.
//	  - token: the last fencing token issued, at least 1.
//	  - ttl_ns: the TTL of the last acquire or renew, in nanoseconds (at most
//	    366 days).
//	  - boot_id, expires_mono_ns: the boot in which the claim was made and the
//	    reading of the monotonic clock (of the initial time namespace) at
//	    which it ends; "" and 0 when free.
//	  - acquire_time, renew_time: wall-clock times (RFC 3339, UTC) of the last
//	    acquisition and of the last acquire or renew. Information only.
//	  - transitions: how many acquisitions went to a holder other than the
//	    previous one (a released record has no holder, so the acquisition
//	    after a release counts); always less than token.
//
// A claim is held while holder is set, boot_id is the current boot and the
// monotonic clock is below expires_mono_ns. The decoder is strict: unknown,
// missing, duplicate or mistyped fields, values out of range, inconsistent
// combinations (a holder without nonce or boot_id, a free record with an
// expiry) and data after the object make the record corrupt.
//
// # Watching
//
// On Linux, Store.Watch uses inotify on the directory, so a waiting
// baton.Mutex wakes as soon as the record changes. Each waiting lock holds
// one inotify instance with one watch, and one file descriptor, while it
// waits: a user's instances are limited machine-wide by the
// fs.inotify.max_user_instances sysctl (often 128), its watches by
// fs.inotify.max_user_watches. When a watch cannot be opened (a limit is
// reached), or elsewhere than Linux, Watch returns an error that says so,
// and the engine polls every RetryPeriod instead (a debug log line).
// Other operations open a lock's files only for their duration.
//
// # Platforms
//
// Linux and macOS. On other systems (Windows included) the package
// compiles but New returns an error.
package filestore
