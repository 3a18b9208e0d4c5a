package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/baton-go/baton/backend"
)

// readBound bounds each server's call of a Redlock read (Get, List); the
// read waits a tenth of it (straggle) for the servers still silent once
// the answers settled it (readSettled), so that one frozen server does
// not hold a status view for its client's timeouts and retries.
const readBound = 10 * time.Second

// readSettled is eachUntil's decided for a read of one lock: the answers
// so far settle the merged record (see merge) if one owner's claims are on
// a quorum of them, or if a quorum answered and no owner's claims, with
// every server still silent, could make a quorum.
func (r *Redlock) readSettled(res []readResult, answered []bool) bool {
	var recs []backend.Record
	n, pending := 0, 0
	for i, x := range res {
		switch {
		case !answered[i]:
			pending++
		case x.err == nil:
			n++
			recs = append(recs, x.rec)
		case errors.Is(x.err, backend.ErrNotFound):
			n++
		}
	}
	if r.heldByQuorum(recs) {
		return true
	}
	return n >= r.quorum && r.undecided(recs, pending) == 0
}

// heldByQuorum reports whether one owner's unexpired claims are on a
// quorum of recs.
func (r *Redlock) heldByQuorum(recs []backend.Record) bool {
	for _, c := range r.claimCounts(recs) {
		if c >= r.quorum {
			return true
		}
	}
	return false
}

// undecided returns the claims, in recs, of an owner that holds no quorum
// there but could with the missing servers that did not answer: the
// record is then unknown, neither held nor free. It returns 0 if there is
// none.
func (r *Redlock) undecided(recs []backend.Record, missing int) int {
	if missing == 0 || r.heldByQuorum(recs) {
		return 0
	}
	for _, c := range r.claimCounts(recs) {
		if c+missing >= r.quorum {
			return c
		}
	}
	return 0
}

// claimCounts counts the unexpired claims in recs per owner (holder and
// nonce).
func (r *Redlock) claimCounts(recs []backend.Record) map[[2]string]int {
	counts := map[[2]string]int{}
	for _, rec := range recs {
		if rec.Held() {
			counts[[2]string{rec.Holder, rec.Nonce}]++
		}
	}
	return counts
}

// noAnswers returns res with the result of each server that had not
// answered (answered false) replaced by noAnswer's error.
func noAnswers(ctx context.Context, res []readResult, answered []bool) []readResult {
	for i := range res {
		if !answered[i] {
			res[i] = readResult{err: noAnswer(ctx)}
		}
	}
	return res
}

// column returns every server's result for the i-th lock of a readMany,
// an empty result for a server that had not answered.
func column(perServer [][]readResult, answered []bool, i int) []readResult {
	out := make([]readResult, len(perServer))
	for j, rs := range perServer {
		if answered[j] {
			out[j] = rs[i]
		}
	}
	return out
}
