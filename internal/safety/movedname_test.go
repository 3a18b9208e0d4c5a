//go:build linux

package safety

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// nameMoved is why the host-name-moved row may show two holders: processes
// keep their connections to the old server, where the holder's claim is,
// and a process started after the move connects to the new one, where the
// lock is free (docs/backends.md, "Moving Redis to another server behind
// the same name"). Only its token protects the resource meanwhile.
const nameMoved = "the store's host name was pointed at a new server while the old one still ran"

// redisMovedEnv runs one redis-server behind a name that moveName points
// at a new server: each contender's proxy stands for the name, resolved
// when a connection opens.
func redisMovedEnv(t *testing.T) *backendEnv {
	var (
		mu    sync.Mutex
		srv   = testenv.StartRedis(t, testenv.AppendOnly())
		links []link
	)
	be := &backendEnv{name: "redis", ttl: ttl, claimLife: ttl}
	be.newLink = func(t *testing.T) link {
		mu.Lock()
		defer mu.Unlock()
		l := proxied(t, []string{srv.Addr()}, "")
		links = append(links, l)
		return l
	}
	be.moveName = func(t *testing.T) (string, func()) {
		next := testenv.StartRedis(t, testenv.AppendOnly())
		mu.Lock()
		defer mu.Unlock()
		old := srv
		srv = next
		for _, l := range links {
			l.retarget(next.Addr())
		}
		return fmt.Sprintf("the name moved from %s to %s (empty)", old.Addr(), next.Addr()), old.Kill
	}
	return be
}

// moveNameHeld points the store's name at a new, empty server right after
// one of a holder's accepted writes, while it holds (it is asked to keep
// its lease until the lease's context ends), as an operator moving Redis
// behind a DNS name or a Service without stopping the old server first
// would. Running contenders keep their connections to the old server; a
// contender started after the move connects to the new one, where the
// lock is free, and takes it at once: two holders, by the store's doing
// (nameMoved). Then the old server is stopped, as docs/backends.md
// advises: the running contenders reconnect by name, to the new server,
// where the holder's next renewal finds no claim; it must end its tenure
// within its renew deadline of the stop. See freedUnder for the rest;
// tokens must go on increasing across the servers (the new server's
// come from its clock) and no stale write may be accepted.
func (h *harness) moveNameHeld(minWrites int) {
	h.t.Helper()
	var (
		holder  fired
		stopped time.Duration
	)
	h.freedUnder(minWrites, "host name moved", h.be.bound()+30*time.Second, func(_ context.Context, f fired) (string, error) {
		holder = f
		moved, stopOld := h.be.moveName(h.t)
		c := h.spawn()
		ev, ok := h.acquiredAfter(f.tok, h.be.bound()+30*time.Second)
		if !ok {
			return "", fmt.Errorf("%s: nobody acquired after it", moved)
		}
		stopOld()
		stopped = h.reg.now()
		// freedUnder logs "<this> at <the move>".
		return fmt.Sprintf("%s under %s's token %d (then %s, started after it, acquired token %d there, and the old server was stopped): the move",
			moved, f.c, f.tok, c.id, ev.Tok), nil
	})
	end := h.tenureEnd(holder.c, holder.tok, 30*time.Second)
	if limit := h.be.ttl + liveSlack; end.At-stopped > limit {
		h.t.Errorf("%s's tenure with token %d ended %v after the old server stopped, want within %v (its renew deadline, and slack)",
			holder.c, holder.tok, (end.At - stopped).Round(time.Millisecond), limit)
	}
}
