package etcdstore

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestTrustGate checks the rules of trust.go on the gate alone: after a
// stream failure nothing is trusted until a confirming read; then only
// answers to requests sent after it, from members in at least its term.
func TestTrustGate(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	term := func(n uint64) *pb.ResponseHeader { return &pb.ResponseHeader{RaftTerm: n} }

	g := trustGate{since: t0}
	if !g.admit(at(time.Second), term(5)) {
		t.Fatal("an answer in the first term seen was not trusted")
	}
	if g.admit(at(2*time.Second), term(4)) {
		t.Fatal("an answer from a member in an older term was trusted")
	}
	if g.admit(at(-time.Second), term(5)) {
		t.Fatal("an answer to a request sent before the gate opened was trusted")
	}

	// The stream stalled: distrust until a read confirms term 6 at 10s.
	g.since = time.Time{}
	if g.admit(at(3*time.Second), term(6)) {
		t.Fatal("an answer was trusted while a confirmation was due")
	}
	g.since, g.term = at(10*time.Second), 6
	for _, c := range []struct {
		sent time.Duration
		term uint64
		want bool
	}{
		{9 * time.Second, 6, false},  // sent before the confirmation returned
		{11 * time.Second, 5, false}, // a deposed leader, still in its old term
		{11 * time.Second, 6, true},
		{12 * time.Second, 7, true},  // a later election: the floor rises
		{13 * time.Second, 6, false}, // so term 6 is old now
	} {
		if got := g.admit(at(c.sent), term(c.term)); got != c.want {
			t.Errorf("answer sent at %v in term %d: trusted %v, want %v", c.sent, c.term, got, c.want)
		}
	}
}
