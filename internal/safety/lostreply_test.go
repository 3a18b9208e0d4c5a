//go:build linux

package safety

import (
	"fmt"
	"time"
)

// lostReplyEvery is the share of the store's replies lostReplies loses: one
// chunk of bytes in this many, over each contender's path.
const lostReplyEvery = 5

// loseReplies has every contender's path to the store lose one chunk of the
// store's replies in lostReplyEvery, closing that connection, for twice the
// TTL from one of a holder's accepted writes: the store ran the request,
// and its client never hears the answer, as when a connection is reset
// between the two (a CLIENT KILL, a load balancer's reset, a crashed proxy).
// Clients then send requests again on new connections, some of them
// requests the store already ran: an acquisition whose grant was lost, a
// renewal, a release. Tenures may end meanwhile (disturbed); what must hold
// is the checker's, strict: no two holders (a contender that never heard
// its grant does not hold), no token twice, no stale write accepted, and
// the lock going on within the liveness bound once replies arrive again.
func (h *harness) loseReplies(minWrites int) {
	h.t.Helper()
	f := h.waitFired(h.arm(false, minWrites, func(string) {}), "lost replies")
	cs := h.all()
	for _, c := range cs {
		c.link.loseReplies(lostReplyEvery)
	}
	window := 2 * h.be.ttl
	h.disturb("", f.at, f.at+window+h.be.ttl, "replies lost")
	if rest := f.at + window - h.reg.now(); rest > 0 {
		time.Sleep(rest)
	}
	for _, c := range cs {
		c.link.loseReplies(0)
	}
	back := h.reg.now()
	at := h.writeAfter("end of the lost replies", back)
	h.takeover(fmt.Sprintf("replies lost for %v from %s's write with token %d", window, f.c, f.tok), max(0, at-back))
}
