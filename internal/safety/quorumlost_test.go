//go:build linux

package safety

import (
	"fmt"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// quorumLost kills the two members other than the raft leader right after
// one of the holder's accepted writes, while it holds (it is asked to keep
// its lease until the lease's context ends), and keeps them down for twice
// the claims' life, a TTL and 10 s: no request can commit, every lease
// outlives its Store's hold on it, the Stores give their leases up, and
// their revocations outlast a single attempt (a request to a member
// without a leader is answered at etcd's request timeout, about 10 s).
// Then the members start again with their data and elect a leader, which
// extends every lease it finds by its TTL. The holder must end its tenure
// by stepping down at its renew deadline before the quorum is back; the
// lock must go on within the liveness bound of the members' restart (a
// lease given up during the outage, and so its claim, must not keep the
// lock from everyone for a lease TTL more: etcdstore revokes it once etcd
// answers); and the checker's checks are strict: no two holders, no token
// twice, no stale write accepted.
func quorumLost(h *harness, cl *testenv.EtcdCluster) {
	h.t.Helper()
	lead := cl.WaitLeader(30 * time.Second)
	down := []int{(lead + 1) % len(cl.Members), (lead + 2) % len(cl.Members)}
	f := h.waitFired(h.armHold(false, true, 3+h.rng.IntN(5), func(string) {
		for _, m := range down {
			cl.Members[m].Kill()
		}
	}), "quorum loss")
	hold := 2*h.be.claimLife + h.be.ttl + 10*time.Second
	h.disturb("", f.at, f.at+hold+h.be.bound(), "quorum lost")
	// The leader answers keepalives from its own lessor for a while after
	// it lost its followers (see etcdStaleRevoke), so the renew deadline
	// may come later than a TTL after the kill; it must come before the
	// quorum is back.
	end := h.tenureEnd(f.c, f.tok, hold+30*time.Second)
	if end.Cause != causeStepDown || end.At-f.at > hold {
		h.t.Errorf("%s's tenure with token %d ended %v after the quorum was lost, by %q (%s); want a step-down at its renew deadline, before the quorum is back (%v)",
			f.c, f.tok, (end.At - f.at).Round(time.Millisecond), end.Cause, end.Err, hold)
	}
	if rest := f.at + hold - h.reg.now(); rest > 0 {
		time.Sleep(rest)
	}
	back := h.reg.now()
	for _, m := range down {
		cl.Members[m].Start()
	}
	next := cl.WaitLeader(30 * time.Second)
	ev, ok := h.acquiredAfter(f.tok, h.be.bound()+30*time.Second)
	if !ok {
		h.t.Fatalf("no acquisition after token %d, the holder's when the quorum was lost", f.tok)
	}
	h.t.Logf("%s held token %d; members %v killed for %v; it stepped down %v after; member %d elected; %s acquired token %d %v after the members were started again",
		f.c, f.tok, down, hold, (end.At - f.at).Round(time.Millisecond), next, ev.C, ev.Tok, max(0, ev.At-back).Round(time.Millisecond))
	h.takeover(fmt.Sprintf("quorum back after token %d", f.tok), max(0, ev.At-back))
	h.writesAbove(f.tok, 3, 30*time.Second)
}
