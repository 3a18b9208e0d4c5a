package etcdstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRaftTermGoesBack: etcd restored from a snapshot (etcdutl snapshot
// restore) or replaced by a new cluster at the same endpoints starts its
// raft terms again from 2, below the term a running Store has seen. The
// Store must keep locks on the new cluster: it took keepalive answers of
// a lower term for a deposed leader's and trusted none of them, so every
// lock it took stepped down at its renew deadline, again and again, until
// the process restarted.
func TestRaftTermGoesBack(t *testing.T) {
	srv := startEtcd(t)
	for range 3 { // each restart of the single member elects it in a new term
		srv.Restart()
	}
	client := connect(t, srv.Endpoint())
	before := raftTerm(t, client, srv)
	if before <= 2 {
		t.Fatalf("raft term %d after three restarts; the test needs one above a new cluster's", before)
	}
	s := newStore(t, client, etcdstore.WithPrefix(freshPrefix(t)))
	const ttl = 2 * time.Second
	m := newMutex(t, s, "job", "holder", ttl)
	if err := lock(t, m).Unlock(t.Context()); err != nil { // the Store trusts answers of term `before`
		t.Fatal(err)
	}

	srv.Stop()
	if err := os.RemoveAll(srv.Dir); err != nil {
		t.Fatal(err)
	}
	srv.Start() // a new cluster at the same endpoint, as a restore makes
	if after := raftTerm(t, client, srv); after >= before {
		t.Fatalf("raft term %d on the new cluster, not below %d", after, before)
	}

	l := lock(t, m)
	timer := time.NewTimer(3 * ttl)
	defer timer.Stop()
	select {
	case <-l.Done():
		t.Fatalf("the lock taken on the new cluster was lost: %v", l.Err())
	case <-timer.C: // held through several renewals
	}
}

// raftTerm returns the raft term srv reports.
func raftTerm(t *testing.T, c *clientv3.Client, srv *testenv.Etcd) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, srv.Endpoint())
	if err != nil {
		t.Fatalf("status of %s: %v", srv.Endpoint(), err)
	}
	return st.RaftTerm
}
