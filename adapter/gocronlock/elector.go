package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/baton-go/baton"
)

// Elector implements gocron.Elector with a baton.Elector: a scheduler given
// gocron.WithDistributedElector(e) runs jobs only while e leads.
//
// Run must be running for the Elector to ever lead; IsLeader answers from
// the current term's Lease, whose context ends before the claim can expire
// in the store (see baton.Lease), so two schedulers never both see
// IsLeader return nil for one moment. A run that started while leading is
// not stopped when the term ends: gocron checks IsLeader only before each
// run. Jobs that must stop with the term call Term once when they start
// (nil: the term already ended, skip the run) and watch that Lease's
// Context.
//
// Its methods are safe for concurrent use: Run in one goroutine, IsLeader
// and Term from gocron's and the jobs' goroutines.
type Elector struct {
	e *baton.Elector

	mu   sync.Mutex
	term *baton.Lease // nil while not leading
}

// NewElector returns an Elector over e. Configure e (TTL, identity,
// callbacks) with baton's options; e must not be run elsewhere. If e is
// nil (baton.NewElector failed and its error was not checked), Run and
// IsLeader return an error that says so, and the Elector never leads.
func NewElector(e *baton.Elector) *Elector { return &Elector{e: e} }

// errNilElector is what an Elector over a nil *baton.Elector answers.
var errNilElector = errors.New("gocronlock: the Elector was made with a nil *baton.Elector: check the error of baton.NewElector")

// Run campaigns until ctx ends, holding each term until it ends, and
// returns what baton.Elector.Run returns (ctx's error once ctx ends). When
// ctx ends the lock is released (unless baton.WithReleaseOnCancel(false)),
// so that a standby scheduler takes over at once; Run returns after that
// release. Wait for it before closing the store or exiting: a process that
// exits first leaves the lock held until its TTL ends.
func (g *Elector) Run(ctx context.Context) error {
	if g.e == nil {
		return errNilElector
	}
	return g.e.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
		g.mu.Lock()
		g.term = l
		g.mu.Unlock()
		<-ctx.Done()
		g.mu.Lock()
		g.term = nil
		g.mu.Unlock()
		return nil
	})
}

// Term returns the current term's Lease (its fencing token, its context),
// or nil while not leading. A job's run calls it once, at its start, and
// checks for nil: the term can end between gocron's IsLeader and the run.
func (g *Elector) Term() *baton.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.term == nil || g.term.Err() != nil {
		return nil
	}
	return g.term
}

// IsLeader implements gocron.Elector: nil while a term is valid, else a
// *NotLeaderError naming the leader last observed.
func (g *Elector) IsLeader(context.Context) error {
	if g.Term() != nil {
		return nil
	}
	if g.e == nil {
		return errNilElector
	}
	return &NotLeaderError{Name: g.e.Name(), Identity: g.e.Identity(), Leader: g.e.Leader()}
}

// NotLeaderError is IsLeader's answer on a scheduler that does not lead.
type NotLeaderError struct {
	Name     string // the election's lock name
	Identity string // this elector's identity
	Leader   string // the leader last observed, "" if unknown
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return fmt.Sprintf("gocronlock: %s does not lead %q", e.Identity, e.Name)
	}
	return fmt.Sprintf("gocronlock: %s does not lead %q; the leader is %s", e.Identity, e.Name, e.Leader)
}
