//go:build linux

package safety

import (
	"fmt"
	"slices"
	"time"
)

// dropHeld drops the holder's connections to the store silently right after
// one of its accepted writes, while it holds (it is asked to keep its lease
// until the lease's context ends), as a NAT or a stateful firewall does when
// it forgets a flow: nothing is forwarded on them any more and nothing is
// closed, while new connections work. Unlike a partition, the holder can
// go on if it sends its requests again on a new connection.
//
// On a store whose holder does (keepsThroughDrop: Redis), it must keep its
// lock: writes with its token accepted more than a TTL after the drop. On
// the others it may step down at its renew deadline; then nobody may
// acquire before its claim could have ended (takeoverAfter), and a
// successor must come within the liveness bound. Either way the checker's
// checks are strict: no two holders, no token twice, no stale write
// accepted.
func (h *harness) dropHeld(minWrites int) {
	h.t.Helper()
	f := h.waitFired(h.armHold(false, true, minWrites, func(c string) {
		if k := h.contender(c); k != nil {
			k.link.drop()
		}
	}), "silent drop")
	what := fmt.Sprintf("%s's connections dropped silently with token %d", f.c, f.tok)
	defer func() { h.disturb(f.c, f.at, h.reg.now()+h.be.ttl, "connections dropped") }()
	after := f.at + h.be.ttl
	var (
		next event
		kept bool
	)
	h.reg.await(fmt.Sprintf("%s to write with token %d more than a TTL after its connections were dropped, or a successor", f.c, f.tok),
		h.be.bound()+h.be.ttl+30*time.Second, func(s *snapshot) bool {
			if i := slices.IndexFunc(s.events, func(e event) bool { return e.Kind == "acquired" && e.Tok > f.tok }); i >= 0 {
				next = s.events[i]
				return true
			}
			for i := len(s.ops) - 1; i >= 0 && s.ops[i].Ret >= after; i-- {
				if o := s.ops[i]; o.Write && o.OK && o.Tok == f.tok && o.Call >= after {
					kept = true
					return true
				}
			}
			return false
		})
	switch {
	case kept:
		h.t.Logf("%s: it kept its lock", what)
	case h.be.keepsThroughDrop:
		h.t.Errorf("%s: %s acquired token %d %v after it; the holder should have renewed on a new connection",
			what, next.C, next.Tok, (next.At - f.at).Round(time.Millisecond))
	default:
		end := h.tenureEnd(f.c, f.tok, 30*time.Second)
		h.t.Logf("%s: its tenure ended (%s) %v after it; %s acquired token %d %v after it",
			what, end.Cause, (end.At - f.at).Round(time.Millisecond), next.C, next.Tok, (next.At - f.at).Round(time.Millisecond))
		h.takeoverAfter(what, f, next.At-f.at)
	}
}
