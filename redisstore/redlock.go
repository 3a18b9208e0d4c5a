package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// DefaultDriftFactor is Redlock's clock-drift allowance as a fraction of the
// TTL; 2 ms are added to it.
const DefaultDriftFactor = 0.01

// Redlock is a backend.Backend over N independent Redis servers (N >= 3 and
// odd; not replicas of each other), after the Redlock algorithm: a lock is
// held by whoever holds it on a quorum of N/2+1 servers. It tolerates the
// loss of fewer than a quorum of servers.
//
// Two instances on one server are one instance counted twice, and each
// attempt then finds its own claim on one of them: OpenRedlock refuses two
// URLs with the same address; two names of one server (localhost and
// 127.0.0.1, a DNS alias, a proxy) it cannot tell apart, and `baton
// doctor` compares the servers' run_ids. Such a Redlock still grants locks
// while the other servers complete a quorum, with no error: the server
// named twice casts two votes, and its failure alone loses them.
//
// # Clock model
//
// Acquire sends the acquire script to every server in parallel. A grant is
// returned only if a quorum acquired it and the time elapsed since the
// first request left, measured on this process's monotonic clock, is less
// than TTL - drift (drift = TTL × drift factor + 2 ms); otherwise whatever
// the attempt acquired is released and the attempt fails: only what this
// attempt's own acquisitions took, so that a release that reaches a
// server late spares the claim a later attempt of the same Lock call (the
// same holder and nonce) took there. The engine then counts
// the holder valid from its own send time (see baton.Lease), which is no
// later than that first request, so every server of the quorum keeps the
// claim at least that long. Renew succeeds only if a quorum renewed within
// TTL - drift; if so many servers report the claim gone that no quorum is
// left, it returns backend.ErrLost. Release releases on every server.
//
// Acquire, Renew and Release wait for the servers only until their answers
// decide the outcome (a quorum succeeded, or none can), and a tenth of the
// TTL more for the rest; a server that is still silent then (a frozen
// machine, a firewall that drops packets) is left to answer in the
// background, within the TTL, and counts as failed. So a silent server
// costs each operation a tenth of the TTL, not its client's timeouts, and a
// holder keeps its lock on the other servers. Close cancels those calls
// and waits for them.
//
// Every server judges expiry by its own clock: a server whose clock jumps
// forward expires claims early. Run NTP in slewing mode, never step clocks.
//
// Each server runs Store's scripts, so a lock key deleted by hand on a
// server is refused there until the claim's recorded expiry (see the
// package documentation). A new quorum overlaps the holder's last renewal
// quorum in a server that refuses until at least the end of the holder's
// validity, so deletion on any number of servers does not let a second
// holder in early; deletion on more than N - quorum servers makes the
// holder's next renew return backend.ErrLost.
//
// # What the fencing token is worth
//
// The token is the largest of the per-server counters of the quorum; before
// the grant is returned, every server of the quorum whose counter is lower
// is raised to it. As long as no server loses data, any later quorum
// overlaps this one in at least one server whose counter is at least this
// token, so tokens strictly increase. (Remove deletes a server's counter
// only while it is below that server's clock in microseconds, the least
// token the server issues next: larger, as long as its clock does not go
// back.) It is NOT a consensus token: a server restarted without its data
// (no appendonly, or fsync not "always") forgets both the claim and its
// counter, and then a later holder can get a smaller token, or, if that
// server was part of the quorum, a second holder can acquire while the
// first still holds. Restart a server only after the
// longest TTL has passed, or run it with appendonly yes and appendfsync
// always. Where fencing must hold across failures, use the etcd or
// Kubernetes backends: their tokens come from a consensus log.
//
// Its methods are safe for concurrent use: one Redlock serves every lock,
// Mutex and goroutine of a process.
type Redlock struct {
	stores      []*Store
	quorum      int
	driftFactor float64
	ownsClients bool
	closed      atomic.Bool // set by Close: every method refuses (open)
	calls       *stragglers // the servers' calls that outlive their operation
	degraded    degradedLog
}

var (
	_ backend.Backend       = (*Redlock)(nil)
	_ backend.Watcher       = (*Redlock)(nil)
	_ backend.Lister        = (*Redlock)(nil)
	_ backend.ForceReleaser = (*Redlock)(nil)
)

// NewRedlock returns a Redlock over clients, one per independent server
// (at least 3, an odd number). It does not own the clients: Close stops the
// subscribers but leaves the clients open.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	o := newOptions(opts)
	if err := o.validateRedlock(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if err := checkInstances(len(clients)); err != nil {
		return nil, err
	}
	return newRedlock(clients, o)
}

func checkInstances(n int) error {
	if n < 3 || n%2 == 0 {
		return fmt.Errorf("redisstore: %w: Redlock needs an odd number of at least 3 independent servers, got %d", backend.ErrInvalidOptions, n)
	}
	return nil
}

func newRedlock(clients []redis.UniversalClient, o options) (*Redlock, error) {
	r := &Redlock{quorum: len(clients)/2 + 1, driftFactor: o.driftFactor, calls: newStragglers(), degraded: degradedLog{log: o.log}}
	o.handover = 0 // a FIFO per server could reserve the lock for different waiters
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("redisstore: %w: Redlock client %d is %s", backend.ErrInvalidOptions, i, nilName(c))
		}
		r.stores = append(r.stores, newStore(c, o))
	}
	return r, nil
}

// Quorum returns N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// Close cancels the calls to servers that an operation left behind (see
// Redlock) and waits for them, stops the subscribers that serve Watch and,
// for a Redlock made by OpenRedlock, closes the clients. Afterwards every
// method returns an error matching backend.ErrClosed, which the engine
// does not retry. A second Close returns nil.
func (r *Redlock) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.calls.close()
	var errs []error
	for _, s := range r.stores {
		s.closed.Store(true)
		s.hub.close()
		s.renews.close()
		if r.ownsClients {
			for _, c := range s.owned {
				errs = append(errs, c.Close())
			}
		}
	}
	return errors.Join(errs...)
}

// open returns nil, or, once Close was called, an error matching
// backend.ErrClosed for operation op on lock name ("" for none).
func (r *Redlock) open(op, name string) error {
	if !r.closed.Load() {
		return nil
	}
	return closedError("Redlock", op, name)
}

// drift returns the clock-drift allowance for ttl.
func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.driftFactor) + 2*time.Millisecond
}

// each runs f for every server in parallel and returns when all returned.
func each[T any](stores []*Store, f func(i int, s *Store) T) []T {
	out := make([]T, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores[1:] {
		wg.Go(func() { out[i+1] = f(i+1, s) })
	}
	out[0] = f(0, stores[0])
	wg.Wait()
	return out
}

type instanceAcquire struct {
	res acquireResult
	err error
}

// TryAcquire implements backend.Backend; see Redlock for the algorithm.
func (r *Redlock) TryAcquire(ctx context.Context, key string, req backend.Request) (backend.Grant, error) {
	if err := r.open("acquire", key); err != nil {
		return backend.Grant{}, err
	}
	if err := checkRequest(key, req.Holder, req.Nonce, req.TTL); err != nil {
		return backend.Grant{}, err
	}
	start := time.Now()
	budget := req.TTL - r.drift(req.TTL)
	res, answered := eachUntil(ctx, r.calls, r.stores, req.TTL, func(ctx context.Context, s *Store) instanceAcquire {
		a, err := s.acquire(ctx, key, req)
		return instanceAcquire{a, err}
	}, r.acquiresSettled)
	for i := range res {
		if !answered[i] { // it may acquire yet: released below if the attempt fails
			res[i].err = noAnswer(ctx)
		}
	}
	var (
		got          []int
		token        uint64
		held         []acquireResult
		errs         []error
		definiteErrs []error
	)
	for i, a := range res {
		switch {
		case a.err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", r.server(i), a.err))
			if errors.Is(a.err, backend.ErrCorruptRecord) || errors.Is(a.err, backend.ErrForbidden) {
				definiteErrs = append(definiteErrs, a.err)
			}
		case a.res.acquired:
			got = append(got, i)
			token = max(token, a.res.token)
		default:
			held = append(held, a.res)
		}
	}
	fail := func(err error) (backend.Grant, error) {
		if len(got) > 0 || len(errs) > 0 {
			// Undo what was (or, after an error, may have been) acquired.
			r.releaseAll(ctx, key, req, res)
		}
		return backend.Grant{}, err
	}
	if len(got) >= r.quorum {
		n, raiseErrs := r.raiseQuorum(ctx, key, req, token, got, res)
		elapsed := time.Since(start)
		switch {
		case n < r.quorum:
			// The raises' errors say why (the caller's context that
			// ended, a server gone): the caller matches them.
			return fail(fmt.Errorf("redisstore: redlock %q: acquired on %d of %d servers but raised the fencing counter on only %d, need %d: %w", key, len(got), len(r.stores), n, r.quorum, errors.Join(raiseErrs...)))
		case elapsed >= budget:
			return fail(fmt.Errorf("redisstore: redlock %q: a quorum took %v, not less than TTL %v minus drift %v; released", key, elapsed, req.TTL, r.drift(req.TTL)))
		}
		return backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, Token: token, TTL: req.TTL}, nil
	}
	if len(definiteErrs) > 0 {
		return fail(fmt.Errorf("redisstore: redlock %q: %w", key, errors.Join(definiteErrs...)))
	}
	if len(held) > 0 {
		return fail(r.heldError(key, held))
	}
	return fail(fmt.Errorf("redisstore: redlock %q: acquired on %d of %d servers, need %d: %w", key, len(got), len(r.stores), r.quorum, errors.Join(errs...)))
}

// raiseQuorum raises the fencing counter to token on the servers in got
// whose acquire issued a smaller one, so that any later quorum, which
// overlaps this one, issues a larger token. It returns on how many servers
// of got the counter is at token, and why it is not on the others.
func (r *Redlock) raiseQuorum(ctx context.Context, key string, req backend.Request, token uint64, got []int, res []instanceAcquire) (int, []error) {
	errs := each(r.stores, func(i int, s *Store) error {
		if !slices.Contains(got, i) || res[i].res.token == token {
			return nil
		}
		if err := s.raise(ctx, key, req, token); err != nil {
			return fmt.Errorf("%s: %w", r.server(i), err)
		}
		return nil
	})
	n := 0
	var failed []error
	for i, err := range errs {
		switch {
		case err != nil:
			failed = append(failed, err)
		case slices.Contains(got, i):
			n++
		}
	}
	return n, failed
}

// heldError names the holder seen on most servers and estimates when enough
// claims will have expired for a quorum to be free.
func (r *Redlock) heldError(key string, held []acquireResult) error {
	count := map[string]int{}
	var holder string
	var token uint64
	for _, h := range held {
		count[h.holder]++
		if count[h.holder] > count[holder] {
			holder = h.holder
		}
		token = max(token, h.token)
	}
	pttls := make([]time.Duration, len(held))
	for i, h := range held {
		pttls[i] = h.pttl
	}
	slices.Sort(pttls)
	// A quorum is free once all but N-quorum claims have expired.
	need := len(held) - (len(r.stores) - r.quorum)
	idx := min(max(need-1, 0), len(pttls)-1)
	return &backend.HeldError{Key: key, Holder: holder, Token: token, RetryAfter: pttls[idx]}
}

// releaseAll releases, on every server where the attempt sent an
// acquisition (res), the claim that acquisition took, if any, for an
// attempt that failed: only that claim (see releaseScript), so that a
// release that comes late spares the claim a later attempt of the same
// Lock call (same holder and nonce) took there. Like every operation of a
// Redlock, it waits for a silent server only a tenth of the TTL after a
// quorum released (see eachUntil), and not past ctx, the attempt's: the
// releases go on in the background for at most the TTL or 5 s.
func (r *Redlock) releaseAll(ctx context.Context, key string, req backend.Request, res []instanceAcquire) {
	g := backend.Grant{Key: key, Holder: req.Holder, Nonce: req.Nonce, TTL: req.TTL}
	calls := make(map[*Store]string, len(res))
	for i, a := range res {
		calls[r.stores[i]] = a.res.call
	}
	eachUntilWith(ctx, context.WithoutCancel(ctx), r.calls, r.stores, min(req.TTL, 5*time.Second),
		func(ctx context.Context, s *Store) error { return s.releaseAttempt(ctx, g, calls[s]) }, r.errsSettled)
}

// Renew implements backend.Backend: it renews on every server and succeeds if
// a quorum renewed within TTL - drift. It returns an error matching
// backend.ErrLost when more than N - quorum servers report that g no longer
// owns the lock there (no quorum can be left), and a transient error
// otherwise. Each server's renewals are batched as a Store's are (see the
// package documentation, "Many locks"); the wait for a batch, at most
// 20 ms, counts in the time checked against TTL - drift.
func (r *Redlock) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	if err := r.open("renew", g.Key); err != nil {
		return backend.Grant{}, err
	}
	if err := checkRequest(g.Key, g.Holder, g.Nonce, g.TTL); err != nil {
		return backend.Grant{}, err
	}
	start := time.Now()
	errs := r.eachErr(ctx, g.TTL, func(ctx context.Context, s *Store) error {
		_, err := s.Renew(ctx, g)
		return err
	})
	if err := r.tally("renew", g.Key, errs); err != nil {
		return backend.Grant{}, err
	}
	r.degraded.note(g.Key, errs, r.quorum, r.server)
	if elapsed := time.Since(start); elapsed >= g.TTL-r.drift(g.TTL) {
		return backend.Grant{}, fmt.Errorf("redisstore: redlock renew %q: a quorum took %v, not less than TTL %v minus drift %v", g.Key, elapsed, g.TTL, r.drift(g.TTL))
	}
	renewed := g // g stays as it is: the calls left to a silent server read it
	renewed.Version = ""
	return renewed, nil
}

// Release implements backend.Backend: it releases on every server. It
// succeeds if a quorum released, returns an error matching backend.ErrLost if
// more than N - quorum servers report g no longer owns the lock, and a
// transient error otherwise (the remaining claims expire after the TTL).
func (r *Redlock) Release(ctx context.Context, g backend.Grant) error {
	if err := r.open("release", g.Key); err != nil {
		return err
	}
	if err := checkRequest(g.Key, g.Holder, g.Nonce, g.TTL); err != nil {
		return err
	}
	errs := r.eachErr(ctx, g.TTL, func(ctx context.Context, s *Store) error { return s.Release(ctx, g) })
	return r.tally("release", g.Key, errs)
}

// ForceRelease implements backend.ForceReleaser: it frees the lock named key
// on every server whoever holds it, keeping the fencing counters (an
// administrator's action, as Store.ForceRelease). It succeeds once a
// quorum of servers freed the lock or had no claim, one of them at least
// having had a record: no owner can then hold a quorum, and the claims on
// servers that did not answer (waited for as Get waits) expire after
// their TTL. It returns an error matching backend.ErrNotFound if a quorum
// answered and none has a record, and an error naming the servers that
// failed if fewer than a quorum freed it.
func (r *Redlock) ForceRelease(ctx context.Context, key string) error {
	if err := r.open("force-release", key); err != nil {
		return err
	}
	if err := checkName(key); err != nil {
		return err
	}
	errs, answered := eachUntil(ctx, r.calls, r.stores, readBound, func(ctx context.Context, s *Store) error {
		return s.ForceRelease(ctx, key)
	}, func(errs []error, answered []bool) bool {
		free, failed := forceTally(errs, answered)
		return free >= r.quorum || failed > len(r.stores)-r.quorum
	})
	var failed []error
	free, found := 0, false
	for i, err := range errs {
		if !answered[i] {
			err = noAnswer(ctx)
		}
		switch {
		case err == nil:
			free, found = free+1, true
		case errors.Is(err, backend.ErrNotFound):
			free++
		default:
			failed = append(failed, fmt.Errorf("%s: %w", r.server(i), err))
		}
	}
	switch {
	case free < r.quorum:
		return fmt.Errorf("redisstore: redlock force-release %q: freed on %d of %d servers, need %d: %w", key, free, len(r.stores), r.quorum, errors.Join(failed...))
	case !found:
		return fmt.Errorf("redisstore: redlock force-release %q: %w on any server that answered", key, backend.ErrNotFound)
	}
	return nil
}

// forceTally counts the servers whose answer to a ForceRelease freed the
// lock or found none (free) and those that failed.
func forceTally(errs []error, answered []bool) (free, failed int) {
	for i, err := range errs {
		switch {
		case !answered[i]:
		case err == nil || errors.Is(err, backend.ErrNotFound):
			free++
		default:
			failed++
		}
	}
	return free, failed
}

// degradedWarnEvery: a Redlock warns of renewals that a quorum carried
// without some servers at most this often: a server can stay down for
// days, and every renewal of every lock would repeat it.
const degradedWarnEvery = time.Minute

// degradedLog warns of renewals carried by a quorum while servers failed
// them: the locks hold, but one more failing server would lose them, and
// nothing else tells the holder's operators.
type degradedLog struct {
	log    *slog.Logger
	mu     sync.Mutex
	warned time.Time
	count  int // such renewals since the last warning
}

// note warns, at most every degradedWarnEvery, if a renewal of key
// succeeded with some of errs (one per server, named by server) not nil.
func (d *degradedLog) note(key string, errs []error, quorum int, server func(int) string) {
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", server(i), err))
		}
	}
	if len(failed) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.count++
	if now := time.Now(); d.warned.IsZero() || now.Sub(d.warned) >= degradedWarnEvery {
		d.log.Warn("redisstore: redlock degraded: a renewal succeeded without some servers; if more fail, no quorum is left and the locks are lost",
			"lock", key, "failed", fmt.Sprintf("%d of %d (quorum %d)", len(failed), len(errs), quorum),
			"err", errors.Join(failed...), "degraded_renewals_since_last_warning", d.count)
		d.warned, d.count = now, 0
	}
}

// tally judges per-server results of renew or release.
func (r *Redlock) tally(op, key string, errs []error) error {
	var ok, lost int
	var all []error
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, backend.ErrLost):
			lost++
			all = append(all, fmt.Errorf("%s: %w", r.server(i), err))
		default:
			all = append(all, fmt.Errorf("%s: %w", r.server(i), err))
		}
	}
	switch {
	case ok >= r.quorum:
		return nil
	case lost > len(r.stores)-r.quorum:
		return fmt.Errorf("redisstore: redlock %s %q: %w on %d of %d servers (quorum %d): %w", op, key, backend.ErrLost, lost, len(r.stores), r.quorum, errors.Join(all...))
	}
	return fmt.Errorf("redisstore: redlock %s %q: succeeded on %d of %d servers, need %d: %w", op, key, ok, len(r.stores), r.quorum, errors.Join(all...))
}

// Get implements backend.Backend. It reads every server. If one owner holds
// unexpired claims on a quorum, the record names it and Remaining is how
// long a quorum of its claims still lasts; otherwise the record is not
// held. Token and Transitions are the largest seen. It returns an error
// matching backend.ErrNotFound if a quorum answered and none has a
// record, and an error if fewer than a quorum answered.
//
// Get waits for a server only while the answers so far leave the record
// open, and then a tenth of readBound (1s) more: a silent server delays it
// by that, not by its client's timeouts. A record that the servers which
// did not answer could still turn into a held one (an owner's claim on
// some answering servers, a quorum with the silent ones) is neither held
// nor free: Get then returns an error matching backend.ErrUnavailable.
func (r *Redlock) Get(ctx context.Context, key string) (backend.Record, error) {
	if err := r.open("get", key); err != nil {
		return backend.Record{}, err
	}
	if err := checkName(key); err != nil {
		return backend.Record{}, err
	}
	res, answered := eachUntil(ctx, r.calls, r.stores, readBound, func(ctx context.Context, s *Store) readResult {
		rec, err := s.Get(ctx, key)
		return readResult{rec, err}
	}, func(res []readResult, answered []bool) bool { return r.readSettled(res, answered) })
	return r.combine(key, noAnswers(ctx, res, answered))
}

// readResult is one server's answer for one lock.
type readResult struct {
	rec backend.Record
	err error
}

// combine makes Get's answer for key from each server's (res, aligned
// with r.stores).
func (r *Redlock) combine(key string, res []readResult) (backend.Record, error) {
	var (
		recs     []backend.Record
		answered int
		errs     []error
	)
	for i, x := range res {
		switch {
		case x.err == nil:
			answered++
			recs = append(recs, x.rec)
		case errors.Is(x.err, backend.ErrNotFound):
			answered++
		default:
			errs = append(errs, fmt.Errorf("%s: %w", r.server(i), x.err))
		}
	}
	if answered < r.quorum {
		return backend.Record{}, fmt.Errorf("redisstore: redlock get %q: %d of %d servers answered, need %d: %w", key, answered, len(r.stores), r.quorum, errors.Join(errs...))
	}
	if len(recs) == 0 {
		return backend.Record{}, fmt.Errorf("redisstore: redlock get %q: %w on any server", key, backend.ErrNotFound)
	}
	if c := r.undecided(recs, len(res)-answered); c > 0 {
		return backend.Record{}, fmt.Errorf("redisstore: redlock get %q: %w: one owner's claim is on %d answering servers, and with the %d that did not answer it may hold a quorum of %d: %w",
			key, backend.ErrUnavailable, c, len(res)-answered, r.quorum, errors.Join(errs...))
	}
	return r.merge(key, recs), nil
}

// merge combines per-server records as described at Get.
func (r *Redlock) merge(key string, recs []backend.Record) backend.Record {
	type owner struct{ holder, nonce string }
	claims := map[owner][]backend.Record{}
	out := backend.Record{Key: key}
	for _, rec := range recs {
		out.Token = max(out.Token, rec.Token)
		out.Transitions = max(out.Transitions, rec.Transitions)
		if rec.Held() {
			o := owner{rec.Holder, rec.Nonce}
			claims[o] = append(claims[o], rec)
		}
	}
	for _, c := range claims {
		if len(c) < r.quorum {
			continue
		}
		// The quorum-th longest claim is how long a quorum still holds.
		slices.SortFunc(c, func(a, b backend.Record) int { return cmp.Compare(b.Remaining, a.Remaining) })
		best := c[r.quorum-1]
		best.Token, best.Transitions = out.Token, out.Transitions
		return best
	}
	// Not held on a quorum: report the most recent holder, without claim.
	slices.SortFunc(recs, func(a, b backend.Record) int { return cmp.Compare(b.Token, a.Token) })
	out.Holder = recs[0].Holder
	return out
}

// List implements backend.Lister: the merged records of every lock found on
// any server, sorted by name, each merged and waited for as Get merges and
// waits; every server is read listBatch locks per pipeline. A record left
// open by silent servers is left out, and the error returned with the
// others names it.
func (r *Redlock) List(ctx context.Context) ([]backend.Record, error) {
	if err := r.open("list", ""); err != nil {
		return nil, err
	}
	type listed struct {
		names []string
		err   error
	}
	lists, ok := eachUntil(ctx, r.calls, r.stores, readBound, func(ctx context.Context, s *Store) listed {
		names, err := s.names(ctx)
		return listed{names, err}
	}, func(lists []listed, ok []bool) bool {
		n := 0
		for i := range lists {
			if ok[i] && lists[i].err == nil {
				n++
			}
		}
		return n >= r.quorum
	})
	seen := map[string]bool{}
	var errs []error
	answered := 0
	for i, l := range lists {
		err := l.err
		if !ok[i] {
			err = noAnswer(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.server(i), err))
			continue
		}
		answered++
		for _, n := range l.names {
			seen[n] = true
		}
	}
	if answered < r.quorum {
		return nil, fmt.Errorf("redisstore: redlock list: %d of %d servers answered: %w", answered, len(r.stores), errors.Join(errs...))
	}
	// A quorum listed its names: a lock whose keys are only on the others
	// is held by no quorum, and each record read below is settled or
	// reports its own error.
	errs = nil
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	var recs []backend.Record
	for len(names) > 0 {
		batch := names[:min(listBatch, len(names))]
		names = names[len(batch):]
		for _, res := range r.readMany(ctx, batch) {
			rec, err := r.combine(res.key, res.servers)
			switch {
			case errors.Is(err, backend.ErrNotFound):
			case err != nil:
				errs = append(errs, err)
			default:
				recs = append(recs, rec)
			}
		}
	}
	return recs, errors.Join(errs...)
}

// lockReads is every server's answer for lock key.
type lockReads struct {
	key     string
	servers []readResult // aligned with r.stores
}

// readMany reads names on every server at once, each server in one
// pipeline (Store.getMany), and returns the answers, aligned with names.
func (r *Redlock) readMany(ctx context.Context, names []string) []lockReads {
	perServer, answered := eachUntil(ctx, r.calls, r.stores, readBound, func(ctx context.Context, s *Store) []readResult {
		out := make([]readResult, len(names))
		for i, cmd := range s.getMany(ctx, names) {
			out[i].rec, out[i].err = s.getReply(ctx, names[i], cmd)
		}
		return out
	}, func(perServer [][]readResult, answered []bool) bool {
		for i := range names {
			if !r.readSettled(column(perServer, answered, i), answered) {
				return false
			}
		}
		return true
	})
	reads := make([]lockReads, len(names))
	for i, name := range names {
		reads[i] = lockReads{key: name, servers: noAnswers(ctx, column(perServer, answered, i), answered)}
	}
	return reads
}

// Watch implements backend.Watcher: one channel woken by a release notice
// from any server. It fails only if no server's subscriber could be set up.
func (r *Redlock) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := r.open("watch", key); err != nil {
		return nil, err
	}
	if err := checkName(key); err != nil {
		return nil, err
	}
	w := newWatcher()
	var (
		subscribed []*Store
		confirmed  []<-chan struct{}
		errs       []error
	)
	for i, s := range r.stores {
		_, _, channel := s.Keys(key)
		c, err := s.hub.add(ctx, channel, channel, w) // no handoffs: see NewRedlock
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.server(i), err))
			continue
		}
		subscribed = append(subscribed, s)
		confirmed = append(confirmed, c)
	}
	if len(subscribed) == 0 {
		return nil, fmt.Errorf("redisstore: redlock watch %q: %w", key, errors.Join(errs...))
	}
	wctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	for i, s := range subscribed {
		if !awaitConfirmed(wctx, confirmed[i]) {
			_, _, channel := s.Keys(key)
			s.hub.returnedEarly(channel, w)
		}
	}
	if err := w.refusal(); err != nil {
		// A server refused the subscription (see hub.refuse), which
		// closed w: the engine polls instead.
		for _, s := range subscribed {
			_, _, channel := s.Keys(key)
			s.hub.remove(channel, w)
		}
		return nil, fmt.Errorf("redisstore: redlock watch %q: a server refused the subscription: %w", key, r.stores[0].classify(err))
	}
	context.AfterFunc(ctx, func() {
		for _, s := range subscribed {
			_, _, channel := s.Keys(key)
			s.hub.remove(channel, w)
		}
		w.close()
	})
	return w.c, nil
}

// raise runs raiseScript on s.
func (s *Store) raise(ctx context.Context, key string, req backend.Request, token uint64) error {
	lock, fence, _ := s.Keys(key)
	n, err := raiseScript.Run(ctx, s.client, []string{lock, fence}, ownerArg(req.Holder, req.Nonce), token).Int64()
	if err != nil {
		return s.wrap(key, lock, "raise token", err)
	}
	if n != 1 {
		return fmt.Errorf("redisstore: raise token of lock %q (key %s): %w", key, lock, backend.ErrLost)
	}
	return nil
}

// server names the i-th server in messages, with its address where the
// client has one, so that an operator knows where to look (or run DEL).
func (r *Redlock) server(i int) string {
	if c, ok := r.stores[i].client.(*redis.Client); ok {
		return fmt.Sprintf("server %d (%s)", i, c.Options().Addr)
	}
	return fmt.Sprintf("server %d", i)
}
