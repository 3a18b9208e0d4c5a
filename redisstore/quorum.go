package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
)

// errNoAnswer is the result of a server that had not answered when a
// Redlock operation was decided without it.
var errNoAnswer = errors.New("no answer before the other servers decided")

// noAnswer is the result of a server that had not answered when an
// operation under ctx returned: ctx's error if it ended, else errNoAnswer.
func noAnswer(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("no answer before the operation's context ended: %w", err)
	}
	return errNoAnswer
}

// stragglers runs the calls of Redlock operations to each server. An
// operation waits for the servers' answers only until they decide it (see
// eachUntil); the calls of servers that have not answered by then go on in
// the background, each bounded by the operation's context and TTL. Close
// cancels them and waits for them.
type stragglers struct {
	life context.Context // ends at Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool // no goroutine starts once set: wg.Wait is then safe
}

func newStragglers() *stragglers {
	life, stop := context.WithCancel(context.Background())
	return &stragglers{life: life, stop: stop}
}

// start runs f in a goroutine that close waits for; once close was
// called, it runs f in the caller (whose context is then cancelled).
func (st *stragglers) start(f func()) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		f()
		return
	}
	st.wg.Add(1)
	st.mu.Unlock()
	go func() {
		defer st.wg.Done()
		f()
	}()
}

// close cancels the calls still running and waits for them to return.
func (st *stragglers) close() {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.stop()
	st.wg.Wait()
}

// eachUntil runs f for every server in parallel and returns when every
// server has answered, when ctx ends, or a tenth of ttl (straggle) after
// decided first said that the answers so far (answered marks them) settle
// the outcome; a server that has not answered by then has its answered
// entry false. Each call runs under ctx, bounded by ttl and by Close, and
// may go on after eachUntil returned: a silent server (a frozen machine, a
// firewall that drops packets) holds only its own call, which ends with
// ctx, its client's timeout, the TTL or Close, not the operation, which
// a quorum's answers decide.
func eachUntil[T any](ctx context.Context, st *stragglers, stores []*Store, ttl time.Duration,
	f func(ctx context.Context, s *Store) T, decided func(out []T, answered []bool) bool) ([]T, []bool) {
	return eachUntilWith(ctx, ctx, st, stores, ttl, f, decided)
}

// eachUntilWith is eachUntil whose calls run under call, and whose wait for
// their answers ends with wait.
func eachUntilWith[T any](wait, call context.Context, st *stragglers, stores []*Store, ttl time.Duration,
	f func(ctx context.Context, s *Store) T, decided func(out []T, answered []bool) bool) ([]T, []bool) {
	callCtx, cancel := context.WithTimeout(call, ttl)
	stopOnClose := context.AfterFunc(st.life, cancel)
	type answer struct {
		i int
		v T
	}
	answers := make(chan answer, len(stores)) // never blocks a late call
	var calls sync.WaitGroup
	calls.Add(len(stores))
	for i, s := range stores {
		st.start(func() {
			defer calls.Done()
			answers <- answer{i, f(callCtx, s)}
		})
	}
	st.start(func() { // ends the calls' context once the last returned
		calls.Wait()
		stopOnClose()
		cancel()
	})
	out := make([]T, len(stores))
	answered := make([]bool, len(stores))
	var slack <-chan time.Time // the others' last chance, once decided
	for n := 0; n < len(stores); n++ {
		select {
		case a := <-answers:
			out[a.i], answered[a.i] = a.v, true
			if slack == nil && decided(out, answered) {
				t := time.NewTimer(straggle(ttl))
				defer t.Stop()
				slack = t.C
			}
		case <-slack:
			return out, answered
		case <-wait.Done():
			return out, answered
		}
	}
	return out, answered
}

// straggle is how long eachUntil still waits for the other servers once
// the answers decided an operation with ttl: servers that are merely
// slower than the rest are counted as before (their fencing counters
// among them), and only one that stays silent is left behind.
func straggle(ttl time.Duration) time.Duration { return ttl / 10 }

// settled reports whether a Redlock operation's outcome is known once ok
// servers succeeded, lost report the claim gone and pending have not
// answered: a quorum succeeded, so many report it gone that no quorum is
// left, or too few remain to make one.
func (r *Redlock) settled(ok, lost, pending int) bool {
	return ok >= r.quorum || lost > len(r.stores)-r.quorum || ok+pending < r.quorum
}

// errsSettled is eachUntil's decided for renew and release.
func (r *Redlock) errsSettled(errs []error, answered []bool) bool {
	var ok, lost, pending int
	for i, err := range errs {
		switch {
		case !answered[i]:
			pending++
		case err == nil:
			ok++
		case errors.Is(err, backend.ErrLost):
			lost++
		}
	}
	return r.settled(ok, lost, pending)
}

// acquiresSettled is eachUntil's decided for acquire.
func (r *Redlock) acquiresSettled(res []instanceAcquire, answered []bool) bool {
	var got, pending int
	for i, a := range res {
		switch {
		case !answered[i]:
			pending++
		case a.err == nil && a.res.acquired:
			got++
		}
	}
	return r.settled(got, 0, pending)
}

// eachErr runs an operation that returns an error on every server through
// eachUntil, decided by errsSettled; a server that had not answered gets
// noAnswer's error.
func (r *Redlock) eachErr(ctx context.Context, ttl time.Duration, f func(ctx context.Context, s *Store) error) []error {
	errs, answered := eachUntil(ctx, r.calls, r.stores, ttl, f, r.errsSettled)
	for i := range errs {
		if !answered[i] {
			errs[i] = noAnswer(ctx)
		}
	}
	return errs
}
