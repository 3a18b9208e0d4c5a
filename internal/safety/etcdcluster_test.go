//go:build linux

package safety

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
)

// The etcd rows of issue 13, on a three-member cluster: the raft leader
// killed (SIGKILL) while a contender holds the lock, and the lock's claim
// key deleted by hand (etcdctl del) while held. They drive the shared
// harness (spawn, traps, checker) with their own fault step, so that they
// need no new fault in the harness.
const (
	faultLeaderKill      = "3 members: raft leader killed while held"
	faultKeyDeleted      = "claim key deleted while held"
	faultLeaderPause     = "3 members: raft leader paused while held until another is elected"
	faultLeaderPauseLong = "3 members: raft leader paused while held for twice the TTL"
	faultLeaderStall     = "3 members: raft leader paused while held for 4s within leases of TTL 6s"
	faultMemberCut       = "3 members: raft leader cut from the clients while held"
	faultQuorumLost      = "3 members: quorum lost while held for longer than the leases"
	faultQuorumLostFair  = "3 members: quorum lost while held for longer than the leases in fair mode"
	// The fair-mode variants (etcdstore.WithFair): a queue of waiters, the
	// lock handed to the oldest at each release.
	faultLeaderKillFair  = "3 members in fair mode: raft leader killed while held within leases of TTL 6s"
	faultLeaderStallFair = "3 members in fair mode: raft leader paused while held for 4s within leases of TTL 6s"
)

// etcdStaleRevoke is why the long leader pause may show two holders: etcd,
// not baton, ends live claims there. A leader stopped for longer than its
// leases' TTL finds them expired by its own clock when it resumes, and
// revokes them before it learns it was deposed: etcd 3.7 skips its
// leadership check (ensureLeadership) when its raft ticker fired recently,
// which it does at once on resume, and the revoke, forwarded to the new
// leader, is committed (etcd issues 12528 and 15247). The holder computed
// its lease from the new leader's renewals, so a successor can take the
// lock before the holder's ValidUntil. Fencing still refuses the old
// holder's writes.
const etcdStaleRevoke = "etcd 3.7 lets a resumed, deposed leader revoke leases"

// TestSafetyEtcdCluster runs the rows; 0 stale writes accepted, no
// repeated token and the new holder's writes accepted are the checker's.
// leader_killed_fair is leader_killed with the contenders' Stores in fair
// mode: the release that hands the lock to the oldest waiter, and the
// waiter's collection from a watch event, run across the election. Its
// contenders use a TTL of 6s: with 2s, the holder's release, sent while
// no member had a leader, outlived its first attempt (2s) and the claim's
// deadline, and the Store's clean-up of the expired claim released it
// plainly (no handoff in 2 of 3 runs, etcd's history showing the waiter
// behind it in the queue).
func TestSafetyEtcdCluster(t *testing.T) {
	cl := testenv.StartEtcdCluster(t, testenv.EtcdNoFsync())
	logMembersOnFailure(t, cl)
	be := clusterEnv(t, cl)
	t.Run("leader_killed", func(t *testing.T) {
		runClusterScenario(t, be, scenario{fault: faultLeaderKill}, func(h *harness) { leaderKill(h, cl) })
	})
	t.Run("leader_killed_fair", func(t *testing.T) {
		w := &fairWitness{cl: cl}
		be := balancedEnv(t, cl.Addrs(), 3*ttl)
		runClusterScenario(t, be, scenario{fault: faultLeaderKillFair, fair: true}, w.round(func(h *harness) fired { return leaderKill(h, cl) }))
		w.require(t)
	})
	t.Run("claim_key_deleted", func(t *testing.T) {
		runClusterScenario(t, be, scenario{fault: faultKeyDeleted}, func(h *harness) { deleteClaimKey(h, cl) })
	})
	t.Run("quorum_lost", func(t *testing.T) {
		runClusterScenario(t, be, scenario{fault: faultQuorumLost, rounds: slowRounds()}, func(h *harness) { quorumLost(h, cl) })
	})
	// Every lease, the waiters' places in the queue with them, expires
	// during the outage: the waiters must queue again and one acquire once
	// etcd answers. (etcdstore's TestFairWaiterAfterLeasesExpired holds
	// the narrow case fixed on 2026-12-07, a waiter that queued again
	// waiting for a claim already gone; this row passed without that fix
	// in two runs.)
	t.Run("quorum_lost_fair", func(t *testing.T) {
		runClusterScenario(t, be, scenario{fault: faultQuorumLostFair, fair: true, rounds: slowRounds()}, func(h *harness) { quorumLost(h, cl) })
	})
	t.Run("leader_cut", func(t *testing.T) {
		proxies := make([]*faultproxy.Proxy, len(cl.Members))
		var addrs []string
		for i, m := range cl.Members {
			p, err := faultproxy.New(m.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			proxies[i] = p
			addrs = append(addrs, p.Addr())
		}
		runClusterScenario(t, balancedEnv(t, addrs, ttl), scenario{fault: faultMemberCut}, func(h *harness) { leaderCut(h, cl, proxies) })
	})
}

// TestSafetyEtcdLeaderPause stops the raft leader (SIGSTOP) while a
// contender holds the lock, on a cluster of its own with fast elections
// (heartbeat 50ms, election timeout 500ms), so that a new leader is
// elected well within the leases' TTL:
//
//   - leader_paused: the old leader resumes as soon as another is elected,
//     with the keepalives that queued up meanwhile; it answers them from
//     its own lessor before it learns it was deposed, and those renewals
//     are not the new leader's (see etcdstore's trust.go). Every check
//     holds.
//   - leader_paused_stall: contenders with a TTL of 6s (leases of 7s),
//     the leader stopped for 4s: long enough that the keepalive streams
//     stall (2s) and the Store opens new ones whose keepalives may queue
//     up at the stopped leader, which may answer them from its own lessor
//     when it resumes; short enough that no lease expires by the old
//     leader's clock (the pause starts once the leader has renewed every
//     lease within the last second, and ends at 4s however slow the lock
//     is to go on: a pause that overran to 8.6s, past the 7s leases,
//     failed this row twice with etcdStaleRevoke). It is the case
//     etcdstore's trust gate is for, but it has not failed with the gate
//     disabled either (6 loaded runs on 2026-12-02): it shows the gate
//     costs no liveness, not that it is needed. Every check is strict.
//   - leader_paused_stall_fair: leader_paused_stall with the contenders'
//     Stores in fair mode. The stall hits fair transactions (a place
//     taken, a release that hands over) whose answers may be lost and
//     which the stopped leader may apply late: their claim values and
//     places are orphans that the Stores' verification must clear, or
//     the queue would wait for a place nobody holds. Every check is
//     strict, and after each fault a release must hand the lock over
//     within a few acquisitions (fairWitness). The release during the
//     pause may rightly not: a holder that cannot read the queue in time
//     releases plainly. A CI run on 2026-12-03 failed the witness's old
//     check, which looked only up to the first acquisition after each
//     fault.
//   - leader_paused_long: stopped for twice the TTL, longer than its
//     leases; when it resumes, etcd itself revokes live leases (see
//     etcdStaleRevoke). Two holders at once are reported, not failures;
//     fencing, tokens and liveness are checked as in every row, liveness
//     counted from the resume if no write was accepted before it: a claim
//     revoked there is waited out like a deleted one (measured from the
//     election, a run on 2026-12-03 failed at 6.8s against the 5.27s
//     bound after a stale revoke of the new holder's lease; the pause
//     lasts 4s).
func TestSafetyEtcdLeaderPause(t *testing.T) {
	cl := testenv.StartEtcdCluster(t, testenv.EtcdNoFsync(), testenv.EtcdArgs("--heartbeat-interval=50", "--election-timeout=500"))
	logMembersOnFailure(t, cl)
	be := clusterEnv(t, cl)
	t.Run("leader_paused", func(t *testing.T) {
		runClusterScenario(t, be, scenario{fault: faultLeaderPause}, func(h *harness) { leaderPause(h, cl, 0) })
	})
	t.Run("leader_paused_stall", func(t *testing.T) {
		be := balancedEnv(t, cl.Addrs(), 3*ttl)
		runClusterScenario(t, be, scenario{fault: faultLeaderStall}, func(h *harness) { leaderPause(h, cl, 2*ttl) })
	})
	t.Run("leader_paused_stall_fair", func(t *testing.T) {
		be := balancedEnv(t, cl.Addrs(), 3*ttl)
		w := &fairWitness{cl: cl}
		runClusterScenario(t, be, scenario{fault: faultLeaderStallFair, fair: true}, w.round(func(h *harness) fired { return leaderPause(h, cl, 2*ttl) }))
		w.require(t)
	})
	t.Run("leader_paused_long", func(t *testing.T) {
		sc := scenario{fault: faultLeaderPauseLong, storeOverlap: etcdStaleRevoke}
		runClusterScenario(t, be, sc, func(h *harness) { leaderPause(h, cl, 2*h.be.ttl) })
	})
}

// logMembersOnFailure logs, if t fails, the keys under the lock prefix
// with their leases' remaining TTL, and the members' log lines about
// leadership and leases: who led when, and which leases were revoked.
func logMembersOnFailure(t *testing.T, cl *testenv.EtcdCluster) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logLockKeys(t, cl)
		for i, m := range cl.Members {
			for _, line := range strings.Split(m.Log(), "\n") {
				l := strings.ToLower(line)
				if strings.Contains(l, "/health") {
					continue
				}
				if strings.Contains(l, "leader") || strings.Contains(l, "lease") {
					t.Logf("member%d: %s", i, line)
				}
			}
		}
	})
}

// logLockKeys logs every key under etcdstore's prefix, its mod revision
// and its lease's remaining TTL, as the cluster answers now.
func logLockKeys(t *testing.T, cl *testenv.EtcdCluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: cl.Endpoints()})
	if err != nil {
		t.Logf("keys: %v", err)
		return
	}
	defer client.Close()
	resp, err := client.Get(ctx, etcdstore.DefaultPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Logf("keys: %v", err)
		return
	}
	logLockHistory(ctx, t, client, resp.Header.Revision)
	for _, kv := range resp.Kvs {
		ttl := int64(-2)
		if kv.Lease != 0 {
			if r, err := client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
				ttl = r.TTL
			}
		}
		t.Logf("key %s mod %d lease %x ttl %ds: %s", kv.Key, kv.ModRevision, kv.Lease, ttl, kv.Value)
	}
}

// logLockHistory logs every change under etcdstore's prefix up to
// revision upTo, as a watch from the first revision replays them: which
// transaction put or deleted each claim, on which lease (a release deletes
// the claim and puts the release marker in one revision; a lease's expiry
// or revocation deletes its keys alone).
func logLockHistory(ctx context.Context, t *testing.T, client *clientv3.Client, upTo int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range client.Watch(wctx, etcdstore.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			t.Logf("history: %v", err)
			return
		}
		for _, ev := range wr.Events {
			t.Logf("rev %d %s %s lease %x: %s", ev.Kv.ModRevision, ev.Type, ev.Kv.Key, ev.Kv.Lease, ev.Kv.Value)
			if ev.Kv.ModRevision >= upTo {
				return
			}
		}
	}
}

// clusterEnv is the etcd backend on cl. Contenders reach it through one
// TCP balancer (as through a Kubernetes Service in front of the members):
// each connection goes to a member that accepts it, so a client whose
// member died reconnects to another. (The contenders' store takes one
// endpoint.)
func clusterEnv(t *testing.T, cl *testenv.EtcdCluster) *backendEnv {
	return balancedEnv(t, cl.Addrs(), ttl)
}

// balancedEnv is the etcd backend reached through one balancer over addrs,
// for contenders with claims of TTL ttl.
func balancedEnv(t *testing.T, addrs []string, ttl time.Duration) *backendEnv {
	lb := newBalancer(t, addrs)
	return &backendEnv{name: "etcd", ttl: ttl, claimLife: etcdClaimLife(ttl),
		newLink: func(t *testing.T) link {
			return link{target: "http://" + lb.addr(), cut: func() {}, restore: func() {}, cutOne: func() {}, delay: func(time.Duration) {}}
		},
		restart: func(t *testing.T, down time.Duration) { t.Fatal("not used") },
	}
}

// runClusterScenario is runScenario with the fault step inject instead of
// the harness's own: warm up, inject each round, stop, check. sc names the
// fault (and may tolerate overlaps); rounds and the lock name are set here.
func runClusterScenario(t *testing.T, be *backendEnv, sc scenario, inject func(h *harness)) {
	if sc.rounds == 0 {
		sc.rounds = rounds()
	}
	sc.lock = "safety-" + be.name + "-" + strings.NewReplacer(" ", "-", ":", "").Replace(strings.ToLower(sc.fault))
	h := newHarness(t, be, sc)
	start := time.Now()
	for range K {
		h.spawn()
	}
	h.reg.await("two acquisitions", 60*time.Second, func(s *snapshot) bool {
		n := 0
		for _, e := range s.events {
			if e.Kind == "acquired" {
				n++
			}
		}
		return n >= 2
	})
	h.working(3, 60*time.Second)
	for range sc.rounds {
		inject(h)
		h.res.faults++
	}
	h.stopAll()
	ops, evs := h.reg.history()
	h.res.elapsed = time.Since(start)
	checkHistory(h.rep, h.be, h.sc, ops, evs, h.res)
	recordResult(h.res)
}

// leaderKill kills the raft leader right after one of the holder's
// accepted writes, waits for the other two members to elect a leader, and
// waits for the lock to go on: the holder's (or, if it stepped down, a
// successor's) next accepted writes, then a change of hands. The killed
// member is started again with its data. It returns what the trap hit.
func leaderKill(h *harness, cl *testenv.EtcdCluster) fired {
	h.t.Helper()
	lead := cl.WaitLeader(30 * time.Second)
	var killedAt time.Duration
	f := h.waitFired(h.arm(false, 3+h.rng.IntN(5), func(string) {
		cl.Members[lead].Kill()
		killedAt = h.reg.now()
	}), "leader kill")
	next := cl.WaitLeader(30*time.Second, lead)
	elected := h.reg.now()
	h.t.Logf("%s held token %d; leader %d killed; member %d elected %v later", f.c, f.tok, lead, next, elected-killedAt)
	// Work goes on: writes accepted after the election, by any holder.
	at := h.writeAfter("election", elected)
	h.takeover(fmt.Sprintf("leader killed under token %d", f.tok), at-killedAt)
	// The lock changes hands afterwards (tenures end on their own): a
	// release across the new leader.
	if _, ok := h.acquiredAfter(f.tok, 60*time.Second); !ok {
		h.t.Fatalf("no acquisition after token %d", f.tok)
	}
	h.writesAbove(f.tok, 3, 30*time.Second)
	cl.Members[lead].Start()
	return f
}

// leaderPause stops the raft leader (SIGSTOP) right after one of the
// holder's accepted writes, for hold, or until the other two members have
// elected a leader if that is later: clients on it hang, and the lock must
// go on through the new leader; then it resumes (and rejoins as a
// follower). A pause meant to be shorter than the leases (hold below the
// backend's claimLife) starts only once the leader has renewed every lease
// within the last second (awaitFreshLeases), so that none expires by the
// stopped leader's clock: that case is the long row's (etcdStaleRevoke).
func leaderPause(h *harness, cl *testenv.EtcdCluster, hold time.Duration) fired {
	h.t.Helper()
	lead := cl.WaitLeader(30 * time.Second)
	if hold < h.be.claimLife {
		awaitFreshLeases(h, cl)
	}
	return disturbMember(h, lead, "leader pause", hold, func() { cl.Members[lead].Pause() }, func() { cl.Members[lead].Resume() },
		func() int { return cl.WaitLeader(30*time.Second, lead) })
}

// awaitFreshLeases waits until the raft leader has renewed, within the
// last second by its own clock, every lease of h's contenders (the leases
// of TTL claimLife) that it still keeps: a lease left to expire (its
// Store gave it up) is waited out. The leader answers LeaseTimeToLive from
// its own lessor, in whole seconds rounded down. There is no event to
// await: it polls.
func awaitFreshLeases(h *harness, cl *testenv.EtcdCluster) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	defer cancel()
	client, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: cl.Endpoints()})
	if err != nil {
		h.t.Fatal(err)
	}
	defer client.Close()
	life := int64(h.be.claimLife / time.Second)
	start := time.Now()
	var first []string
	for {
		stale, err := staleLeases(ctx, client, life)
		if err == nil && len(stale) == 0 {
			if first != nil {
				h.t.Logf("waited %v for the leader to renew leases %v", time.Since(start).Round(time.Millisecond), first)
			}
			return
		}
		if first == nil {
			first = stale
		}
		if ctx.Err() != nil {
			h.t.Fatalf("leases not renewed by the leader within the last second for 30s: %v (%v)", stale, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// staleLeases returns the leases of TTL life (seconds) that the raft
// leader last renewed more than a second ago, with their remaining TTL.
func staleLeases(ctx context.Context, client *clientv3.Client, life int64) ([]string, error) {
	ls, err := client.Leases(ctx)
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, l := range ls.Leases {
		r, err := client.TimeToLive(ctx, l.ID)
		if err != nil {
			return nil, err
		}
		if r.GrantedTTL == life && r.TTL >= 0 && r.TTL < life-1 {
			stale = append(stale, fmt.Sprintf("%x: %ds left", int64(l.ID), r.TTL))
		}
	}
	return stale, nil
}

// leaderCut cuts the raft leader off from the clients (its proxy stops
// forwarding; the members still reach each other) right after one of the
// holder's accepted writes, for twice the TTL: clients on it see their
// calls hang and must reconnect through the balancer to another member.
// The leader stays leader; the lock must go on through the others.
func leaderCut(h *harness, cl *testenv.EtcdCluster, proxies []*faultproxy.Proxy) {
	h.t.Helper()
	lead := cl.WaitLeader(30 * time.Second)
	disturbMember(h, lead, "leader cut", 2*h.be.ttl, proxies[lead].Cut, proxies[lead].Restore, func() int { return lead })
}

// disturbMember applies start to member m after one of the holder's
// accepted writes, waits for leader() and for writes accepted after that
// by any holder (the liveness bound applies from leader()'s return), and
// ends the disturbance with stop exactly hold after it began, or at
// leader()'s return if that is later; then it waits for the lock to change
// hands with larger tokens. The disturbance never outlasts hold because
// the lock was slow to go on: a leader paused for longer than the leases
// is another row (leader_paused_long). It returns what the trap hit.
func disturbMember(h *harness, m int, what string, hold time.Duration, start, stop func(), leader func() int) fired {
	h.t.Helper()
	var (
		at0   time.Duration
		once  sync.Once
		ended time.Duration
		timer *time.Timer
		done  = make(chan struct{})
	)
	end := func() {
		once.Do(func() {
			stop()
			ended = h.reg.now()
			close(done)
		})
	}
	f := h.waitFired(h.arm(false, 3+h.rng.IntN(5), func(string) {
		start()
		at0 = h.reg.now()
		if hold > 0 {
			timer = time.AfterFunc(hold, end)
		}
	}), what)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		end()
		h.t.Logf("%s of member %d ended after %v", what, m, ended-at0)
	}()
	next := leader()
	ready := h.reg.now()
	if ready-at0 >= hold {
		end()
	}
	h.t.Logf("%s held token %d; %s of member %d; leader %d %v later", f.c, f.tok, what, m, next, ready-at0)
	at := h.writeAfter(what, ready)
	<-done // at hold, unless it ended at leader()'s return
	// Measured from the election: a lease's clock restarts with it. Where
	// etcd may revoke live leases at the resume (etcdStaleRevoke), the
	// claim of whoever held the lock then may vanish, and the lock goes on
	// as after a revocation (see revokeHeld): measured from the resume, if
	// no write was accepted before it.
	from := ready
	if h.sc.storeOverlap == etcdStaleRevoke && at > ended {
		from = max(ready, ended)
	}
	h.takeover(fmt.Sprintf("%s under token %d", what, f.tok), at-from)
	if _, ok := h.acquiredAfter(f.tok, 60*time.Second); !ok {
		h.t.Fatalf("no acquisition after token %d", f.tok)
	}
	h.writesAbove(f.tok, 3, 30*time.Second)
	return f
}

// deleteClaimKey deletes the lock's claim key (as `etcdctl del` would)
// right after one of the holder's accepted writes. The holder must learn
// it and stop; a standby takes over, within the bound, and its writes are
// accepted; the deleted holder's late writes, if any, are refused.
func deleteClaimKey(h *harness, cl *testenv.EtcdCluster) {
	h.t.Helper()
	client, err := etcdstore.Open(h.t.Context(), etcdstore.Config{Endpoints: cl.Endpoints()})
	if err != nil {
		h.t.Fatal(err)
	}
	defer client.Close()
	key := etcdstore.DefaultPrefix + h.sc.lock
	var delErr error
	var deleted int64
	f := h.waitFired(h.arm(false, 3+h.rng.IntN(5), func(string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := client.Delete(ctx, key)
		if err == nil {
			deleted = r.Deleted
		}
		delErr = err
	}), "claim key deletion")
	if delErr != nil || deleted != 1 {
		h.t.Fatalf("deleting %q: %v (%d deleted)", key, delErr, deleted)
	}
	ev, _ := h.acquiredAfter(f.tok, h.be.bound()+30*time.Second)
	h.t.Logf("%s held token %d; its claim key deleted; %s acquired token %d %v later", f.c, f.tok, ev.C, ev.Tok, ev.At-f.at)
	h.takeover(fmt.Sprintf("claim key of %s deleted under token %d", f.c, f.tok), ev.At-f.at)
	h.writesAbove(f.tok, 3, 30*time.Second)
}

// balancer forwards each TCP connection to the first of its targets (in
// turn) that accepts one.
type balancer struct {
	ln      net.Listener
	targets []string
	mu      sync.Mutex
	next    int
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newBalancer(t *testing.T, targets []string) *balancer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{ln: ln, targets: targets, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go b.forward(c)
	}
}

// track adds c to the open connections, or reports false once closed.
func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) forward(c net.Conn) {
	defer b.wg.Done()
	if !b.track(c) {
		c.Close()
		return
	}
	var up net.Conn
	b.mu.Lock()
	first := b.next
	b.next++
	b.mu.Unlock()
	for i := range b.targets {
		u, err := net.DialTimeout("tcp", b.targets[(first+i)%len(b.targets)], 500*time.Millisecond)
		if err == nil {
			up = u
			break
		}
	}
	if up == nil || !b.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	b.mu.Lock()
	if b.conns != nil {
		delete(b.conns, c)
		delete(b.conns, up)
	}
	b.mu.Unlock()
}

func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}
