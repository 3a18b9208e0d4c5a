// Package kube is a baton backend that keeps locks in Kubernetes objects,
// so that a workload on Kubernetes needs no other coordination store. The
// default kind is the Lease (coordination.k8s.io/v1):
//
//	store, err := kube.NewLeaseForConfig(cfg, "my-namespace", kube.WithApplication("billing"))
//	m, err := baton.NewMutex(store, "nightly-report")
//
// LeaseStore implements baton.Backend, baton.Watcher, baton.Lister and
// baton.ForceReleaser. ConfigMapStore keeps the same record in a ConfigMap's
// annotations, for clusters whose policies allow only ConfigMaps.
// DistributedLockStore uses baton's own resource (baton.dev/v1alpha1
// DistributedLock, installed from deploy/crd) for what a Lease cannot hold:
// a counting semaphore of up to spec.capacity holders, each with its own
// fencing token and expiry (see package kube/api/v1alpha1 for the type and
// the plan for FIFO waiting and read/write locks). EventObserver records
// leadership changes as Kubernetes Events.
//
// # Guarantees
//
// Every state change is one conditional write: a Create that fails if the
// object exists, or an Update that carries the resourceVersion read just
// before, which the API server (and etcd below it) applies only if the
// object has not changed since. Nothing is ever read, judged and written
// without that condition. A lost race (409 Conflict) is retried
// transparently: the store reads the object again and decides again, up to
// WithMaxConflicts times within the caller's context.
//
// Only the owner of a claim (holder identity plus the per-acquisition
// nonce, compared on the object inside the same conditional write) can
// renew or release it. Fencing tokens start at 1 and grow by one with each
// acquisition; release clears the holder but never deletes the object, so
// the token survives releases, expiries and restarts of every client, and
// goes backwards only if someone deletes the object (or restores etcd from
// an older backup).
//
// # Clock model: expiry by local observation
//
// The API server does not expire Leases; someone has to decide that a
// holder is gone. Comparing the holder's renewTime with the local wall
// clock would compare two machines' clocks, which can be seconds (or
// hours) apart. baton never does that (DESIGN invariant 2), and neither
// does client-go's leader election. Instead each store remembers, per lock
// object, the last resourceVersion it saw and the time it first saw it, on
// this process's monotonic clock. A claim held by someone else counts as
// expired only once this process has seen the object unchanged for its
// leaseDurationSeconds. Any write to the object, a renewal or anything
// else, restarts the count. HeldError.RetryAfter and Record.Remaining are
// the rest of that observation window.
//
// Consequences worth knowing:
//
//   - A process that sees a held Lease for the first time (it just
//     started, or never looked at that lock before) waits the full lease
//     duration from that moment before taking over, even if the holder
//     died long ago and renewTime is an hour old. A new replica never
//     steals a live lock; a dead holder is replaced at most one TTL (plus
//     one poll) after a standby starts watching.
//   - The holder's own store counts its claim from the send time of its
//     last successful write, which is no later than the time any other
//     process can first see that version; so it considers the claim
//     expired (Renew and Release return baton.ErrLost) no later than any
//     contender does. baton's engine stops the holder earlier still, at
//     send time + TTL - margin.
//   - Only clock *rate* matters, never offsets. The engine's margin
//     (default max(2% of TTL, 50ms)) covers rate differences.
//   - renewTime and acquireTime are written for people (kubectl get
//     leases, baton status). They are never read for a decision.
//
// # Object format
//
// A lock named NAME is the Lease NAME in the store's namespace (lock names
// are DNS subdomains, like object names). kubectl sees the real holder:
//
//	spec.holderIdentity        the holder's identity; unset when released
//	spec.leaseDurationSeconds  the TTL rounded up to whole seconds
//	spec.acquireTime           wall clock of the holder at its acquire
//	spec.renewTime             wall clock of the holder at its last renew
//	spec.leaseTransitions      acquisitions since the object was created
//	                           (the first holder has 0)
//	metadata.annotations:
//	  baton.dev/token          last fencing token, decimal uint64 ("42")
//	  baton.dev/nonce          the holder's nonce; absent when released
//	metadata.labels:
//	  baton.dev/app            the owning application (WithApplication)
//
// TTLs shorter than one second are rejected (baton.ErrInvalidOptions):
// leaseDurationSeconds cannot hold them. A TTL that is not a whole number
// of seconds is rounded up on the object; the holder's engine still
// measures its validity with the TTL it asked for, which is shorter.
//
// A Lease without the baton.dev/token annotation was created by another
// tool (for example client-go leader election); a Lease whose
// baton.dev/app label differs from the store's application belongs to
// another application. TryAcquire never takes either over: it returns an
// *ApplicationError naming both applications (see WithApplication). A
// token annotation that is not a decimal number makes every operation on
// that lock fail with baton.ErrCorruptRecord; it is never overwritten.
//
// # Watching
//
// Watch opens a watch on the single object (field selector
// metadata.name=NAME), so a standby wakes within one round trip of a
// release instead of polling. The Lease and ConfigMap stores wake a
// waiter only when the holder changes; a renewal only updates the
// store's view of the object (and restarts the local expiry count), and a
// refused attempt is answered from that view without a request. So an
// idle standby sends nothing but its watch while the leader renews.
// Every write that follows a view is conditional on its resourceVersion:
// a stale view costs a conflict, never exclusion. Notifications are
// coalesced, all watches of one name in a process share one API watch, it
// is re-established when the server ends it, and its goroutine ends with
// the last watcher's context.
//
// # Rate limiting
//
// client-go limits requests per client (QPS, Burst). If lock traffic
// shares a client with the application and the application spends the
// budget, renewals queue behind it and the holder steps down. Give the
// store its own client: NewLeaseForConfig copies the *rest.Config and
// gives the copy its own token-bucket limiter (WithRateLimit, default 20
// QPS, burst 40). If you build the clientset yourself for NewLease, build
// it from rest.CopyConfig with its own QPS and Burst.
//
// # RBAC
//
// Processes taking locks need, in the store's namespace:
//
//	rules:
//	- apiGroups: ["coordination.k8s.io"]
//	  resources: ["leases"]
//	  verbs: ["get", "watch", "create", "update"]
//
// (deploy/rbac/rbac.yaml ships it with a ServiceAccount and RoleBinding). No
// delete: baton never deletes lock objects. List (baton status) also
// needs "list". A denied request returns an error matching
// baton.ErrForbidden that names the namespace, the resource, the verb and
// the rule above; the engine does not retry it. A missing namespace
// returns an error matching ErrNamespaceNotFound that says so.
package kube
