// Package batonprom exports Prometheus metrics for baton locks and
// electors.
//
// A Collector is both a baton.Observer and a prometheus.Collector: pass it
// to baton.WithObserver (combined with other observers by
// baton.Observers) and it keeps, per lock name, whether this process holds
// the lock, the last fencing token it held, and counters and histograms of
// acquisitions, conflicts, failed attempts, renewals, losses and releases:
//
//	reg := prometheus.NewRegistry()
//	metrics, err := batonprom.New(reg)
//	...
//	el, err := baton.NewElector(store, "scheduler", baton.WithObserver(metrics))
//
// Every metric has one label, lock (the lock name), and the loss counter a
// second, reason, with two values. Neither the holder identity nor the token
// is a label: both change with every term and would make the number of
// series grow without bound. The metrics, in the namespace "baton":
//
//	baton_leader                    gauge      1 while this process holds the lock (leads), else 0
//	baton_fencing_token             gauge      fencing token of the last lease this process acquired
//	baton_acquisitions_total        counter    leases acquired by Lock or an Elector
//	baton_acquire_wait_seconds      histogram  how long each acquisition waited
//	baton_conflicts_total           counter    attempts that found the lock held by another owner
//	baton_acquire_failures_total    counter    attempts that failed: the store unreachable or refusing
//	baton_renew_duration_seconds    histogram  latency of successful renewals
//	baton_renew_failures_total      counter    renewals that failed, or had no answer for a retry period
//	baton_losses_total{reason}      counter    leases lost: step_down or revoked
//	baton_releases_total            counter    leases released by their holder
//	baton_leader_changes_total      counter    changes of the leader an Elector observed
//
// The series of a lock appear with its first event; call Init with the
// lock names at start-up so that they exist (at 0) from the first scrape,
// which makes "no leader" alerts work before anything happened.
//
// A Semaphore reports each of its slots as a lock of its own: its events,
// and so its series, are named by the slot (Semaphore.SlotName: NAME.slot-0
// and so on), never by the semaphore's name. Init the slot names; a series
// Init made for the semaphore's name stays at 0.
//
// Locks of one name on different stores (two Kubernetes namespaces, say)
// share their series in one Collector. To tell them apart, use one
// Collector per store, each registered through
// prometheus.WrapRegistererWith with the same label name and a different
// value, such as store="a" and store="b".
//
// baton_leader follows the lease, not the Elector's work: it drops to 0 when
// the lease is lost or released, even if work is still returning within the
// grace period, because from then on another replica may lead. An Unlock
// whose store release failed counts as a release: this process stopped
// holding the lock, and the claim expires in the store.
package batonprom

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-go/baton"
)

const namespace = "baton"

// Values of the reason label of baton_losses_total.
const (
	// ReasonStepDown: no renew succeeded within the renew deadline, so the
	// holder stepped down (the error matches baton.ErrStepDown).
	ReasonStepDown = "step_down"
	// ReasonRevoked: the store said the claim is no longer this holder's:
	// it was taken over after expiring, or force-released.
	ReasonRevoked = "revoked"
)

// Bucket boundaries, in seconds. A standby may wait for hours, so the
// acquire-wait buckets reach an hour; renewals are bounded by the renew
// deadline (10s by default).
var (
	acquireWaitBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 15, 30, 60, 300, 900, 3600}
	renewBuckets       = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// A Collector turns baton events into Prometheus metrics. Create it with
// New; its methods are safe for concurrent use, and Observe never blocks.
type Collector struct {
	leader        *prometheus.GaugeVec
	token         *prometheus.GaugeVec
	acquisitions  *prometheus.CounterVec
	acquireWait   *prometheus.HistogramVec
	conflicts     *prometheus.CounterVec
	acquireFails  *prometheus.CounterVec
	renewDuration *prometheus.HistogramVec
	renewFailures *prometheus.CounterVec
	losses        *prometheus.CounterVec
	releases      *prometheus.CounterVec
	leaderChanges *prometheus.CounterVec

	mu    sync.Mutex
	locks map[string]*lockState
}

// lockState is what a Collector remembers of one lock name to compute
// baton_leader. Several leases of one name can be held at once by one
// process (two Mutexes on different stores, say), so it keeps the set of
// leases held, not a flag.
type lockState struct {
	held map[lease]struct{}
	// early holds losses reported before the acquisition of the same
	// lease: the lease's renewer can give up at once when the acquire
	// itself took longer than the renew deadline, and it reports from its
	// own goroutine. An acquisition found here is not counted as held.
	// The list is short and the oldest entry goes first.
	early []lease
}

// lease identifies one lease of a lock in events.
type lease struct {
	holder string
	token  uint64
}

const maxEarly = 8

// New returns a Collector registered with reg. It does not fall back to
// the global registry: pass prometheus.DefaultRegisterer to use that one.
// Registering a second Collector with the same registry returns an error
// matching prometheus.AlreadyRegisteredError (errors.As); a nil reg
// returns an error that names it.
func New(reg prometheus.Registerer) (*Collector, error) {
	if reg == nil {
		return nil, errors.New("batonprom: the registerer is nil")
	}
	c := newCollector()
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("batonprom: registering the baton metrics: %w", err)
	}
	return c, nil
}

func newCollector() *Collector {
	lock := []string{"lock"}
	return &Collector{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "leader",
			Help: "1 while this process holds the lock (leads), else 0.",
		}, lock),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "fencing_token",
			Help: "Fencing token of the last lease of the lock this process acquired (0: none yet).",
		}, lock),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "acquisitions_total",
			Help: "Leases of the lock acquired by this process.",
		}, lock),
		acquireWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "acquire_wait_seconds",
			Help:                           "Time from the start of Lock (or of a campaign) to the acquisition.",
			Buckets:                        acquireWaitBuckets,
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, lock),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "conflicts_total",
			Help: "Acquire attempts that found the lock held by another owner.",
		}, lock),
		acquireFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "acquire_failures_total",
			Help: "Acquire attempts of the lock that failed: the store could not be reached or refused them.",
		}, lock),
		renewDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "renew_duration_seconds",
			Help:                           "Latency of successful renewals of the lock.",
			Buckets:                        renewBuckets,
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, lock),
		renewFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "renew_failures_total",
			Help: "Renewals of the lock that failed, or had no answer for a retry period; the holder retries until the renew deadline.",
		}, lock),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "losses_total",
			Help: "Leases of the lock lost by this process: step_down (no renew succeeded within the renew deadline) or revoked (the store said the claim is someone else's).",
		}, []string{"lock", "reason"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "releases_total",
			Help: "Leases of the lock released by this process.",
		}, lock),
		leaderChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "leader_changes_total",
			Help: "Changes of the leader of the lock observed by an Elector in this process, including to itself.",
		}, lock),
		locks: make(map[string]*lockState),
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		c.leader, c.token, c.acquisitions, c.acquireWait, c.conflicts, c.acquireFails,
		c.renewDuration, c.renewFailures, c.losses, c.releases, c.leaderChanges,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

// Init creates the series of the named locks at zero, so that they are
// exported before the first event: baton_leader is then 0, not absent, on a
// replica that cannot reach its store, and rate() over the counters starts
// from zero.
func (c *Collector) Init(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range names {
		c.state(name)
	}
}

// Forget deletes the series and the state of a lock name, for programs
// that use many short-lived lock names. A later event for the name creates
// them again.
func (c *Collector) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.locks, name)
	for _, m := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{
		c.leader, c.token, c.acquisitions, c.acquireWait, c.conflicts, c.acquireFails,
		c.renewDuration, c.renewFailures, c.losses, c.releases, c.leaderChanges,
	} {
		m.DeletePartialMatch(prometheus.Labels{"lock": name})
	}
}

// state returns the state of a lock, creating it and its series at zero.
// c.mu must be held.
func (c *Collector) state(name string) *lockState {
	if s, ok := c.locks[name]; ok {
		return s
	}
	s := &lockState{held: make(map[lease]struct{})}
	c.locks[name] = s
	c.leader.WithLabelValues(name).Set(0)
	c.token.WithLabelValues(name)
	c.acquisitions.WithLabelValues(name)
	c.acquireWait.WithLabelValues(name)
	c.conflicts.WithLabelValues(name)
	c.acquireFails.WithLabelValues(name)
	c.renewDuration.WithLabelValues(name)
	c.renewFailures.WithLabelValues(name)
	c.losses.WithLabelValues(name, ReasonStepDown)
	c.losses.WithLabelValues(name, ReasonRevoked)
	c.releases.WithLabelValues(name)
	c.leaderChanges.WithLabelValues(name)
	return s
}

// Observe implements baton.Observer. It only updates counters in memory.
func (c *Collector) Observe(e baton.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state(e.Name)
	l := lease{e.Holder, e.Token}
	switch e.Kind {
	case baton.EventAcquired:
		c.acquisitions.WithLabelValues(e.Name).Inc()
		c.acquireWait.WithLabelValues(e.Name).Observe(e.Duration.Seconds())
		c.token.WithLabelValues(e.Name).Set(float64(e.Token))
		if i := indexOf(s.early, l); i >= 0 {
			s.early = append(s.early[:i], s.early[i+1:]...)
		} else {
			s.held[l] = struct{}{}
		}
	case baton.EventHeld:
		c.conflicts.WithLabelValues(e.Name).Inc()
	case baton.EventAcquireFailed:
		c.acquireFails.WithLabelValues(e.Name).Inc()
	case baton.EventRenewed:
		c.renewDuration.WithLabelValues(e.Name).Observe(e.Duration.Seconds())
	case baton.EventRenewFailed:
		c.renewFailures.WithLabelValues(e.Name).Inc()
	case baton.EventLost:
		reason := ReasonRevoked
		if errors.Is(e.Err, baton.ErrStepDown) {
			reason = ReasonStepDown
		}
		c.losses.WithLabelValues(e.Name, reason).Inc()
		if _, ok := s.held[l]; ok {
			delete(s.held, l)
		} else if indexOf(s.early, l) < 0 {
			if len(s.early) == maxEarly {
				s.early = s.early[1:]
			}
			s.early = append(s.early, l)
		}
	case baton.EventReleased:
		c.releases.WithLabelValues(e.Name).Inc()
		delete(s.held, l)
	case baton.EventStoppedLeading:
		// An Elector's term can end without a release or a loss event:
		// when its context ended and the release failed or was not
		// wanted, or its work overran the grace period.
		delete(s.held, l)
	case baton.EventNewLeader:
		c.leaderChanges.WithLabelValues(e.Name).Inc()
	}
	v := 0.0
	if len(s.held) > 0 {
		v = 1
	}
	c.leader.WithLabelValues(e.Name).Set(v)
}

func indexOf(ls []lease, l lease) int {
	for i, x := range ls {
		if x == l {
			return i
		}
	}
	return -1
}
