package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/backend"
)

// Renewals are group-committed: Store.Renew joins a pending batch, and a
// batch goes to Redis as one script per hash slot (see renewSend). The
// engine (baton.Lease) measures a renewal's validity from the send time it
// read before calling Renew, so the time a call waits here is taken from
// its renew deadline, never added to its validity: batching cannot make a
// holder count itself valid longer than its claim lasts in Redis.
const (
	// renewWindow is the least time between two batches of one Store. A
	// call that arrives when no batch was sent for a window goes at once
	// (a lone lock renewing every few seconds never waits); otherwise it
	// waits for the window's end with every call that arrives meanwhile.
	// So a Store sends at most 1/renewWindow = 50 batches a second,
	// whatever the number of locks, and a renewal waits at most 20 ms.
	renewWindow = 20 * time.Millisecond
	// maxRenewsPerScript caps the locks one script renews, so that one
	// script does not hold Redis (which runs one command at a time) for
	// long: a lock costs about 6 µs of server time in the script (500
	// locks took 3.2 ms on a busy 2-CPU machine; see
	// TestRenewBatchServerTime), so a full script takes about 1.5 ms.
	// A larger batch is sent as several scripts in one pipeline, between
	// which the server serves other clients.
	maxRenewsPerScript = 250
)

// renewCall is one Renew waiting for its batch.
type renewCall struct {
	ctx  context.Context
	g    backend.Grant
	done chan error // buffered: the batch never waits for the caller
}

// renewBatcher collects renew calls and hands them to send in batches, at
// most one batch per window. It starts no goroutine of its own: a batch
// runs in a goroutine started when it is sent, and a timer (time.AfterFunc)
// sends a batch at the end of the window. close answers the pending calls,
// cancels the batches in flight and waits for them.
type renewBatcher struct {
	window time.Duration
	// send renews calls, under ctx, and answers each one on its done
	// channel exactly once.
	send func(ctx context.Context, calls []*renewCall)
	// enqueued, if not nil, is told the number of pending calls after each
	// call joins; tests use it to know that a call waits.
	enqueued func(pending int)

	life   context.Context // ends at close: bounds every batch
	cancel context.CancelFunc

	mu      sync.Mutex
	pending []*renewCall
	timer   *time.Timer // set while pending calls wait for the window's end
	last    time.Time   // when the last batch was sent
	closed  bool
	flying  sync.WaitGroup // batches in flight
}

func newRenewBatcher(window time.Duration, send func(context.Context, []*renewCall)) *renewBatcher {
	life, cancel := context.WithCancel(context.Background())
	return &renewBatcher{window: window, send: send, life: life, cancel: cancel}
}

// errStoreClosed is what a renewal gets once the Store is closed.
func errStoreClosed(name string) error {
	return fmt.Errorf("redisstore: renew lock %q: %w: the Store was closed", name, backend.ErrClosed)
}

// renew adds g to the next batch and waits for its outcome or for ctx. A
// call whose ctx ends before its batch is sent leaves the batch and
// returns ctx's error; one whose ctx ends after that returns ctx's error
// too, without waiting (the renewal may or may not have applied: for the
// engine it failed, which is safe).
func (b *renewBatcher) renew(ctx context.Context, g backend.Grant) error {
	c := &renewCall{ctx: ctx, g: g, done: make(chan error, 1)}
	if !b.join(c) {
		return errStoreClosed(g.Key)
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		b.leave(c)
		select {
		case err := <-c.done: // answered meanwhile (by close, or its batch)
			return err
		default:
			return fmt.Errorf("redisstore: renew lock %q: %w", g.Key, ctx.Err())
		}
	}
}

// join adds c to the pending batch and sends the batch now if no batch was
// sent within the window, or arms the timer that sends it at the window's
// end. It reports false if the batcher is closed.
func (b *renewBatcher) join(c *renewCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.pending = append(b.pending, c)
	if b.enqueued != nil {
		b.enqueued(len(b.pending))
	}
	if b.timer != nil {
		return true
	}
	if wait := b.window - time.Since(b.last); wait > 0 {
		b.timer = time.AfterFunc(wait, b.flush)
		return true
	}
	b.sendLocked()
	return true
}

// leave removes c from the pending batch, if it is still there.
func (b *renewBatcher) leave(c *renewCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = slices.DeleteFunc(b.pending, func(p *renewCall) bool { return p == c })
	if len(b.pending) == 0 && b.timer != nil && b.timer.Stop() {
		b.timer = nil
	}
}

// flush sends the pending batch (the timer's function).
func (b *renewBatcher) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.sendLocked()
	}
}

// sendLocked starts sending the pending calls whose context has not ended,
// in a goroutine of its own: a slow batch does not hold up the next one,
// each runs on its own connection of the client's pool.
func (b *renewBatcher) sendLocked() {
	calls := b.pending
	b.pending, b.timer, b.last = nil, nil, time.Now()
	calls = slices.DeleteFunc(calls, func(c *renewCall) bool { return c.ctx.Err() != nil })
	if len(calls) == 0 {
		return
	}
	ctx, cancel := b.batchContext(calls)
	b.flying.Add(1)
	go func() {
		defer b.flying.Done()
		defer cancel()
		b.send(ctx, calls)
	}()
}

// batchContext returns the context a batch runs under. It is not any
// caller's: one caller giving up must not fail the others. It ends when
// the batcher is closed, or at a deadline: the longest TTL in the batch
// from now (a renewal that reaches Redis later than its TTL after it was
// sent is worthless: its holder has stepped down by then), or the latest
// caller's deadline if every caller has one and it is sooner (nobody waits
// longer). go-redis's own read and write timeouts apply beneath it.
func (b *renewBatcher) batchContext(calls []*renewCall) (context.Context, context.CancelFunc) {
	var ttl time.Duration
	var latest time.Time
	everyDeadline := true
	for _, c := range calls {
		ttl = max(ttl, c.g.TTL)
		d, ok := c.ctx.Deadline()
		everyDeadline = everyDeadline && ok
		if d.After(latest) {
			latest = d
		}
	}
	deadline := time.Now().Add(ttl)
	if everyDeadline && latest.Before(deadline) {
		deadline = latest
	}
	return context.WithDeadline(b.life, deadline)
}

// close answers every pending call with an error matching
// backend.ErrUnavailable, cancels the batches in flight (their callers get
// the cancellation's error) and waits for them to return. Later calls to
// renew fail at once.
func (b *renewBatcher) close() {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	pending := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, c := range pending {
		c.done <- errStoreClosed(c.g.Key)
	}
	b.cancel()
	b.flying.Wait()
}
