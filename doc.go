// Package baton gives the replicas of a service exclusive work: a
// distributed mutex with fencing tokens and leader election, over the
// coordination store a team already runs.
//
// # Using it
//
// A Mutex locks a name on a Backend: package filestore for processes on one
// machine, package memstore for one process, and, each in its own module so
// that its dependencies stay out of the others' builds, kubestore (Kubernetes
// Lease, ConfigMap and the DistributedLock resource), etcdstore (etcd)
// and redisstore (one Redis server, or Redlock over several). Every
// backend implements the same seam and passes the same conformance suite
// (batontest):
//
//	mu, err := baton.NewMutex(store, "nightly-report")
//	lease, err := mu.Lock(ctx)
//	defer lease.Unlock(context.Background())
//	err = writeReport(lease.Context(), lease.Token())
//
// An Elector runs work on one replica at a time and keeps the others as
// standbys that take over when the leader releases, crashes or is cut off:
//
//	el, err := baton.NewElector(store, "scheduler")
//	err = el.Run(ctx, func(ctx context.Context, term *baton.Lease) error {
//		return scheduler.Run(ctx, term.Token())
//	})
//
// A Semaphore lets up to n holders work at once; each holds one of n slot
// locks, with a Mutex's guarantees and tokens per slot:
//
//	sem, err := baton.NewSemaphore(store, "exporters", 3)
//	lease, err := sem.Acquire(ctx) // lease.Name() is the slot
//
// Stores implement the seam in package backend.
//
// # A lock per entity
//
// A lock name is a DNS subdomain (see ValidateName), which keys taken from
// data rarely are. To lock per order, tenant, file or URL, name the lock
// NameFor(key), with a prefix for the kind of entity:
//
//	mu, err := baton.NewMutex(store, "orders."+baton.NameFor(orderID))
//
// Each name leaves a record in the store after its release (an object, a
// few keys or files: docs/backends.md, "A lock per entity"). Delete the
// record of a name that is done with backend.Remover, which every store
// baton ships implements; tokens of a name locked again still grow.
//
// # Guarantees
//
//   - At most one valid holder per lock, as judged by the store's atomic
//     operation (a conditional write, a transaction, a script).
//   - The holder stops before anyone else can start: a Lease's context ends
//     no later than its validity end, which is measured on this process's
//     monotonic clock from the send time of its last successful acquire or
//     renew (see Lease for the clock model). No timestamp written by one
//     machine is ever compared with another machine's clock.
//   - Fencing tokens strictly increase per lock, across holders and client
//     restarts, as long as the store keeps its data.
//   - Only the holder can renew or release (identity plus a per-acquisition
//     nonce, compared atomically).
//   - Losing a lock is always observable: the context ends with a cause, the
//     Observer gets EventLost, and a log line is written.
//   - Every goroutine baton starts ends with its owner (Unlock, Run's
//     context).
//
// A lease cannot stop a process that is paused (stopped, swapped, in a long
// garbage collection) from writing after its lease ended. Only the protected
// resource can reject such a late write, by checking the fencing token:
// pass Lease.Token with every write and reject tokens smaller than the
// largest seen (package fence has helpers, for SQL databases among others).
//
// # Timing
//
// Defaults follow client-go's leader election: TTL 15s, RenewDeadline 10s,
// RetryPeriod 2s; the holder renews every TTL/3; the safety margin is
// max(2% of TTL, 50ms). Impossible combinations are rejected at
// construction with an error that names both values.
//
// The timings must also suit the store's round trip, which no option can
// know: choose a TTL of at least 10 round trips to the store (acquires and,
// except on etcd, renewals are each one or two), and let the renew deadline
// and retry period scale with it. With a round trip longer than the retry
// period every renew is reported unanswered and one late answer ends the
// lease; baton then names the round trip it measured and the TTL that
// would work (in a warning, a step-down's cause or a refused late grant).
// docs/backends.md has measurements; baton doctor measures a store.
//
// # Implementing a backend
//
// A Backend performs atomic operations on one record per key; the engine in
// this package owns every timer, retry, log line and metric. Package
// batontest is the conformance suite every backend must pass.
package baton
