package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
)

// A renewal sent on a connection that a middlebox dropped silently (a NAT
// or a firewall that forgot the flow, a load balancer replaced) gets no
// answer and no error: go-redis gives up on the connection only at its
// ReadTimeout, 5 s by default, which with the engine's default timings is
// all the time a renewal has before its holder's renew deadline (TTL/3 at
// TTL 15 s). The holder stepped down although a new connection would have
// worked at once.
//
// So a batch of renewals that has no answer after renewHedgeFraction of
// its shortest TTL is sent again, once, beside the first: the pool gives
// the copy another connection (the first one is still in use), a new one
// if need be. Each call takes the first answer that is not a failure to
// reach the server. Renewing twice is harmless: each script renews only
// its owner's claim, and the engine counts the claim's validity from the
// send time it read before calling Renew, which is before both scripts
// ran. A store that is merely slow (a round trip above TTL/9, already
// beyond the ten round trips per TTL the timings need) costs one more
// script per renewal and keeps its first answer.
const renewHedgeFraction = 9

// renewHedged is the Store's renewBatcher.send: renewSend, sent again once
// on another connection if it has not answered in time.
func (s *Store) renewHedged(ctx context.Context, calls []*renewCall) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // ends the attempt whose answer is not used
	first := s.renewAttempt(ctx, &wg, calls)
	hedge := time.NewTimer(shortestTTL(calls) / renewHedgeFraction)
	defer hedge.Stop()
	var errs []error
	select {
	case errs = <-first:
		answerEach(calls, errs)
		return
	case <-hedge.C:
	}
	second := s.renewAttempt(ctx, &wg, calls)
	for first != nil || second != nil {
		var got []error
		select {
		case got = <-first:
			first = nil
		case got = <-second:
			second = nil
		}
		if errs == nil {
			errs = got
		} else {
			errs = merge(errs, got)
		}
		if reachedAll(errs) {
			break
		}
	}
	answerEach(calls, errs)
}

// renewAttempt runs renewSend on copies of calls in a goroutine counted
// by wg, and sends their answers, aligned with calls, on the channel it
// returns.
func (s *Store) renewAttempt(ctx context.Context, wg *sync.WaitGroup, calls []*renewCall) <-chan []error {
	copies := make([]*renewCall, len(calls))
	for i, c := range calls {
		copies[i] = &renewCall{ctx: c.ctx, g: c.g, done: make(chan error, 1)}
	}
	out := make(chan []error, 1)
	wg.Go(func() {
		s.renewSend(ctx, copies)
		errs := make([]error, len(copies))
		for i, c := range copies {
			errs[i] = <-c.done
		}
		out <- errs
	})
	return out
}

// merge returns, for each call, the answer of a or b that reached the
// server (b's if both failed to).
func merge(a, b []error) []error {
	m := make([]error, len(a))
	for i := range a {
		m[i] = b[i]
		if reached(a[i]) && !reached(b[i]) {
			m[i] = a[i]
		}
	}
	return m
}

// reached reports whether err is an answer of the server: none, or
// anything but a failure to reach it.
func reached(err error) bool { return err == nil || !errors.Is(err, backend.ErrUnavailable) }

func reachedAll(errs []error) bool {
	for _, err := range errs {
		if !reached(err) {
			return false
		}
	}
	return true
}

func answerEach(calls []*renewCall, errs []error) {
	for i, c := range calls {
		c.done <- errs[i]
	}
}

func shortestTTL(calls []*renewCall) time.Duration {
	ttl := calls[0].g.TTL
	for _, c := range calls[1:] {
		ttl = min(ttl, c.g.TTL)
	}
	return ttl
}
