package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// DefaultConnectTimeout is --connect-timeout's default.
const DefaultConnectTimeout = 10 * time.Second

// openReachable opens the store and reads lock name once, retrying while
// the store cannot be reached (backend.ErrUnavailable), for at most
// timeout (its message says so, with why: how timeout came from the
// flags): one log line per failed attempt, then an error with
// ExitUnavailable that names the cause and the fix. Other errors (a
// missing namespace or CRD, permission, TLS) are returned at once. Once
// the store has answered, losing it is the engine's to retry.
func (a *app) openReachable(ctx context.Context, f *storeFlags, name string, timeout time.Duration, why string) (store, string, error) {
	f.etcd.log, f.log = a.log, a.log
	start := time.Now()
	pause := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// An attempt's dial ends within the time left, at least a second.
		f.etcd.dialTimeout = min(max(timeout-time.Since(start), time.Second), etcdstore.DefaultDialTimeout)
		st, where, err := f.open()
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, max(timeout-time.Since(start), time.Second))
			_, err = st.Get(pctx, name)
			cancel()
			if err == nil || errors.Is(err, backend.ErrNotFound) {
				return st, where, nil
			}
			closeStore(st)
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("%w: no answer: %w%s", backend.ErrUnavailable, err, f.noAnswerHint())
			}
		}
		if !errors.Is(err, backend.ErrUnavailable) {
			return nil, "", err
		}
		left := timeout - time.Since(start)
		if left <= 0 || ctx.Err() != nil {
			tries := "1 attempt"
			if attempt > 1 {
				tries = fmt.Sprintf("%d attempts in %v", attempt, time.Since(start).Round(time.Millisecond))
			}
			if storeAnswered(err) {
				return nil, "", failf(ExitUnavailable, "the %s store answered, but cannot serve the lock now (%s): %w\n"+
					"Wait for what the error names to end; --connect-timeout (now %v%s) sets how long to keep trying at start-up.",
					f.backend, tries, err, timeout, why)
			}
			return nil, "", failf(ExitUnavailable, "cannot reach the %s store (%s): %w\n"+
				"Check that the store runs and that its address is right; --connect-timeout (now %v%s) sets how long to keep trying at start-up.",
				f.backend, tries, err, timeout, why)
		}
		wait := min(pause, left)
		a.log.Warn("cannot reach the store; retrying", "backend", f.backend, "attempt", attempt, "retry_in", wait.Round(time.Millisecond),
			"gives_up_in", left.Round(time.Second), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// storeAnswered reports whether err carries the store's own answer (a
// Redis error reply: TRYAGAIN while a Cluster moves a slot, LOADING,
// MASTERDOWN, READONLY through Sentinel, NOREPLICAS, OOM), not a failure
// to reach it: the server runs at the address given, but cannot serve the
// lock now, so "start the store or correct its address" would mislead.
func storeAnswered(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// exitCodeOf is the one place that maps an error to the exit code of the
// baton command (see exitCodesHelp): an error that carries a code keeps
// it; otherwise the baton sentinel it matches decides.
func exitCodeOf(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, backend.ErrInvalidOptions), errors.Is(err, backend.ErrInvalidName):
		return ExitUsage
	case errors.Is(err, backend.ErrForbidden):
		return ExitNoPermission
	case errors.Is(err, backend.ErrMisconfigured):
		return ExitConfig
	case errors.Is(err, backend.ErrUnavailable):
		return ExitUnavailable
	}
	return ExitFailure
}

// noAnswerHint is what a store that did not answer in time may mean beyond
// the usual causes, for these flags: a rediss:// URL to a server without
// TLS on that port never gets an answer to its TLS handshake.
func (f *storeFlags) noAnswerHint() string {
	for _, u := range f.redisURLs {
		if strings.HasPrefix(u, "rediss") {
			return " (a rediss:// URL: a server that does not speak TLS on that port never answers the handshake; use redis:// for it)"
		}
	}
	return ""
}
