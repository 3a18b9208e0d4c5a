//go:build linux

package safety

import (
	"context"
	"os"
	"time"

	"github.com/baton-go/baton/backend"
)

// envGrantPause names a file: while it exists, every grant a contender's
// store makes reaches the contender's engine grantPauseFor(TTL) late. Set
// only in the row "grants answered after the renew deadline".
const envGrantPause = "BATON_SAFETY_GRANT_PAUSE"

// grantPauseFor is how late a paused grant reaches the engine: 1.5 TTLs,
// past the renew deadline (2/3 of the TTL) by more than the checker's
// slack, so that a grant handed out anyway shows as an acquisition past
// its renew deadline.
func grantPauseFor(ttl time.Duration) time.Duration { return ttl * 3 / 2 }

// pausedGrants is a Backend whose TryAcquire, once the store granted the
// lock, waits before returning while the file exists: the store and the
// claim are real; only the answer reaches the engine late, as after a
// pause of the process. Every other call is the store's own.
type pausedGrants struct {
	backend.Backend
	file  string
	pause time.Duration
}

func (p pausedGrants) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	g, err := p.Backend.TryAcquire(ctx, key, req)
	if err == nil {
		if _, serr := os.Stat(p.file); serr == nil {
			time.Sleep(p.pause) // the fault itself, as a stopped process would
		}
	}
	return g, err
}

// pauseGrants wraps b, keeping the optional interfaces the engine looks
// for (a watch, a waiter's watch), so that only the answer's timing
// changes.
func pauseGrants(b backend.Backend, file string, ttl time.Duration) backend.Backend {
	p := pausedGrants{Backend: b, file: file, pause: grantPauseFor(ttl)}
	if ww, ok := b.(backend.WaiterWatcher); ok {
		return struct {
			pausedGrants
			backend.WaiterWatcher
		}{p, ww}
	}
	if w, ok := b.(backend.Watcher); ok {
		return struct {
			pausedGrants
			backend.Watcher
		}{p, w}
	}
	return p
}
