package kubestore

import (
	"fmt"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Client-side rate limit of the dedicated client that NewLeaseForConfig
// builds. A held lock costs one update per renew interval (TTL/3), 0.2 a
// second at the default TTL, and a waiter one get per attempt plus a
// watch, so these renew about 100 held locks. Past that, renewals wait in
// the limiter and locks are lost at their renew deadline; raise the limit
// with WithRateLimit.
const (
	DefaultQPS   = 20
	DefaultBurst = 40
)

// DefaultMaxConflicts is how many times an operation re-reads the object
// and decides again after its conditional write lost a race (HTTP 409),
// before it gives up: TryAcquire and Remove then report the lock as held
// (by the contenders that won), Renew and Release return a transient error.
const DefaultMaxConflicts = 16

// Option configures a store.
type Option func(*options)

type options struct {
	app          string
	qps          float32
	burst        int
	maxConflicts int
	clock        baton.PassiveClock
	adopt        bool // WithAdoption
}

// WithApplication names the application that owns the lock names used
// through this store. It is written as the label baton.dev/app when the
// store creates a lock object, and checked on every acquire: an object
// created by another application (or by another tool, without baton's
// annotations) is never taken over; TryAcquire fails with an error matching
// ErrOtherApplication that names both applications. Without this option the
// application is "" and the check still applies: a store without an
// application does not take objects of a named one, and vice versa. To
// rename an application, give its lock objects the new name
// (ApplicationError.RenameCommand, which the error gives): a holder under
// the old name keeps its claim until it ends, processes under the new name
// wait for it, and those still under the old name are refused from then on.
//
// The name must be a valid label value (at most 63 characters:
// alphanumerics, '-', '_' and '.', starting and ending with an
// alphanumeric).
func WithApplication(name string) Option { return func(o *options) { o.app = name } }

// WithAdoption lets a LeaseStore take over Leases that baton did not
// create: those of client-go's leaderelection (LeaseLock), which writes the
// same spec fields (holderIdentity, leaseDurationSeconds, renewTime, ...),
// so that a fleet can move from client-go to baton one replica at a time.
// Such a Lease is judged like baton's own: a claim held by a client-go
// leader expires only after the Lease stayed unchanged for its
// leaseDurationSeconds as observed here, and every write is conditional on
// the resourceVersion read, as client-go's are, so a mixed fleet never has
// two leaders (client-go keeps RenewDeadline below LeaseDuration). The first
// acquisition by baton writes its annotations and label and counts tokens
// from the Lease's resourceVersion, larger than every token issued on an
// earlier object of that name; client-go keeps other fields of the objects
// it updates, so the counter survives client-go's terms. Without this
// option such a Lease is refused with an *ApplicationError (Foreign). Only
// NewLease and NewLeaseForConfig accept it: a ConfigMap written by another
// tool has no record baton could judge.
func WithAdoption() Option { return func(o *options) { o.adopt = true } }

// WithRateLimit sets the QPS and burst of the client that NewLeaseForConfig
// builds (default DefaultQPS, DefaultBurst). NewLease ignores it: the
// caller's client carries its own limiter.
func WithRateLimit(qps float32, burst int) Option {
	return func(o *options) { o.qps, o.burst = qps, burst }
}

// WithMaxConflicts sets how many write conflicts an operation absorbs by
// re-reading and deciding again (default DefaultMaxConflicts).
func WithMaxConflicts(n int) Option { return func(o *options) { o.maxConflicts = n } }

// WithClock sets the clock the store reads (default: the real clock). For
// tests. Its monotonic reading measures how long the store has seen an
// object unchanged; its wall reading is only written into objects
// (acquireTime, renewTime) for people to read, and never compared with a
// clock (two versions' renewTime only for equality, see the package
// doc), so a stepped wall clock changes nothing but those fields. A nil
// clock is ignored.
func WithClock(c baton.PassiveClock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

func buildOptions(opts []Option) (options, error) {
	o := options{qps: DefaultQPS, burst: DefaultBurst, maxConflicts: DefaultMaxConflicts, clock: baton.SystemClock()}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := validLabelValue(o.app); err != nil {
		return o, fmt.Errorf("%w: WithApplication(%q): %w", backend.ErrInvalidOptions, o.app, err)
	}
	if !(o.qps > 0) || o.burst < 1 { // NaN included
		return o, fmt.Errorf("%w: WithRateLimit(%v, %d): QPS must be positive and burst at least 1", backend.ErrInvalidOptions, o.qps, o.burst)
	}
	if o.maxConflicts < 1 {
		return o, fmt.Errorf("%w: WithMaxConflicts(%d): must be at least 1", backend.ErrInvalidOptions, o.maxConflicts)
	}
	return o, nil
}

// clientForConfig builds a clientset from a copy of cfg with its own token
// bucket rate limiter.
func clientForConfig(cfg *rest.Config, opts []Option) (kubernetes.Interface, *clientNote, error) {
	if cfg == nil {
		return nil, nil, fmt.Errorf("%w: the *rest.Config is nil", backend.ErrInvalidOptions)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, nil, err
	}
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = o.qps, o.burst
	lim := newWaitingLimiter(o.qps, o.burst)
	c.RateLimiter = lim
	c.UserAgent = rest.DefaultKubernetesUserAgent() + " baton"
	if err := checkTLS(c); err != nil {
		return nil, nil, err
	}
	note := &clientNote{limiter: lim, proxy: c.Proxy}
	c.Wrap(note.wrap)
	cs, err := kubernetes.NewForConfig(c)
	return cs, note, err
}

// checkTLS reports TLS material in cfg that cannot be parsed (a truncated
// certificate-authority-data, a client certificate that is not PEM) as
// the misconfiguration it is: no attempt can succeed.
func checkTLS(cfg *rest.Config) error {
	if _, err := rest.TLSConfigFor(cfg); err != nil {
		return fmt.Errorf("%w: the client configuration's TLS settings cannot be used (%v): check the kubeconfig's "+
			"certificate-authority, client-certificate and client-key (or their -data forms)", backend.ErrMisconfigured, err)
	}
	return nil
}

func validLabelValue(v string) error {
	if len(v) > 63 {
		return fmt.Errorf("a label value is at most 63 characters, this one has %d", len(v))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(v)-1) {
			return fmt.Errorf("not a valid label value: use alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric")
		}
	}
	return nil
}
