//go:build linux

package safety

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

// envGrantPause names a file: while it exists, every grant a contender's
// store makes reaches the contender's engine grantPauseFor(TTL) late. The
// file holds the round of the fault, which the contender logs with the
// grant's token (heldBackLine). Set only in the row "grants answered
// after the renew deadline".
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
		if round, rerr := os.ReadFile(p.file); rerr == nil {
			fmt.Fprintf(os.Stderr, "grant of token %d held back in round %s\n", g.Token, round)
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

// TestRefusedHeldBack checks the late-grant row's witness on logs shaped
// as a contender writes them: only the refusal of a grant held back in the
// round asked about counts.
func TestRefusedHeldBack(t *testing.T) {
	refusal := func(tok int) string {
		return fmt.Sprintf(`level=WARN msg="lock attempt failed" contender=c1 err="baton: store unavailable: the store granted token %d 3.01s after the request it counts from was sent, not before the renew deadline 1.333s: its validity was as good as over, so it was not handed out, and was released"`+"\n", tok)
	}
	held := func(tok, round int) string {
		return fmt.Sprintf("grant of token %d held back in round %d\n", tok, round)
	}
	for _, tc := range []struct {
		name, log string
		want      bool
	}{
		{"refused in the round", held(7, 2) + refusal(7), true},
		{"held back in the round, not yet refused", held(7, 2), false},
		{"refused from an earlier round", held(5, 1) + held(7, 2) + refusal(5), false},
		{"another token refused", held(7, 2) + refusal(70), false},
		{"round 12 is not round 2", held(7, 12) + refusal(7), false},
	} {
		if got := refusedHeldBack(tc.log, "2"); got != tc.want {
			t.Errorf("%s: refusedHeldBack = %v, want %v", tc.name, got, tc.want)
		}
	}
}
