package filestore

import (
	"fmt"
	"sync/atomic"

	"github.com/baton-go/baton/backend"
)

// A claim made in another boot counts as expired (see "Clock model" in the
// package documentation): on one machine, that boot ended at the last
// reboot. A process of another boot that writes a claim while this boot
// runs is therefore not on this machine's kernel: it is on another machine
// that shares the directory (a network file system), or in a VM or a
// sandboxed container (gVisor, Kata) with a kernel of its own, or in a
// container that shows a boot ID of its own (systemd-nspawn, LXC). Its claims
// count as expired here and this machine's count as expired there, so
// neither side excludes the other. Reading a record cannot tell such a
// claim from one made before a reboot; finding one's own claim taken by it
// can. Then the Store reports the directory as shared with another kernel
// (backend.ErrMisconfigured): the Renew or Release that found it returns
// its loss with that error too, and every later TryAcquire and Remove of
// the Store refuses with it, so that a process taking locks in a loop (an
// elector, a scheduler) stops instead of taking claims the other side
// does not see.

// foreignBoot is the boot ID of a kernel other than this one's that wrote
// a claim in the directory while this Store's process ran; nil if none was
// seen.
type foreignBoot struct{ id atomic.Pointer[string] }

// takenByForeignBoot returns the loss of a claim on key found taken by
// old, a claim of another boot, as a loss and a misconfiguration, and has
// the Store remember the other boot.
func (s *Store) takenByForeignBoot(key string, old *record) error {
	s.foreign.id.CompareAndSwap(nil, &old.bootID)
	return fmt.Errorf("file: lock %q: %w: it is now held by %q (token %d): %w", key, backend.ErrLost, old.holder, old.token, s.foreignErr(old.bootID))
}

// checkForeign returns the misconfiguration if this Store found a claim of
// another kernel's, else nil.
func (s *Store) checkForeign(key string) error {
	id := s.foreign.id.Load()
	if id == nil {
		return nil
	}
	return fmt.Errorf("file: lock %q: %w", key, s.foreignErr(*id))
}

func (s *Store) foreignErr(bootID string) error {
	own := ""
	if s.containerBoot {
		own = " (a container's own boot ID, mounted over /proc/sys/kernel/random/boot_id)"
	}
	return fmt.Errorf("%w: a process of boot %s wrote a claim in the lock directory %s while this machine's boot %s%s runs: "+
		"another machine uses the directory (a network file system), or a process in a VM or a sandbox with its own kernel does, "+
		"or a container on this machine that shows a boot ID of its own (systemd-nspawn and LXC mount one over /proc/sys/kernel/random/boot_id), "+
		"and the file backend excludes only processes that see one boot ID (each side counts the other's claims as expired): "+
		"use the Kubernetes, etcd or Redis backend across machines and such containers, or give each of them a directory of its own",
		backend.ErrMisconfigured, bootID, s.dir, s.bootID, own)
}
