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
// changes. It is a baton.Observer; Close stops its timer.
type waitReporter struct {
	log  *slog.Logger
	name string

	mu      sync.Mutex
	since   time.Time // when this wait began; zero while not waiting
	holder  string
	token   uint64
	expires time.Duration
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
		if first || e.Holder != r.holder || e.Token != r.token {
			r.holder, r.token, r.expires = e.Holder, e.Token, e.Duration
			r.ticker.Reset(waitReportEvery)
			r.logLocked("waiting for the lock")
		}
	case baton.EventAcquired, baton.EventStartedLeading:
		r.since = time.Time{}
	}
}

func (r *waitReporter) logLocked(msg string) {
	attrs := []any{"lock", r.name, "holder", r.holder, "token", r.token}
	if r.expires > 0 {
		attrs = append(attrs, "expires_in", r.expires.Round(time.Millisecond))
	}
	if waited := time.Since(r.since); waited >= time.Second {
		attrs = append(attrs, "waited", waited.Round(time.Second))
	}
	r.log.Info(msg, attrs...)
}

func (r *waitReporter) remind() {
	for {
		select {
		case <-r.done:
			return
		case <-r.ticker.C:
			r.mu.Lock()
			if !r.since.IsZero() {
				r.logLocked("still waiting for the lock")
			}
			r.mu.Unlock()
		}
	}
}

// Close stops the reminders.
func (r *waitReporter) Close() {
	r.ticker.Stop()
	close(r.done)
}
