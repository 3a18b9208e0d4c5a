//go:build linux

package safety

import (
	"strings"
	"testing"
	"time"
)

// rounds is how many times each scenario injects its fault.
func rounds() int {
	if long() {
		return 8
	}
	return 2
}

// revokeRounds is how many times the lease-revoked rows revoke a holder's
// lease: a round is quick (the successor acquires at once), so one more.
func revokeRounds() int { return rounds() + 1 }

// slowRounds is how many times a row whose every round waits out a long
// outage injects its fault: the late-grant rows (each round waits for a
// refused grant and then for the lock to work again) and etcd's
// quorum-lost rows (each round keeps the quorum down for about 20 s):
// one in the short mode, and half the long mode's rounds there.
func slowRounds() int {
	if long() {
		return rounds() / 2
	}
	return 1
}

// runScenario runs one fault scenario on be as a subtest.
func runScenario(t *testing.T, be *backendEnv, sc scenario) {
	t.Helper()
	if sc.rounds == 0 {
		sc.rounds = rounds()
	}
	name := strings.NewReplacer(" + ", "_and_", " ", "_").Replace(sc.fault)
	sc.lock = "safety-" + strings.ToLower(strings.ReplaceAll(name, "_", "-"))
	if sc.fair { // apart from the plain row's, which may have left a claim to expire
		sc.lock += "-fair"
	}
	if sc.churn {
		sc.lock += "-churn"
	}
	if sc.remove {
		sc.lock += "-remove"
	}
	if sc.cut > 0 {
		sc.lock += "-cut"
	}
	if sc.annotate {
		sc.lock += "-annotated"
	}
	if sc.timens {
		sc.lock += "-timens"
	}
	t.Run(name, func(t *testing.T) {
		newHarness(t, be, sc).run()
	})
}

// common runs the scenarios every backend supports, and the long mode's
// extras; partition-like faults need a network store.
func common(t *testing.T, be *backendEnv, network bool) {
	commonAs(t, be, scenario{}, network)
}

// commonAs is common with every row in the set-up base describes (its
// variant and, on etcd, its mode).
func commonAs(t *testing.T, be *backendEnv, base scenario, network bool) {
	run := func(sc scenario) {
		sc.variant, sc.fair = base.variant, base.fair
		runScenario(t, be, sc)
	}
	run(scenario{fault: faultStop})
	run(scenario{fault: faultKill})
	if network {
		run(scenario{fault: faultPartition})
		run(scenario{fault: faultLostReply})
		// go-redis's own timeouts: the suite's short ones would hide
		// how long a dead connection holds a renewal.
		run(scenario{fault: faultDropped, clientDefaults: true})
	}
	run(scenario{fault: faultDrift, rates: driftRates})
	run(scenario{fault: faultJump})
	run(scenario{fault: faultDelete})
	run(scenario{fault: faultLateGrant, rounds: slowRounds()})
	if long() {
		run(scenario{fault: faultStopAny})
		if network {
			run(scenario{fault: faultLatency})
		}
	}
}

// TestSafety runs every backend under every fault it supports: a paused
// holder (SIGSTOP past the TTL) whose late write must be refused, a killed
// holder, a holder partitioned from the store, a store restart, clock rate
// drift, latency and API throttling. See the package documentation.
func TestSafety(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		be := fileEnv(t)
		common(t, be, false)
		// A Store forgets the claims it saw once their records show them
		// ended (filestore's seen.go); a claim whose record was deleted
		// must stay remembered while those prunes run.
		runScenario(t, be, scenario{variant: "Stores pruning the claims they saw", churn: true, fault: faultDelete, rounds: 2 * rounds()})
		// Removal deletes the lock file too, under its flock, which a
		// contender may have opened before and be waiting on.
		removing(t, be, false)
		// Containers on one host sharing the directory, one of them
		// restored by CRIU: every other contender's clocks read far ahead.
		runScenario(t, be, scenario{fault: faultKill, variant: "every other contender in a time namespace 100000 s ahead", timens: true})
	})
	t.Run("redis", func(t *testing.T) {
		be := redisEnv(t)
		common(t, be, true)
		runScenario(t, be, scenario{fault: faultRestart})
		runScenario(t, be, scenario{fault: faultDeleteAll, storeOverlap: keysDeleted})
		// A server at its maxmemory with a volatile-* policy evicts claims
		// (they expire), not fences: no second holder.
		runScenario(t, be, scenario{fault: faultEvict, variant: "maxmemory-policy volatile-ttl"})
		// The server holds back every script past the TTL and expires no
		// key meanwhile; the claim has expired when it goes on.
		runScenario(t, be, scenario{fault: faultPause})
		// Releases hand the lock to the longest waiter: one may be stopped.
		// At least one round of each of stopWaiter's three resumes.
		runScenario(t, be, scenario{fault: faultStopWait, rounds: max(3, rounds())})
		if !long() { // common runs it in the long mode
			runScenario(t, be, scenario{fault: faultLatency, rounds: 1})
		}
		removing(t, be, false)
		cutting(t, be, time.Millisecond)
		// A server of its own: the row leaves the name on a new one.
		runScenario(t, redisMovedEnv(t), scenario{fault: faultMoved, storeOverlap: nameMoved})
		// A server of its own, a user per contender: one user's
		// permissions are taken away under its holder.
		runScenario(t, redisACLEnv(t), scenario{fault: faultForbidden, retryForbidden: true})
		// A server of its own over TLS: its CA rotated under the
		// contenders, each of which must reconnect under the new one.
		runScenario(t, redisCAEnv(t), scenario{fault: faultCARotated})
	})
	t.Run("etcd", func(t *testing.T) {
		be := etcdEnv(t)
		common(t, be, true) // plain mode (etcdstore.WithFair(false))
		// Fair mode, the default: a queue of waiters, the lock handed to
		// the oldest at each release.
		t.Run("fair_mode", func(t *testing.T) {
			fair := scenario{variant: "fair mode", fair: true}
			commonAs(t, be, fair, true)
			fair.fault = faultRestart
			runScenario(t, be, fair)
			fair.fault = faultRestore
			runScenario(t, be, fair)
			// Every key under the prefix: the waiters' places too.
			runScenario(t, be, scenario{variant: fair.variant, fair: true, fault: faultDeleteAll, storeOverlap: keysDeleted})
			// Contenders that pause between tenures often take the lock
			// free after it was contended: their Store then watches the
			// queue while it holds and hands over from that watch's view
			// (etcdstore's placeswatch.go), which a paused holder or a
			// deleted claim must not turn into a stale handover.
			idle := scenario{variant: "fair mode, idle between tenures", fair: true, idle: 20 * time.Millisecond}
			for _, f := range []string{faultStop, faultDelete} {
				idle.fault = f
				runScenario(t, be, idle)
			}
			// A Store forgets the claims it saw once etcd shows them
			// released (etcdstore's seenprune.go); a claim deleted by
			// hand must stay remembered while those prunes run.
			runScenario(t, be, scenario{variant: "fair mode, Stores pruning the claims they saw", fair: true, churn: true, fault: faultDelete, rounds: 2 * rounds()})
			removing(t, be, true)
		})
		runScenario(t, be, scenario{fault: faultRestart})
		runScenario(t, be, scenario{fault: faultRevoke, rounds: revokeRounds(), storeOverlap: etcdRevoked})
		runScenario(t, be, scenario{fault: faultRevokeFair, rounds: revokeRounds(), fair: true, storeOverlap: etcdRevoked})
		runScenario(t, be, scenario{fault: faultDeleteAll, storeOverlap: keysDeleted})
		runScenario(t, be, scenario{fault: faultRestore})
		// A member of its own with authentication on, a user per
		// contender: one user's role is revoked under its holder.
		// In fair mode the holder's place in the queue is under its
		// role's prefix too.
		acl := etcdACLEnv(t)
		runScenario(t, acl, scenario{fault: faultForbidden, retryForbidden: true})
		runScenario(t, acl, scenario{variant: "fair mode", fair: true, fault: faultForbidden, retryForbidden: true})
		// A member of its own over TLS: its CA rotated under the
		// contenders, each of which must reconnect under the new one.
		runScenario(t, etcdCAEnv(t), scenario{fault: faultCARotated})
	})
	t.Run("lease", func(t *testing.T) {
		be := leaseEnv(t, "lease")
		common(t, be, true)
		runScenario(t, be, scenario{fault: faultRestart})
		throttled(t, be)
		annotated(t, be)
		removing(t, be, false)
		cutting(t, be, 10*time.Millisecond)
		// With a TTL of 6s the holder renews every 2s: a contender that
		// took the cut 1s for the claim's acquires about 1s after the
		// edit, before that renewal, while the holder holds on
		// (cutDuration): two holders at once in every round.
		long := *be
		long.ttl, long.claimLife = 3*ttl, 3*ttl
		runScenario(t, &long, scenario{fault: faultCut})
		// A namespace of its own, a user per contender bound to the
		// shipped Role: one user's RoleBinding is deleted under its
		// holder.
		runScenario(t, kubeRBACEnv(t, "lease"), scenario{fault: faultForbidden, retryForbidden: true})
	})
	// ConfigMap and DistributedLock share the Lease backend's store code
	// (expiry by observation, conditional writes); the pause, the crash,
	// the clock step and throttling here, and everything in the long mode.
	t.Run("configmap", func(t *testing.T) {
		be := leaseEnv(t, "configmap")
		kubeObject(t, be)
		annotated(t, be)
		// A namespace of its own, a user per contender bound to the
		// shipped Role: one user's RoleBinding is deleted under its
		// holder.
		runScenario(t, kubeRBACEnv(t, "configmap"), scenario{fault: faultForbidden, retryForbidden: true})
	})
	t.Run("crd", func(t *testing.T) {
		be := crdEnv(t)
		kubeObject(t, be)
		// Its objects carry a finalizer while held.
		removing(t, be, false)
		cutting(t, be, 10*time.Millisecond)
		// A namespace of its own, a user per contender bound to the
		// shipped Role: one user's RoleBinding is deleted under its
		// holder.
		runScenario(t, kubeRBACEnv(t, "crd"), scenario{fault: faultForbidden, retryForbidden: true})
	})
	// The fenced register kept in PostgreSQL, which decides every fenced
	// operation through fence.SQLGuard (pgfence_test.go); the lock on the
	// file backend.
	t.Run("postgres_fence", func(t *testing.T) {
		be := pgFenceEnv(t)
		const fenced = "fenced by PostgreSQL through fence.SQLGuard"
		runScenario(t, be, scenario{fault: faultStop, variant: fenced})
		// Each of commitLost's three ways, at least once.
		runScenario(t, be, scenario{fault: faultCommitLost, variant: fenced, rounds: max(3, rounds())})
	})
	t.Run("redlock", func(t *testing.T) {
		be := redlockEnv(t)
		common(t, be, true)
		runScenario(t, be, scenario{fault: faultRestart})
		runScenario(t, be, scenario{fault: faultDeleteAll, storeOverlap: keysDeleted})
		runScenario(t, be, scenario{fault: faultMinority, rounds: 1})
		runScenario(t, be, scenario{fault: faultSilentOne, rounds: 2})
		runScenario(t, be, scenario{fault: faultPause})
	})
}

// removing runs the stop row with contenders that remove the lock's
// record after each tenure, as package schedule removes a slot's lock
// record once it is done (backend.Remover), and after each refused
// attempt (they all poll, as schedule's replicas try a slot's lock once):
// a removal must never delete a claim, the paused holder's included, nor
// let a token repeat.
func removing(t *testing.T, be *backendEnv, fair bool) {
	sc := scenario{variant: "record removed after each tenure", fault: faultStop, remove: true, idle: 20 * time.Millisecond, fair: fair}
	if fair {
		sc.variant = "fair mode, record removed after each tenure"
	}
	runScenario(t, be, sc)
}

// cutting runs the stop row with contenders that poll with TryLock, half
// of the calls under a deadline drawn from [0, cut), about the store's
// round trip, so
// that some acquires end while the store runs them: the store may have
// written the claim, and releases it as its owner (redisstore and
// kubestore; a claim left would keep everyone out until its TTL). That
// release must never free anyone else's claim, the paused holder's
// included, nor let a token repeat.
func cutting(t *testing.T, be *backendEnv, cut time.Duration) {
	runScenario(t, be, scenario{variant: "acquires cut short by their deadline", fault: faultStop, cut: cut, idle: 20 * time.Millisecond})
}

// annotated runs the SIGKILL row while another writer annotates the lock's
// object (see annotating).
func annotated(t *testing.T, be *backendEnv) {
	runScenario(t, be, scenario{fault: faultKill, variant: "object annotated every TTL/10 by another writer", annotate: true})
}

func kubeObject(t *testing.T, be *backendEnv) {
	// Every Kubernetes backend meets API throttling the same way.
	defer throttled(t, be)
	if long() {
		common(t, be, true)
		return
	}
	runScenario(t, be, scenario{fault: faultStop})
	runScenario(t, be, scenario{fault: faultKill})
	// They write the holder's wall clock into the object, like the Lease.
	runScenario(t, be, scenario{fault: faultJump})
	// Each has its own object to delete.
	runScenario(t, be, scenario{fault: faultDelete})
}

// throttled runs the HTTP 429 scenario on a Kubernetes backend: a fraction
// of its API requests are refused while the holder is killed.
func throttled(t *testing.T, be *backendEnv) {
	be.throttle(throttleFraction)
	defer be.throttle(0)
	runScenario(t, be, scenario{fault: faultThrottle})
}

// driftRates are the contenders' clock rates in the drift scenarios: one
// slow and one fast by 1%, inside the default safety margin (2% of the
// TTL, at least 50ms: 2.5% of a 2s TTL).
var driftRates = []float64{0.99, 1.0, 1.01}

// throttleFraction of the API requests are answered 429.
const throttleFraction = 0.1
