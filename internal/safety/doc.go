// Package safety holds baton's fault-injection suite (its tests only).
//
// K=3 contender processes (the test binary re-executed with
// BATON_SAFETY_ROLE=contender) lock one name on a real store (file, Redis,
// Redlock over three redis-servers, etcd, and the Kubernetes Lease,
// ConfigMap and DistributedLock backends on an envtest API server) and, while
// they believe they hold it, do read-modify-write increments on a fenced
// register and on an unfenced counter that the test serves over HTTP. The
// test pauses (SIGSTOP past the TTL), kills (SIGKILL) or partitions
// (internal/faultproxy) the holder at a point chosen by a trap in the
// register, restarts the store (the API server for the Kubernetes
// backends), drifts the contenders' clocks or steps their wall clocks by an
// hour, slows their links or throttles the Kubernetes API with 429s. A checker then reads the
// recorded history: no stale write accepted, tokens strictly increasing in
// real-time order and never granted twice, never two holders as the
// registers see them (no interleaved tenures, no lost increment, paused
// holders' refused late writes aside), a linearizable register history
// (porcupine), a standby that takes over within the store's claim lifetime
// plus the retry period (and a slack) but not before the holder's claim
// can have ended, no holder that sees its lease live past its ValidUntil
// and no acquisition while an unstopped holder is within it (compared on
// CLOCK_MONOTONIC, which the contender processes share), and a reason for
// every tenure's end (a step-down or a loss only under a fault). The
// faults also include deleting the lock's object while it is held, or
// every key of the lock, revoking the etcd lease of the holder's claim,
// taking the holder's permissions away (its Redis ACL user's, its etcd
// user's role, or its Kubernetes user's RoleBinding) while the other
// contenders keep theirs, failing a Sentinel topology over by hand
// while the sentinel the holder listens to is dead, and rotating the CA
// of a Redis server or an etcd member over TLS (carotate_test.go: the
// contenders' CA bundle gains the new CA, the server is reissued a
// certificate by it, every connection is cut, the old CA leaves the
// bundle and every connection is cut again), after which each contender
// must have reached the store again. In the PostgreSQL
// rows (pgfence_test.go) the fenced register lives in a real PostgreSQL,
// which decides each fenced read and write through fence.SQLGuard.Exec:
// a paused holder's late write must be refused there, and a write whose
// session ends while its COMMIT is in flight (pg_terminate_backend, a
// fast shutdown) must be recorded as the write log shows it, committed
// or not.
// mutants.sh (make mutants) plants known bugs in copies of the tree and
// requires the suite to fail on each.
// TestNaiveConfigMapLock runs the same harness against a ConfigMap lock
// written the way older guides suggest and asserts that it fails.
// TestScheduleNetworkStores is not a fault row: it runs package schedule
// end to end on Redis, Redlock, etcd and the Kubernetes backends (three
// replicas with skewed clocks: each slot once, tokens growing across the
// removal of a slot's lock, no lock left behind).
// TestScheduleWallClockSteps is its fault row: the wall clock of one of
// the replicas steps back and forward by 2 to 6 s, at random moments, just
// as a slot comes and in the middle of its running job (on the file
// backend, Redis, etcd and the Lease backend): each slot still runs once,
// no attempt fails, no replica attempts a slot twice, and the stepping
// replica leaves out only the older slots of a full catch-up batch.
//
// The package is its own module. Run the short mode (every backend, two
// rounds per fault; about 22 minutes on two cores, past go test's
// default timeout) from the repository's root with
//
//	go -C internal/safety test -race -timeout 45m .
//
// and the long mode (eight rounds, more faults; about 46 minutes) with
// -safety.long or BATON_SAFETY_LONG=1 and -timeout 150m. The seed is
// logged; -safety.seed=N replays a schedule. BATON_SAFETY_REPORT=path (or
// -safety.report) writes the Markdown report; BATON_SAFETY_TRACE=1 logs
// every contender request.
// docs/safety.md describes the scenarios and shows a measured table.
package safety
