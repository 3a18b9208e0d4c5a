package cli

import (
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton"
)

// waitReportEvery is how often a waiting lock or run says it still waits.
const waitReportEvery = time.Minute

// waitReporter says, at the default log level, what a waiting lock or run
// waits for: one line when an attempt first finds the lock held (holder,
// token, and when the claim can end if the store tells), one whenever the
// holder or token changes, and one every waitReportEvery while nothing
// changes, which says so when the last attempt failed instead of naming
// the holder seen before (the engine logs each failure as a warning). It
// is a baton.Observer; Close stops its timer.
type waitReporter struct {
	log  *slog.Logger
	name string

	mu      sync.Mutex
	since   time.Time // when this wait began; zero while not waiting
	holder  string
	token   uint64
	expires time.Duration // the last attempt's estimate of the claim's end
	seen    time.Time     // when the last attempt found the lock held
	failed  error         // the last attempt's error, if it failed
	ticker  *time.Ticker
	done    chan struct{}
}

func newWaitReporter(log *slog.Logger, name string) *waitReporter {
	r := &waitReporter{log: log, name: name, ticker: time.NewTicker(waitReportEvery), done: make(chan struct{})}
	go r.remind()
	return r
}

// Observe implements baton.Observer.
func (r *waitReporter) Observe(e baton.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case baton.EventHeld:
		first := r.since.IsZero()
		if first {
			r.since = time.Now()
		}
		changed := first || e.Holder != r.holder || e.Token != r.token
		r.holder, r.token, r.expires, r.seen, r.failed = e.Holder, e.Token, e.Duration, time.Now(), nil
		if changed {
			r.ticker.Reset(waitReportEvery)
			r.logLocked("waiting for the lock")
		}
	case baton.EventAcquireFailed:
		if r.since.IsZero() {
			r.since = time.Now()
		}
		r.failed = e.Err
	case baton.EventAcquired, baton.EventStartedLeading:
		r.since, r.failed = time.Time{}, nil
	}
}

func (r *waitReporter) logLocked(msg string) {
	attrs := []any{"lock", r.name, "holder", r.holder, "token", r.token}
	if left := r.expires - time.Since(r.seen); r.expires > 0 && left > 0 {
		attrs = append(attrs, "expires_in", left.Round(time.Millisecond))
	}
	r.log.Info(msg, r.waited(attrs)...)
}

// waited appends how long the wait has lasted to attrs, from a second on.
func (r *waitReporter) waited(attrs []any) []any {
	if waited := time.Since(r.since); waited >= time.Second {
		attrs = append(attrs, "waited", waited.Round(time.Second))
	}
	return attrs
}

func (r *waitReporter) remind() {
	for {
		select {
		case <-r.done:
			return
		case <-r.ticker.C:
			r.remindOnce()
		}
	}
}

// remindOnce says that the wait goes on, if it does.
func (r *waitReporter) remindOnce() {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.since.IsZero():
	case r.failed != nil:
		r.log.Info("still waiting for the lock; the last attempt failed, and is retried",
			r.waited([]any{"lock", r.name, "err", r.failed})...)
	default:
		r.logLocked("still waiting for the lock")
	}
}

// Close stops the reminders.
func (r *waitReporter) Close() {
	r.ticker.Stop()
	close(r.done)
}
