package etcdstore

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lease answer (a keepalive's, or a verification's TTL) extends a
// lease's acknowledged life only if it comes from the raft leader of the
// current term. etcd does not promise that by itself: a leader whose
// process was stopped (SIGSTOP, a frozen VM or cgroup) and resumed after
// the others elected a new leader still counts itself the leader for a
// moment, and in etcd 3.7 its check of that (ensureLeadership) is skipped
// when its raft ticker fired recently, which it does at once on resume.
// It then answers the keepalives that queued up while it was stopped from
// its own lessor, with the full TTL; the new leader never hears of those
// renewals and expires the lease on its own schedule, up to the length of
// the stop earlier than the holder computed. The safety suite's
// leader_paused row showed two holders at once from this, on a loaded
// machine.
//
// A keepalive stream that fails or stalls is the sign of such a stop (or
// of a leader change). After it, the Store trusts no lease answer until a
// linearizable read (which only the current term's leader can serve) has
// returned, and then only answers to requests sent after that read
// returned, from a member whose raft term is at least the read's (the
// read's term is the floor even where an earlier one was higher: see
// confirmed). A stopped leader that resumes answers with its old term;
// one that has learnt of the new term forwards renewals to the new
// leader.
// Distrusted keepalives acknowledge nothing: Renew calls wait for a
// trusted one, and the engine steps down at its renew deadline if none
// comes.
//
// A stop shorter than the stall timeout leaves the stream open, but then
// at most one keepalive per lease is in flight, sent at most maxEvery
// after the last answer, so before the stop plus one period; the new
// leader is promoted no sooner than about one election timeout into the
// stop and extends every lease by another, so its expiry covers that
// keepalive's credit (send time + lease TTL) whether the old or the new
// leader answered it.
type trustGate struct {
	// since: answers to requests sent before it are not trusted. Zero
	// while a confirming read is due or running.
	since      time.Time
	term       uint64 // the highest raft term of a trusted answer or a confirming read
	confirming bool
}

// admit reports whether an answer with header h to a request sent at
// sent may extend a lease's life, and raises the term floor if so.
func (g *trustGate) admit(sent time.Time, h *pb.ResponseHeader) bool {
	if g.since.IsZero() || sent.Before(g.since) {
		return false
	}
	var term uint64
	if h != nil {
		term = h.RaftTerm
	}
	if term < g.term {
		return false
	}
	g.term = term
	return true
}

// confirmed sets the term floor to that of a confirming read, and reports
// whether that took it back (from the floor before). Within one raft
// history the read's term is never below the floor: terms only grow, only
// the current term's leader serves a linearizable read, and every answer
// that raised the floor came before the read. A lower term means another
// history: etcd restored from a snapshot, or a new cluster at the same
// endpoints, whose terms start again from 2. Keeping the old floor would
// refuse every answer of that cluster, so that no lock taken on it could
// be renewed for as long as the process ran.
func (g *trustGate) confirmed(term uint64) (from uint64, back bool) {
	from, back = g.term, term < g.term
	g.term = term
	return from, back
}

// distrustLocked closes the gate after the keepalive stream failed or
// stalled, and starts a confirming read. p.mu must be held.
func (p *leasePool) distrustLocked() {
	p.trust.since = time.Time{}
	p.confirmLocked()
}

// confirmLocked starts a confirming read if the gate is closed and none
// runs. The read is a linearizable Get of the Store's prefix (count only).
// p.mu must be held.
func (p *leasePool) confirmLocked() {
	if !p.trust.since.IsZero() || p.trust.confirming || p.closed {
		return
	}
	p.trust.confirming = true
	p.goTask(func(ctx context.Context) {
		resp, err := p.client.Get(ctx, p.prefix, clientv3.WithCountOnly())
		p.mu.Lock()
		defer p.mu.Unlock()
		p.trust.confirming = false
		if err != nil {
			if ctx.Err() == nil {
				p.log.Debug("etcdstore: cannot confirm the raft term after a keepalive stream failure", "err", err)
			}
			return // the next distrusted answer tries again
		}
		if resp.Header != nil {
			if from, back := p.trust.confirmed(resp.Header.RaftTerm); back {
				p.log.Warn("etcdstore: etcd's raft term went back: the cluster was restored from a snapshot or replaced by a new one at these endpoints; its revisions, and the fencing tokens made of them, may have gone back too, unless it was restored with etcdutl snapshot restore --bump-revision and --mark-compacted",
					"from_term", from, "to_term", resp.Header.RaftTerm)
			}
		}
		p.trust.since = time.Now()
		for _, l := range p.leases {
			l.broadcast() // Renew calls waiting for a keepalive ask for one now
		}
		p.goTask(p.user.recheck)
	})
}
