package baton

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
)

// Timing defaults. They match client-go's leader election so that a team
// moving from it keeps its failover budget. With another TTL, the renew
// deadline and retry period not given default to the same proportions of it
// (2/3 and 2/15).
const (
	DefaultTTL           = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// MinTTL is the shortest lease baton accepts: Kubernetes stores lease
	// durations in whole seconds, and shorter leases leave no room for a
	// round trip and clock-rate drift.
	MinTTL = time.Second
	// MaxTTL is the longest lease baton accepts, a year: a holder that
	// crashes blocks its lock for the TTL, and far longer values reach
	// where the engine's arithmetic on durations overflows.
	MaxTTL = 365 * 24 * time.Hour
	// minMargin is the smallest safety margin subtracted from the TTL.
	minMargin = 50 * time.Millisecond
)

// Option configures a Mutex or an Elector.
type Option func(*config)

type config struct {
	ttl              time.Duration
	renewDeadline    time.Duration
	renewDeadlineSet bool
	retryPeriod      time.Duration
	retryPeriodSet   bool
	renewInterval    time.Duration // 0: ttl/3
	renewIntervalSet bool
	margin           time.Duration
	marginSet        bool
	identity         string
	clock            Clock
	logger           *slog.Logger
	observer         Observer

	// Elector only. electorOnly names the Elector-only options given, so
	// that NewMutex can refuse them.
	electorOnly     []string
	grace           time.Duration
	graceSet        bool
	releaseOnCancel bool
	releaseTimeout  time.Duration
	onStarted       func(ctx context.Context, l *Lease)
	onStopped       func(l *Lease, cause error)
	onNewLeader     func(identity string)
}

// WithTTL sets the lease duration: how long a claim lasts after the store
// applies an acquire or renew. Default 15s; from MinTTL (1s) to MaxTTL (a
// year). Give at least 10 round trips to the store (see "Timing" in the
// package documentation).
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithRenewDeadline sets how long the holder keeps trying to renew, counted
// from the send time of its last successful acquire or renew, before it steps
// down and ends the lease's context. Must be shorter than the TTL minus the
// safety margin. Default 2/3 of the TTL (10s for the default TTL).
func WithRenewDeadline(d time.Duration) Option {
	return func(c *config) { c.renewDeadline, c.renewDeadlineSet = d, true }
}

// WithRetryPeriod sets how often a waiter retries when the backend cannot
// watch (or as a fallback to a watch), and how long the holder waits after a
// failed renew before trying again. Must be shorter than the renew deadline.
// Default: the smaller of 2/15 of the TTL and 1/5 of the renew deadline
// (2s for the default TTL).
func WithRetryPeriod(d time.Duration) Option {
	return func(c *config) { c.retryPeriod, c.retryPeriodSet = d, true }
}

// WithRenewInterval sets how often the holder renews while renewals succeed.
// Default: the smaller of TTL/3 and half the renew deadline (5s for the
// default TTL); must be shorter than the renew deadline.
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewInterval = d } }

// WithSafetyMargin sets the time subtracted from the TTL when computing the
// holder's validity end, to cover clock-rate drift between this process and
// the store (or other contenders). Default max(2% of TTL, 50ms).
func WithSafetyMargin(d time.Duration) Option {
	return func(c *config) { c.margin, c.marginSet = d, true }
}

// WithIdentity sets the holder identity shown in status views and to other
// contenders. Default: DefaultIdentity(). Two processes must never share an
// identity; baton adds a random nonce per acquisition so that even then
// only one of them can renew or release, but status views would confuse
// them.
func WithIdentity(id string) Option { return func(c *config) { c.identity = id } }

// WithClock sets the clock used for every timer and for the holder's
// validity. It must be monotonic (the clock's Now must carry Go's monotonic
// reading, as time.Now does); tests pass a fake clock (package clocktest).
// Default: SystemClock().
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// WithLogger sets the structured logger. Default: slog.Default(), which
// writes Info and above to the standard logger (stderr). baton logs, at
// Info: a new leader, started and stopped leading (Elector), and the
// store answering a waiting Lock again after failed attempts; at Warn: an
// acquire, renew or release that failed and is retried, a renew with no
// answer for a retry period, a renew answered only after a retry period
// (once per lease: the store is too far or too slow for the timings; the
// line names the TTL that would work), and a lock lost. Each line names
// the lock; none repeats more often than the retry period, and a wait's
// failed attempts are warned of at most every 10s, with their count (the
// others at Debug). Debug lines (watches, polling) are off by default.
// Pass slog.New(slog.DiscardHandler) to silence baton.
//
// The handler gets, with each line, the context of the call the line is
// about: the one given to Lock, TryLock or Acquire (a Lease's own lines,
// from its renewals to its loss, carry that context's values too), to
// Unlock for the release, and Run's for an Elector. A handler can add
// values from it, such as a trace ID.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver sets a hook that receives an Event for every acquisition,
// renewal, loss, release and leadership change, for metrics.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// WithGrace (Elector) sets how long Run waits for work to return after its
// term ended. Default: TTL - RenewDeadline, the time between stepping down
// and the earliest moment another replica can take over.
func WithGrace(d time.Duration) Option {
	return func(c *config) { c.grace, c.graceSet = d, true; c.electorOption("WithGrace") }
}

// WithReleaseOnCancel (Elector) sets whether Run releases the lock when its
// context ends and work has returned, so that a standby takes over at once
// instead of after the TTL. Default true.
func WithReleaseOnCancel(release bool) Option {
	return func(c *config) { c.releaseOnCancel = release; c.electorOption("WithReleaseOnCancel") }
}

// OnStartedLeading (Elector) registers a callback run when a term starts,
// before work. It must not block.
func OnStartedLeading(f func(ctx context.Context, l *Lease)) Option {
	return func(c *config) { c.onStarted = f; c.electorOption("OnStartedLeading") }
}

// OnStoppedLeading (Elector) registers a callback run when a term ended and
// its work returned (or the grace period ran out), with the reason the term
// ended. After a loss it runs before Run tries to release the claim the
// store may still keep, which can wait up to 5 s for a store that does not
// answer; when Run's context ended, after the release (see Run). It must
// not block.
func OnStoppedLeading(f func(l *Lease, cause error)) Option {
	return func(c *config) { c.onStopped = f; c.electorOption("OnStoppedLeading") }
}

// OnNewLeader (Elector) registers a callback run when the observed leader
// changes, including to this process. It must not block.
func OnNewLeader(f func(identity string)) Option {
	return func(c *config) { c.onNewLeader = f; c.electorOption("OnNewLeader") }
}

// electorOption records that the Elector-only option name was given.
func (c *config) electorOption(name string) { c.electorOnly = append(c.electorOnly, name) }

// CheckOptions reports, without a Backend, whether opts are valid for a
// Mutex (forElector false) or an Elector (true): the error NewMutex or
// NewElector would return for them, matching ErrInvalidOptions, or nil.
// Command-line tools call it to reject flags before opening a store.
func CheckOptions(forElector bool, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	return c.checkKind(forElector)
}

// checkKind refuses Elector-only options for a Mutex.
func (c *config) checkKind(forElector bool) error {
	if !forElector && len(c.electorOnly) > 0 {
		return fmt.Errorf("%w: %s apply only to an Elector (use NewElector)", ErrInvalidOptions, strings.Join(c.electorOnly, ", "))
	}
	return nil
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		ttl:             DefaultTTL,
		releaseOnCancel: true,
		releaseTimeout:  5 * time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	// Timings not given scale with the TTL in the proportions of the
	// defaults (15s, 10s, 2s, renew every 5s), so that WithTTL alone is
	// always valid; a renew deadline that is given bounds the retry period
	// and renew interval in the same proportions, so that it is valid
	// alone too.
	if !c.renewDeadlineSet {
		c.renewDeadline = c.ttl * 2 / 3
	}
	if !c.retryPeriodSet {
		c.retryPeriod = min(c.ttl*2/15, c.renewDeadline/5)
	}
	c.renewIntervalSet = c.renewInterval != 0
	if c.identity == "" {
		c.identity = DefaultIdentity()
	}
	if c.clock == nil {
		c.clock = systemClock{}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if !c.renewIntervalSet {
		c.renewInterval = min(c.ttl/3, c.renewDeadline/2)
	}
	if !c.marginSet {
		c.margin = DefaultSafetyMargin(c.ttl)
	}
	if !c.graceSet {
		c.grace = c.ttl - c.renewDeadline
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// DefaultSafetyMargin returns max(2% of ttl, 50ms).
func DefaultSafetyMargin(ttl time.Duration) time.Duration {
	return max(ttl/50, minMargin)
}

func (c *config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	// A value the caller did not set is named as a default, so that an
	// error never blames a value nobody chose.
	deadline := fmt.Sprint(c.renewDeadline)
	if !c.renewDeadlineSet {
		deadline += " (the default, 2/3 of the TTL)"
	}
	retry := fmt.Sprint(c.retryPeriod)
	if !c.retryPeriodSet {
		retry += " (the default, the smaller of 2/15 of the TTL and 1/5 of the renew deadline)"
	}
	interval := fmt.Sprint(c.renewInterval)
	if !c.renewIntervalSet {
		interval += " (the default, the smaller of TTL/3 and half the renew deadline)"
	}
	switch {
	case c.ttl < MinTTL:
		return bad("TTL %v is shorter than the minimum %v", c.ttl, MinTTL)
	case c.ttl > MaxTTL:
		return bad("TTL %v is longer than the maximum %v (a year)", c.ttl, MaxTTL)
	case c.renewDeadline <= 0:
		return bad("renew deadline %v must be positive", c.renewDeadline)
	case c.retryPeriod <= 0:
		return bad("retry period %s must be positive", retry)
	case c.renewInterval <= 0:
		return bad("renew interval %s must be positive", interval)
	case c.margin < 0:
		return bad("safety margin %v must not be negative", c.margin)
	case c.renewDeadline >= c.ttl:
		return bad("renew deadline %s must be shorter than TTL %v", deadline, c.ttl)
	case c.margin >= c.ttl-c.renewDeadline:
		return bad("renew deadline %s plus safety margin %v must be shorter than TTL %v", deadline, c.margin, c.ttl)
	case c.retryPeriod >= c.renewDeadline:
		return bad("retry period %s must be shorter than renew deadline %s", retry, deadline)
	case c.renewInterval >= c.renewDeadline:
		return bad("renew interval %s must be shorter than renew deadline %s", interval, deadline)
	case c.grace < 0:
		return bad("grace period %v must not be negative", c.grace)
	}
	return validateIdentity(c.identity)
}

// MaxIdentityLength is the longest holder identity baton accepts.
const MaxIdentityLength = 253

func validateIdentity(id string) error {
	switch {
	case strings.TrimSpace(id) == "":
		return fmt.Errorf("%w: identity is empty", ErrInvalidOptions)
	case len(id) > MaxIdentityLength:
		return fmt.Errorf("%w: identity is %d bytes long, at most %d are allowed", ErrInvalidOptions, len(id), MaxIdentityLength)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: identity %q contains the character %q; use printable characters without spaces", ErrInvalidOptions, id, r)
		}
	}
	return nil
}

// slowHint explains, when what (the acquire, a renew) took rtt to be
// answered and that is longer than the retry period, that the timings are
// too short for the link and what to give instead; "" otherwise. Over
// such a link every renew is reported unanswered, and one that fails
// cannot be retried before the renew deadline: the holder steps down,
// acquires again, and steps down again, with each step-down blamed on a
// store that does not answer although it does.
func (c *config) slowHint(what string, rtt time.Duration) string {
	if rtt <= c.retryPeriod {
		return ""
	}
	ttl := min(max(MinTTL, (10*rtt+time.Second-1).Truncate(time.Second)), MaxTTL)
	fix := fmt.Sprintf("a TTL of at least %v (10 such round trips), with the renew deadline and retry period in their default proportions of it,", ttl)
	if ttl <= c.ttl {
		fix = fmt.Sprintf("a retry period longer than that round trip (the default is 2/15 of the TTL: %v),", c.ttl*2/15)
	}
	return fmt.Sprintf("%s took %v to be answered, longer than the retry period %v: if the store's answers take this long "+
		"(a distant store or a slow link, not an outage the request waited out), every renew is reported unanswered and one late answer ends the lease; give %s or use a store nearer to this process",
		what, rtt.Round(time.Millisecond), c.retryPeriod, fix)
}
