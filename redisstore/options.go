package redisstore

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// Option configures a Store, a Redlock, or what Open and OpenRedlock build.
type Option func(*options)

type options struct {
	prefix         string
	linger         time.Duration
	healthInterval time.Duration
	driftFactor    float64
	handover       time.Duration
	clientOptions  []func(*redis.Options)
	tlsFiles       *tlsFileNames // WithTLSFiles
	acks           int           // WithReplicaAcks
	ackTimeout     time.Duration
	log            *slog.Logger
}

func newOptions(opts []Option) options {
	o := options{
		prefix:         DefaultPrefix,
		linger:         time.Minute,
		healthInterval: 3 * time.Second,
		driftFactor:    DefaultDriftFactor,
		handover:       DefaultHandoverWindow,
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	return o
}

// WithLogger sets the logger of a Redlock's warnings: a renewal that a
// quorum carried while some servers failed it (one more failing server
// and no lock could be held), at most once a minute. Default
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// validateRedlock is validate, plus what Redlock refuses.
func (o options) validateRedlock() error {
	if o.acks > 0 {
		return fmt.Errorf("%w: WithReplicaAcks applies to one server, Sentinel or Cluster; Redlock's servers are independent primaries", backend.ErrInvalidOptions)
	}
	return o.validate()
}

func (o options) validate() error {
	if strings.ContainsAny(o.prefix, "{}") {
		return fmt.Errorf("%w: key prefix %q must not contain '{' or '}' (the lock name is the hash tag)", backend.ErrInvalidOptions, o.prefix)
	}
	if o.acks < 0 || (o.acks > 0 && o.ackTimeout <= 0) {
		return fmt.Errorf("%w: WithReplicaAcks(%d, %v): want a replica count of at least 0 and, with replicas, a positive timeout",
			backend.ErrInvalidOptions, o.acks, o.ackTimeout)
	}
	if !(o.driftFactor >= 0 && o.driftFactor < 0.5) { // NaN included
		return fmt.Errorf("%w: drift factor %v is not in [0, 0.5)", backend.ErrInvalidOptions, o.driftFactor)
	}
	return nil
}

// WithPrefix sets the prefix of every key and channel (default "baton:").
// Two applications that must not share locks use different prefixes (or
// databases). The prefix must not contain '{' or '}'.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithWatchLinger sets how long a lock's release channel stays subscribed
// after its last watch ended (default 1 minute), so that a process locking
// the same name repeatedly does not pay a SUBSCRIBE each time. When no
// channel is left, the subscriber connection and its goroutine stop.
func WithWatchLinger(d time.Duration) Option { return func(o *options) { o.linger = max(d, 0) } }

// DefaultHandoverWindow is how long a released lock stays reserved for the
// longest-waiting waiter, where it is reserved rather than handed over.
const DefaultHandoverWindow = 500 * time.Millisecond

// WithHandoverWindow turns the FIFO of waiters on (any window above 0, the
// default 500ms) or off (0), and sets how long a released lock is reserved
// for a waiter that cannot be handed it directly.
//
// A contender that finds the lock held from a blocking baton.Mutex.Lock
// (backend.Request.Waiting), or while it has a watch open on the Store,
// takes a place in a FIFO of waiters kept in Redis, refreshed by each of
// its attempts and dropped once its next attempt is overdue (it is due
// when the claim that refused it can first end, and at least one TTL of
// its own after its last; a third of its TTL is allowed for it to arrive
// late). Release hands the lock
// to the first live waiter in the FIFO other than the releaser (see
// "Direct handoff" in the package documentation): a holder that unlocks
// and locks in a tight loop cannot starve the others, and waits are
// bounded by the number of waiters ahead. The FIFO holds up to 1024
// waiters; beyond them a contender takes a place only when it finds one
// free. With WithReplicaAcks, and for a
// waiter of an earlier version, the release frees the lock and reserves
// it for that waiter for the window instead: everyone else is refused
// until it took the lock or the window ran out; a waiter that died or gave
// up then costs at most one window, once. The reservation only refuses
// acquisitions. Redlock does not use the FIFO.
func WithHandoverWindow(d time.Duration) Option { return func(o *options) { o.handover = max(d, 0) } }

// WithDriftFactor (Redlock) sets the clock-drift allowance as a fraction of
// the TTL (default 0.01; 2 ms are always added): a Redlock grant is returned
// only if a quorum was reached within TTL - elapsed - drift.
func WithDriftFactor(f float64) Option { return func(o *options) { o.driftFactor = f } }

// WithClientOptions (Open, OpenRedlock, OpenURLs) adjusts the go-redis
// options parsed from each redis:// or rediss:// URL before the client is
// created: a credentials provider, timeouts, a TLS configuration of your
// own. For a private CA and a client certificate in PEM files, which
// Sentinel and Cluster URLs take too, prefer WithTLSFiles, which reads
// them again when they change.
func WithClientOptions(f func(*redis.Options)) Option {
	return func(o *options) { o.clientOptions = append(o.clientOptions, f) }
}
