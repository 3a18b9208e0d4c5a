package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/memstore"
)

type term struct {
	token uint64
	ctx   context.Context
}

// recorder collects what an Elector reports through its callbacks.
type recorder struct {
	mu      sync.Mutex
	leaders []string
	stopped []error
	started []uint64
	newLead chan string
}

func (r *recorder) options() []baton.Option {
	return []baton.Option{
		baton.OnNewLeader(func(id string) {
			r.mu.Lock()
			r.leaders = append(r.leaders, id)
			r.mu.Unlock()
			if r.newLead != nil {
				r.newLead <- id
			}
		}),
		baton.OnStartedLeading(func(_ context.Context, l *baton.Lease) {
			r.mu.Lock()
			r.started = append(r.started, l.Token())
			r.mu.Unlock()
		}),
		baton.OnStoppedLeading(func(_ *baton.Lease, cause error) {
			r.mu.Lock()
			r.stopped = append(r.stopped, cause)
			r.mu.Unlock()
		}),
	}
}

func newElector(t *testing.T, b backend.Backend, opts ...baton.Option) (*baton.Elector, *clocktest.FakeClock) {
	t.Helper()
	clk := clocktest.NewFakeClock(t0)
	e, err := baton.NewElector(b, "jobs.nightly", append([]baton.Option{baton.WithClock(clk), baton.WithIdentity("me"), quiet}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e, clk
}

func TestElectorWorkOncePerTermAndRecampaignAfterLoss(t *testing.T) {
	b := newScript()
	rec := &recorder{newLead: make(chan string, 8)}
	e, clk := newElector(t, watching{b}, rec.options()...)
	terms := make(chan term, 4)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
			terms <- term{l.Token(), ctx}
			<-ctx.Done()
			return nil
		})
	}()

	first := <-terms
	if id := <-rec.newLead; id != "me" {
		t.Fatalf("first new leader %q", id)
	}
	if first.token != 1 || !e.IsLeader() || e.Leader() != "me" {
		t.Fatalf("first term token %d, leader %q", first.token, e.Leader())
	}
	// Another process takes the lock (say, after a partition): the next
	// renew is rejected and the term ends at once.
	b.set("other")
	awaitTimer(t, clk)
	clk.Step(5 * time.Second)
	waitClosed(t, first.ctx.Done(), "first term after loss")
	if !errors.Is(context.Cause(first.ctx), baton.ErrLost) {
		t.Fatalf("first term cause = %v, want ErrLost", context.Cause(first.ctx))
	}
	// The elector campaigns again; the other holder releases; the standby
	// wakes on the watch and starts a second term with a larger token.
	select {
	case id := <-rec.newLead:
		if id != "other" {
			t.Fatalf("new leader %q, want other", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not observe the new leader")
	}
	if e.Leader() != "other" || e.IsLeader() {
		t.Fatalf("observed leader %q while other holds, want other", e.Leader())
	}
	b.set("")
	var second term
	select {
	case second = <-terms:
	case <-time.After(5 * time.Second):
		t.Fatal("elector did not campaign again after losing its term")
	}
	if second.token <= first.token {
		t.Fatalf("second term token %d, want > %d", second.token, first.token)
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if holder, _, _ := b.state(); holder != "" {
		t.Fatalf("after shutdown the store says %q holds; want released for instant handover", holder)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.started) != 2 || len(rec.stopped) != 2 {
		t.Fatalf("started %v, stopped %v; want 2 each", rec.started, rec.stopped)
	}
	if !errors.Is(rec.stopped[0], baton.ErrLost) || !errors.Is(rec.stopped[1], context.Canceled) {
		t.Fatalf("stop causes %v", rec.stopped)
	}
	want := []string{"me", "other", "me"}
	if len(rec.leaders) != len(want) {
		t.Fatalf("leaders %v, want %v", rec.leaders, want)
	}
	for i := range want {
		if rec.leaders[i] != want[i] {
			t.Fatalf("leaders %v, want %v", rec.leaders, want)
		}
	}
}

func TestElectorWorkReturningEndsRunAndReleases(t *testing.T) {
	b := newScript()
	e, _ := newElector(t, b)
	boom := errors.New("boom")
	if err := e.Run(context.Background(), func(context.Context, *baton.Lease) error { return boom }); err != boom {
		t.Fatalf("Run = %v, want work's error", err)
	}
	if holder, _, releases := b.state(); holder != "" || releases != 1 {
		t.Fatalf("store: holder %q releases %d, want released", holder, releases)
	}
	if e.IsLeader() {
		t.Fatal("still reports leading after Run returned")
	}
}

// unanswered is a store that never answers a release: it waits until the
// release's context ends, as the file backend does while a stopped process
// holds the lock file's flock.
type unanswered struct {
	*script
	released chan error // the release context's error
}

func (u unanswered) Release(ctx context.Context, g backend.Grant) error {
	<-ctx.Done()
	u.released <- ctx.Err()
	return ctx.Err()
}

func TestElectorWorkReturningReleaseIsBounded(t *testing.T) {
	u := unanswered{newScript(), make(chan error, 1)}
	e, _ := newElector(t, u)
	baton.SetReleaseTimeout(e, 50*time.Millisecond)
	boom := errors.New("boom")
	// Run's own context never ends: only the release's bound lets it return.
	if err := e.Run(context.Background(), func(context.Context, *baton.Lease) error { return boom }); err != boom {
		t.Fatalf("Run = %v, want work's error", err)
	}
	if err := <-u.released; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("release context ended with %v, want its deadline", err)
	}
	if e.IsLeader() {
		t.Fatal("still reports leading after Run returned")
	}
}

func TestElectorGraceExceededDoesNotReleaseOrRecampaign(t *testing.T) {
	b := newScript()
	rec := &recorder{}
	e, clk := newElector(t, b, append(rec.options(), baton.WithGrace(3*time.Second))...)
	stuck := make(chan struct{})
	unstick := sync.OnceFunc(func() { close(stuck) })
	defer unstick()
	started := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(context.Background(), func(ctx context.Context, l *baton.Lease) error {
			close(started)
			<-stuck // ignores its context
			return nil
		})
	}()
	<-started
	b.mu.Lock()
	b.renewErr = errors.New("partitioned")
	b.mu.Unlock()
	for _, d := range []time.Duration{5 * time.Second, 2 * time.Second, 2 * time.Second, time.Second} {
		awaitTimer(t, clk)
		clk.Step(d)
	}
	// +10s: stepped down; now the grace period runs.
	awaitTimer(t, clk)
	clk.Step(3 * time.Second)
	var err error
	select {
	case err = <-runErr:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the grace period")
	}
	if !errors.Is(err, baton.ErrGraceExceeded) || !errors.Is(err, baton.ErrLost) {
		t.Fatalf("Run = %v, want ErrGraceExceeded and the ErrLost cause", err)
	}
	if holder, _, releases := b.state(); holder != "me" || releases != 0 {
		t.Fatalf("store: holder %q releases %d; a stuck term must be left to expire, not released", holder, releases)
	}
	b.mu.Lock()
	acquires := b.acquires
	b.mu.Unlock()
	if acquires != 1 {
		t.Fatalf("%d acquire attempts; a stuck term must not campaign again", acquires)
	}

	// Nor may a second Run while the stuck work runs: it would start a
	// term beside it.
	noWork := func(context.Context, *baton.Lease) error { return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a campaign would wait for ever
	defer cancel()
	if err := e.Run(ctx, noWork); !errors.Is(err, baton.ErrGraceExceeded) || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("Run while the stuck work runs = %v, want ErrGraceExceeded at once", err)
	}
	b.mu.Lock()
	acquires = b.acquires
	b.mu.Unlock()
	if acquires != 1 {
		t.Fatalf("%d acquire attempts; a Run beside the stuck work must not campaign", acquires)
	}
	// Once it returns (and the claim it left expired), Run leads again.
	unstick()
	b.set("")
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := e.Run(context.Background(), noWork)
		if err == nil {
			break
		}
		if !errors.Is(err, baton.ErrGraceExceeded) || time.Now().After(deadline) {
			t.Fatalf("Run after the stuck work returned = %v, want a new term", err)
		}
		runtime.Gosched() // the work's result is on its way to Run's channel
	}
}

func TestElectorReleaseOnCancelFalseLeavesLockToExpire(t *testing.T) {
	b := newScript()
	e, _ := newElector(t, b, baton.WithReleaseOnCancel(false))
	ctx, cancel := context.WithCancel(context.Background())
	err := e.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
		cancel()
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if holder, _, releases := b.state(); holder != "me" || releases != 0 {
		t.Fatalf("store: holder %q releases %d, want kept (to expire)", holder, releases)
	}
}

func TestElectorRunTwiceAtOnce(t *testing.T) {
	b := newScript()
	e, _ := newElector(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	inWork := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- e.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
			close(inWork)
			<-ctx.Done()
			return nil
		})
	}()
	<-inWork
	if err := e.Run(ctx, func(context.Context, *baton.Lease) error { return nil }); !errors.Is(err, baton.ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
	cancel()
	<-runErr
}

// A nil work is refused before campaigning: elected, it would panic in
// Run's own goroutine, which no caller can recover.
func TestElectorRunNilWork(t *testing.T) {
	b := newScript()
	e, _ := newElector(t, b)
	if err := e.Run(context.Background(), nil); !errors.Is(err, baton.ErrInvalidOptions) || !strings.Contains(err.Error(), "work is nil") {
		t.Fatalf("Run(ctx, nil) = %v, want ErrInvalidOptions naming work", err)
	}
	if holder, _, _ := b.state(); holder != "" {
		t.Fatalf("store holder %q after a refused Run, want none", holder)
	}
}

func TestElectorStopsOnPermanentError(t *testing.T) {
	e, _ := newElector(t, failing{newScript(), baton.ErrForbidden})
	err := e.Run(context.Background(), func(context.Context, *baton.Lease) error {
		t.Error("work started without a lease")
		return nil
	})
	if !errors.Is(err, baton.ErrForbidden) {
		t.Fatalf("Run = %v, want ErrForbidden", err)
	}
}

// An attempt whose answer was lost (a timeout) but which the store carried
// out leaves a claim under the elector's own identity that no term of its
// owns; the log names that cause, not only a previous term or a duplicate
// identity.
func TestElectorOwnClaimFromLostAnswerLogged(t *testing.T) {
	b := newScript()
	b.lostGrant = fmt.Errorf("%w: i/o timeout", baton.ErrUnavailable)
	logs := &lines{}
	seen := make(chan string, 1)
	el, err := baton.NewElector(b, "jobs.nightly", baton.WithIdentity("me"), baton.WithRetryPeriod(10*time.Millisecond),
		baton.OnNewLeader(func(id string) { seen <- id }), baton.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(context.Context, *baton.Lease) error {
			return errors.New("no term may start on a claim this elector does not own")
		})
	}()
	if id := <-seen; id != "me" {
		t.Fatalf("leader seen = %q, want me", id)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if out := logs.String(); !strings.Contains(out, "no answer") {
		t.Errorf("log:\n%s\nwant the lost answer of an own attempt among the causes", out)
	}
}

// Two electors misconfigured with one identity: only the one in a term
// reports leading, though both see "me" as the holder.
func TestElectorIsLeaderIsOwnTermNotIdentity(t *testing.T) {
	b := memstore.New()
	opts := []baton.Option{baton.WithIdentity("me"), quiet}
	a, err := baton.NewElector(b, "jobs.nightly", opts...)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	logs := &lines{}
	other, err := baton.NewElector(b, "jobs.nightly", append(opts, baton.OnNewLeader(func(id string) { seen <- id }),
		baton.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	<-leading
	standbyCtx, stopStandby := context.WithCancel(ctx)
	standbyDone := make(chan error, 1)
	go func() {
		standbyDone <- other.Run(standbyCtx, func(context.Context, *baton.Lease) error {
			return errors.New("the standby must not lead while the first elector holds the lock")
		})
	}()
	// The standby's first attempt is refused and reports the holder "me".
	if id := <-seen; id != "me" || other.Leader() != "me" {
		t.Fatalf("the standby saw leader %q (Leader() = %q), want me", id, other.Leader())
	}
	if !a.IsLeader() {
		t.Fatal("the elector in a term reports not leading")
	}
	if other.IsLeader() {
		t.Fatal("a standby with the same identity reports leading")
	}
	// Its log does not call its own identity a new leader.
	if out := logs.String(); strings.Contains(out, "new leader") || !strings.Contains(out, "held under this elector's own identity") {
		t.Errorf("standby's log:\n%s\nwant the lock held under its own identity, not a new leader", out)
	}
	stopStandby()
	if err := <-standbyDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("standby Run = %v, want context.Canceled", err)
	}
	cancel()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if a.IsLeader() {
		t.Fatal("still reports leading after Run returned")
	}
}

// lines is a log sink for a slog handler, safe for concurrent writes.
type lines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A work that releases its term itself (Lease.Unlock) and returns has
// stopped leading by its own decision: Run returns its result and does not
// campaign again, whether the work returned before Run saw the release or
// after (it ran again and again, 6 times in 2 s on memstore).
func TestElectorWorkReleasingItsTermEndsRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // between the work's Unlock and its return
	}{{"returns at once", 0}, {"returns later", 50 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := baton.NewElector(memstore.New(), "jobs.nightly", baton.WithIdentity("me"), quiet)
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			done := errors.New("done for today")
			errc := make(chan error, 1)
			go func() {
				errc <- e.Run(context.Background(), func(ctx context.Context, l *baton.Lease) error {
					runs++
					if err := l.Unlock(ctx); err != nil {
						return err
					}
					time.Sleep(tc.after) // work that goes on a moment after the release
					return done
				})
			}()
			select {
			case err := <-errc:
				if !errors.Is(err, done) || runs != 1 {
					t.Fatalf("Run = %v after %d runs of work, want the work's error after one", err, runs)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after work released its term and returned")
			}
		})
	}
}

// A term whose lock is force-released while work runs, and whose work
// returns before a renewal could tell, is still reported: the release
// after work finds the loss and logs it (it was dropped without a word).
func TestElectorLossFoundAtReleaseLogged(t *testing.T) {
	s := memstore.New()
	logs := &lines{}
	el, err := baton.NewElector(s, "jobs.nightly", baton.WithIdentity("me"), baton.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	err = el.Run(context.Background(), func(ctx context.Context, _ *baton.Lease) error {
		return s.ForceRelease(ctx, "jobs.nightly")
	})
	if err != nil {
		t.Fatalf("Run = %v, want work's nil", err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no longer this term's") {
		t.Errorf("log:\n%s\nwant a warning that the lock was lost before work returned", out)
	}
}

// The same when Run's context ends as work returns (baton run stops so
// when its command exits on its own): the release on shutdown reports it.
func TestElectorLossFoundAtShutdownLogged(t *testing.T) {
	s := memstore.New()
	logs := &lines{}
	el, err := baton.NewElector(s, "jobs.nightly", baton.WithIdentity("me"), baton.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = el.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
		err := s.ForceRelease(ctx, "jobs.nightly")
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no longer this term's") {
		t.Errorf("log:\n%s\nwant a warning that the lock was lost before work returned", out)
	}
}

// gatedRelease is a script whose Release waits for gate (or its context):
// a store that stopped answering.
type gatedRelease struct {
	*script
	gate chan struct{}
}

func (s gatedRelease) Release(ctx context.Context, g backend.Grant) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.script.Release(ctx, g)
}

// A lost term is reported over (OnStoppedLeading, EventStoppedLeading) as
// soon as its work returned, not after the courtesy release that follows,
// which waits up to its timeout for a store that does not answer: a
// readiness flag set by the callbacks would otherwise say "leading" while
// another replica may lead.
func TestElectorLostTermReportedBeforeRelease(t *testing.T) {
	b := gatedRelease{newScript(), make(chan struct{})}
	stopped := make(chan error, 1)
	e, clk := newElector(t, b, baton.OnStoppedLeading(func(_ *baton.Lease, cause error) { stopped <- cause }))
	baton.SetReleaseTimeout(e, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
			started <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	<-started
	b.set("thief") // the next renew finds the claim taken
	awaitTimer(t, clk)
	clk.Step(5 * time.Second)
	select {
	case cause := <-stopped:
		if !errors.Is(cause, baton.ErrLost) {
			t.Errorf("OnStoppedLeading cause = %v, want ErrLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Error("OnStoppedLeading not called within 5s of the loss while the release waits for the store")
	}
	if e.IsLeader() {
		t.Error("IsLeader after the loss")
	}
	close(b.gate)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}
