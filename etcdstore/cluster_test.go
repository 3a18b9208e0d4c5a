package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// clusterTTL is long on purpose: the tests below assert that a standby
// takes over after a raft election, well before the holder's lease could
// have expired, and a long TTL leaves a busy machine all the slack it
// needs.
const clusterTTL = 30 * time.Second

// startCluster starts a three-member etcd and waits for its leader.
func startCluster(t *testing.T) (*testenv.EtcdCluster, int) {
	t.Helper()
	c := testenv.StartEtcdCluster(t, testenv.EtcdNoFsync())
	return c, c.WaitLeader(15 * time.Second)
}

// TestClusterLeaderKilledWhileHeld: the raft leader is killed while a lock
// is held. The holder keeps the lock (its keepalive stream moves to
// another member; etcd keeps leases across a leader change), the standby
// does not get it meanwhile, and after Unlock the standby acquires with a
// larger token, long before the holder's lease could have expired.
func TestClusterLeaderKilledWhileHeld(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		t.Run("killed", func(t *testing.T) { leaderLostWhileHeld(t, mode, false) })
		// A paused leader (SIGSTOP: a frozen VM) is replaced the same way; it
		// rejoins as a follower when it is continued.
		t.Run("paused", func(t *testing.T) { leaderLostWhileHeld(t, mode, true) })
	})
}

func leaderLostWhileHeld(t *testing.T, mode etcdstore.Option, pause bool) {
	c, lead := startCluster(t)
	prefix := freshPrefix(t)
	a := newStore(t, connect(t, c.Endpoints()...), etcdstore.WithPrefix(prefix), mode)
	b := newStore(t, connect(t, c.Endpoints()...), etcdstore.WithPrefix(prefix), mode)
	holder := lock(t, newMutex(t, a, "job", "holder", clusterTTL))
	heldOpt, held := eventOf(baton.EventHeld)
	standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", clusterTTL, heldOpt))
	within(t, 10*time.Second, "the standby to find the lock held", held)

	killed := time.Now()
	if pause {
		c.Members[lead].Pause()
		defer c.Members[lead].Resume()
	} else {
		c.Members[lead].Kill()
	}
	next := c.WaitLeader(15*time.Second, lead)
	elected := time.Now()
	// A renew that needs etcd: the Store must reach the new leader.
	// The lease's TTL is clusterTTL+3s (see the package documentation):
	// only a keepalive sent from now on keeps it alive that long.
	keptAlive(t, a, "job", time.Now().Add(clusterTTL+3*time.Second-50*time.Millisecond))
	if err := holder.Err(); err != nil {
		t.Fatalf("the holder lost the lock across a leader change: %v", err)
	}
	select {
	case got := <-standby:
		t.Fatalf("the standby acquired while the lock is held: %+v", got)
	default:
	}
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock after the leader change: %v", err)
	}
	unlocked := time.Now()
	got := within(t, clusterTTL, "the standby to acquire", standby)
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Logf("leader %d killed or paused at 0; member %d elected at %v; unlocked at %v; standby acquired at %v",
		lead, next, elected.Sub(killed), unlocked.Sub(killed), got.at.Sub(killed))
	if got.lease.Token() <= holder.Token() {
		t.Errorf("standby token %d after %d", got.lease.Token(), holder.Token())
	}
}

// keptAlive waits until s's lease for its claim on name was kept alive
// until at least until: a keepalive sent after now was acknowledged.
func keptAlive(t *testing.T, s *etcdstore.Store, name string, until time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), clusterTTL/2)
	defer cancel()
	if err := etcdstore.KeptAlive(ctx, s, name, until); err != nil {
		t.Fatalf("keepalive after the leader change: %v", err)
	}
}

// TestClusterLeaderKilledDuringRelease: the holder releases just as the
// raft leader is killed, through a member that then has no leader (the
// request used to wait for etcd's own 7s timeout and fail). The release is
// sent again within Unlock's context and succeeds, and the standby
// acquires after the election, long before the holder's lease could have
// expired: not when it expires.
func TestClusterLeaderKilledDuringRelease(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		for _, via := range []string{"follower", "all members"} {
			t.Run(via, func(t *testing.T) {
				c, lead := startCluster(t)
				follower := (lead + 1) % 3
				eps := c.Endpoints()
				if via == "follower" {
					eps = []string{c.Members[follower].Endpoint()}
				}
				prefix := freshPrefix(t)
				a := newStore(t, connect(t, eps...), etcdstore.WithPrefix(prefix), mode)
				b := newStore(t, connect(t, c.Endpoints()...), etcdstore.WithPrefix(prefix), mode)
				holder := lock(t, newMutex(t, a, "job", "holder", clusterTTL))
				heldOpt, held := eventOf(baton.EventHeld)
				standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", clusterTTL, heldOpt))
				within(t, 10*time.Second, "the standby to find the lock held", held)

				killed := time.Now()
				c.Members[lead].Kill()
				ctx, cancel := context.WithTimeout(t.Context(), clusterTTL/2)
				defer cancel()
				err := holder.Unlock(ctx)
				unlocked := time.Now()
				if err != nil {
					t.Fatalf("Unlock during the leader change failed after %v: %v", unlocked.Sub(killed), err)
				}
				got := within(t, clusterTTL, "the standby to acquire", standby)
				if got.err != nil {
					t.Fatal(got.err)
				}
				t.Logf("leader %d killed at 0; Unlock returned at %v; standby acquired at %v",
					lead, unlocked.Sub(killed), got.at.Sub(killed))
				// The holder's lease lives at least clusterTTL after its last
				// keepalive before the kill (and etcd extends leases on a
				// leader change): a standby that got the lock before then was
				// woken by the release, not by the expiry.
				if !got.at.Before(killed.Add(clusterTTL)) {
					t.Errorf("the standby acquired %v after the kill: after the lease expired, not after the release", got.at.Sub(killed))
				}
				if got.lease.Token() <= holder.Token() {
					t.Errorf("standby token %d after %d", got.lease.Token(), holder.Token())
				}
			})
		}
	})
}

// TestClusterLeaderKilledAtExpiry: a claim expires (its holder stopped
// renewing) just as the raft leader is killed, on a Store that reaches
// etcd through one follower. The Store's delete of the expired key is
// forwarded to the dead leader and lost, and etcd answers it only at its
// own request timeout (7s with the default election timeout); the lease,
// which the expired claim keeps busy, would never end the key. The Store
// sends the delete again after its attempt's own timeout, so the standby
// acquires soon after the election and the claim's expiry, not after
// etcd's timeout (which the safety suite's leader_killed row once saw:
// a new holder 10.8s after the kill).
func TestClusterLeaderKilledAtExpiry(t *testing.T) {
	const ttl = 3 * time.Second
	c, lead := startCluster(t)
	prefix := freshPrefix(t)
	a := newStore(t, connect(t, c.Members[(lead+1)%3].Endpoint()), etcdstore.WithPrefix(prefix))
	b := newStore(t, connect(t, c.Members[(lead+2)%3].Endpoint()), etcdstore.WithPrefix(prefix))
	sent := time.Now()
	if _, err := a.TryAcquire(t.Context(), "job", backend.Request{Holder: "holder", Nonce: baton.NewNonce(), TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	expiry := sent.Add(ttl) // the claim's deadline is at or after it
	heldOpt, held := eventOf(baton.EventHeld)
	standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", clusterTTL, heldOpt))
	within(t, 10*time.Second, "the standby to find the lock held", held)

	// The follower notices the leader's death only after its election
	// timeout (1s or more): a delete sent at the expiry goes to the dead
	// leader.
	time.Sleep(time.Until(expiry.Add(-300 * time.Millisecond)))
	killed := time.Now()
	c.Members[lead].Kill()
	next := c.WaitLeader(15*time.Second, lead)
	elected := time.Now()
	got := within(t, clusterTTL, "the standby to acquire", standby)
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Logf("leader %d killed at 0; claim expired at %v; member %d elected at %v; standby acquired at %v",
		lead, expiry.Sub(killed), next, elected.Sub(killed), got.at.Sub(killed))
	// The delete's first attempt ends after firstReleaseAttempt (2s); the
	// next one is answered once a leader is elected. Waiting for etcd's
	// own answer to the first would take 7s from the expiry.
	if late := got.at.Sub(later(expiry, elected)); late >= 5*time.Second {
		t.Errorf("the standby acquired %v after the claim expired and a leader was elected: the delete of the expired claim waited for etcd's request timeout", late)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestClusterQuorumLostAtOpen: two of three members are down, so the one
// left answers but has no raft leader, and etcd answers no request that
// needs one (Open's first, MemberList). Open said only "no answer within
// 2s: context deadline exceeded", and the CLI added "check that the store
// runs and that its address is right", which both are. Open now asks the
// members, which answer Status without a leader, and says that the cluster
// lost its quorum.
func TestClusterQuorumLostAtOpen(t *testing.T) {
	c, _ := startCluster(t)
	left := c.Members[0]
	c.Members[1].Kill()
	c.Members[2].Kill()
	left.WaitNoLeader(t, 30*time.Second)
	err := openFails(t, "with two of three members down", etcdstore.Config{Endpoints: c.Endpoints()})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "no raft leader") ||
		!strings.Contains(err.Error(), "lost its quorum") || !strings.Contains(err.Error(), left.Endpoint()) {
		t.Errorf("Open with the cluster's quorum lost: %v; want ErrUnavailable naming the member without a leader and the lost quorum", err)
	}
}

// TestClusterLearner: a member added with etcdctl member add --learner
// (the first step of replacing a member) answers clients only with "rpc
// not supported for learner" until it is promoted. Listed among voting
// members, it costs nothing (etcd's client sends the request again to
// another endpoint); listed alone, Open failed with etcd's bare message,
// which baton lock, status and run took for a runtime error (exit 1). It
// is now a misconfiguration (exit 78) that names the learner and the fix.
func TestClusterLearner(t *testing.T) {
	c, _ := startCluster(t)
	learner := c.AddLearner()
	useLock(t, openOK(t, etcdstore.Config{Endpoints: append([]string{learner.Endpoint()}, c.Endpoints()...)}), etcdstore.WithPrefix(freshPrefix(t)))
	err := openFails(t, "to a learner only", etcdstore.Config{Endpoints: learner.Endpoints()})
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "learner") || !strings.Contains(err.Error(), "member promote") {
		t.Errorf("Open of a learner alone: %v; want ErrMisconfigured naming the learner and etcdctl member promote", err)
	}
}

// TestClusterQuorumLostLongerThanLease: two of three members are down for
// longer than the holder's lease, so the holder steps down and its Store
// gives the lease up, asking etcd to revoke it, which fails: there is no
// leader. etcd still keeps the lease, and extends it by its TTL when the
// members are back and a new leader is elected, so the stepped-down
// holder's claim kept the lock from everyone for that TTL after the
// outage (measured with baton run at TTL 5s: the next leader 6.7s after
// the cluster was healthy again; 17s at the default TTL). The Store now
// sends the revocation again until etcd answers: the claim goes before
// the lease could have expired by itself, and a standby that waited
// through the outage acquires with a larger token.
func TestClusterQuorumLostLongerThanLease(t *testing.T) {
	const ttl = 6 * time.Second // a lease of 7s
	c, _ := startCluster(t)
	prefix := freshPrefix(t)
	cli := connect(t, c.Endpoints()...)
	a := newStore(t, connect(t, c.Endpoints()...), etcdstore.WithPrefix(prefix))
	holder := lock(t, newMutex(t, a, "job", "holder", ttl))
	b := newStore(t, connect(t, c.Endpoints()...), etcdstore.WithPrefix(prefix))
	heldOpt, held := eventOf(baton.EventHeld)
	standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", ttl, heldOpt))
	within(t, 10*time.Second, "the standby to find the lock held", held)
	resp, err := cli.Get(t.Context(), prefix+"job")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading the claim: %v, %v", resp, err)
	}
	claimRev, leaseID := resp.Kvs[0].ModRevision, clientv3.LeaseID(resp.Kvs[0].Lease)

	c.Members[1].Kill()
	c.Members[2].Kill()
	select {
	case <-holder.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the holder did not step down without a quorum")
	}
	// The outage outlasts the lease (7s after its last keepalive, when
	// the Store gives it up) and the 10s that a single revocation was
	// given: the length of the outage is what this test is about.
	time.Sleep(20 * time.Second)
	c.Members[1].Start()
	c.Members[2].Start()
	c.WaitLeader(15 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ttlResp, err := cli.TimeToLive(ctx, leaseID)
	asked := time.Now()
	if err != nil {
		t.Fatalf("asking for the holder's old lease: %v", err)
	}
	// The claim's key goes with the lease (at once if the Store revoked
	// it before etcd answered the question above).
	waitDeleted(t, cli, prefix+"job", claimRev)
	gone := time.Since(asked)
	t.Logf("etcd kept the old lease for %ds more after the outage; the claim went after %v", ttlResp.TTL, gone.Round(time.Millisecond))
	if ttlResp.TTL > 0 && gone >= time.Duration(ttlResp.TTL-1)*time.Second {
		t.Errorf("the stepped-down holder's claim went %v after the outage, when its lease expired (%ds): the Store did not revoke the lease it gave up", gone.Round(time.Millisecond), ttlResp.TTL)
	}
	got := within(t, 2*clusterTTL, "the standby to acquire", standby)
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Logf("the standby acquired %v after the outage", got.at.Sub(asked).Round(time.Millisecond))
	if got.lease.Token() <= holder.Token() {
		t.Errorf("standby token %d after %d", got.lease.Token(), holder.Token())
	}
}
