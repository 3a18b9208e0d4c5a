// Package kubestore is a baton backend that keeps locks in Kubernetes objects,
// so that a workload on Kubernetes needs no other coordination store. The
// default kind is the Lease (coordination.k8s.io/v1):
//
//	store, err := kubestore.NewLeaseForConfig(cfg, "my-namespace", kubestore.WithApplication("billing"))
//	m, err := baton.NewMutex(store, "nightly-report")
//
// LeaseStore implements backend.Backend, backend.Watcher, backend.Lister,
// backend.ForceReleaser and backend.Remover. ConfigMapStore keeps the same
// record in a ConfigMap's annotations, for clusters whose policies allow
// only ConfigMaps.
// DistributedLockStore uses baton's own resource (baton.dev/v1alpha1
// DistributedLock, installed from deploy/crd) for what a Lease cannot hold:
// a counting semaphore of up to spec.capacity holders, each with its own
// fencing token and expiry (see package kubestore/api/v1alpha1 for the type and
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
// renew or release it. Fencing tokens grow by one with each acquisition;
// release clears the holder but never deletes the object, so the token
// survives releases, expiries and restarts of every client. Only Remove
// deletes a lock object, and only a free one (see Removing lock objects).
// Tokens do not repeat or go backwards when the object is deleted either
// (see Fencing tokens); only restoring etcd from an older backup, or
// moving the locks to another cluster, can do that.
//
// An acquiring Create or Update whose caller's context ends before the
// answer comes may still have been applied: the API server finishes a
// request it received. TryAcquire then reads the object and, if it names
// the attempt's owner, releases it as that owner would (within 2 s of the
// context's end), so that a TryLock cut short by its deadline, or a Lock
// given up as its process shuts down, does not keep the lock from
// everyone, held by nobody, for its lease duration. It returns after that
// read and release, not the moment the context ends. A write that the API
// server applies only after that read (it was still queued there) is not
// released: that claim lasts its lease duration, as a crashed holder's.
//
// # Deleted lock objects
//
// baton deletes a lock object only through Remove, and only while it
// records no claim (see Removing lock objects). `baton release --force`
// (ForceRelease) is the sanctioned way to free a lock whose holder is
// stuck: it clears the holder and keeps the token counter. An operator
// may still run kubectl delete on a held object. A held object carries
// the finalizer FinalizerClaim, added by the acquiring write and removed
// by the release, so the deletion only marks it deleting
// (metadata.deletionTimestamp) and the claim stays on the server:
//
//   - The holder's next Renew sees the mark and returns an error matching
//     backend.ErrLost; it never renews a deleting object. Until then (at
//     most one renew interval) it may still act, which is what fencing
//     tokens are for. Its Release (its work has stopped) clears the claim
//     and lets the deletion finish at once.
//   - Every contender, including a process that started after the
//     deletion and never saw the object before, reads the deleting object
//     and judges its claim as any other: one lease duration from the
//     moment it first saw the claim (the deletion, which changes no claim,
//     does not restart the count).
//     TryAcquire returns a *backend.HeldError until then; after, it clears
//     the expired claim, which removes the finalizer so that the API
//     server completes the deletion, and creates the object anew. A
//     deleting object is never acquired.
//   - If every replica is gone while one held the lock, nobody clears the
//     claim: the object (and a namespace being deleted) stays Terminating
//     until ForceRelease (baton release --force NAME) removes the
//     finalizer, or someone removes it by hand.
//
// An object without the finalizer (written by an older baton, or whose
// finalizer someone removed by hand) goes at once. Then the holder's next
// Renew (and Release) finds it missing, or replaced by an object with
// another uid, and returns an error matching backend.ErrLost; it never
// creates the object again. A store that has seen the object (held, or
// free: a claim made after that look may have gone with it) and then finds
// it missing does not create it before that claim could have expired: the
// absence counts like a new version of the record first seen at that
// moment, on this process's monotonic clock, unless a watch's Deleted
// event, whose final state is free, proves it free. A process that never
// saw such an object cannot know of its claim, and may create the object
// at once; its token is still larger than the former holder's, so a fenced
// resource refuses the former holder's writes. Nor can one that saw
// it long ago: so that a process that touches many lock names (a loser
// of schedule's lock per slot) does not remember each for ever, a store
// forgets what it saw of a lock once that is more than twice the lease
// duration old, each time the names it remembers have doubled past 64.
//
// # Removing lock objects
//
// A lock object stays after its release, with its token counter. For lock
// names that are used once that adds up: package schedule locks each slot
// of a job under a name of its own, so an every-minute job would leave
// 525,600 objects a year in the cluster's etcd, until a ResourceQuota on
// their count stops the job. So the stores implement backend.Remover:
// schedule calls Remove once a slot is recorded done and its lock released
// (schedule.KeepSlotLocks keeps the objects instead).
//
// Remove reads the object and deletes it only if it records no claim: no
// holder and no FinalizerClaim. A claim that expired as judged here but
// was never released counts: expiry is each process's own judgement, and
// the next acquisition (or baton release --force) clears such a claim.
// Otherwise Remove returns an error matching backend.ErrHeld with the
// holder, its token and, as RetryAfter, the rest of the claim as judged
// from this process's observations. The delete carries the preconditions
// uid and resourceVersion of the version read: an acquisition between the
// read and the delete changes the resourceVersion, so the API server
// refuses the delete (409 Conflict), and Remove reads again and decides
// again (up to WithMaxConflicts times). A version with a claim is never
// deleted. An object that is being deleted already, without a claim, is
// left to that deletion (Remove returns nil; baton never acquires an
// object being deleted); an object of another application or tool is
// refused, as by TryAcquire.
//
// Tokens continue after a removal as after any deletion: the next object
// of the name starts at the resourceVersion of its creation, above every
// token issued on the removed one (see Fencing tokens), and a grant on the
// removed object gets backend.ErrLost from its Renew and Release. Remove
// keeps an object whose token is above its resourceVersion, which only a
// counter set by hand or an object copied from another cluster has: its
// successor could start below that token. The store that removed the
// object knows its final state was free and forgets what it saw of it, so
// it may create the object again at once, as may a process that never saw
// it. Another process that saw the object counts its absence by the rule
// above and may wait one lease duration before creating it (a watch's
// Deleted event, which carries the free final state, spares it the
// wait): a name that will be locked again soon should not be removed.
//
// Remove needs the verb "delete" on the lock objects (see RBAC), which no
// other operation uses.
//
// # Fencing tokens
//
// The token of an acquisition that updates an existing object is the
// object's last token plus one. The token of an acquisition that creates
// the object is the resourceVersion the API server gives the new object.
// Kubernetes 1.35 made resourceVersions comparable (KEP-5504): for one
// resource they are positive decimal integers, larger for later writes;
// every etcd-backed API server has always issued them so, as etcd
// revisions, one counter for the whole cluster. Every acquisition is a
// write, so each token is at most the resourceVersion of the write that
// issued it, and the object's creation comes after its deletion, which
// comes after every write of the object before it: the first token of a
// recreated object is larger than every token issued on the deleted one.
// baton reads resourceVersions as numbers only for this, and refuses (with
// backend.ErrCorruptRecord) an API server whose resourceVersions are not
// integers. Objects created before this scheme (tokens from 1) keep
// counting from their annotation; once deleted, their next object starts
// at the cluster's resourceVersion, which is larger than their tokens:
// each of those was issued by a write of the object, and the
// resourceVersion counts every write of the cluster. Only a counter set by
// hand (below) or an object copied from another cluster can be ahead of
// its resourceVersion; Remove refuses to delete such an object, kubectl
// delete does not check.
//
// The creator learns its token from the create's response; it cannot be
// in the create request. So a new object carries the annotation
// baton.dev/token=resourceVersion (TokenFromResourceVersion) until its
// creator's first renewal or release writes the number; readers meanwhile
// take the object's current resourceVersion, which is the creator's token
// or, if someone else changed the object, a larger number. Older baton
// versions cannot read that annotation and refuse the object
// (backend.ErrCorruptRecord) instead of issuing token 2 after it.
//
// Why not a separate counter? The alternative is a companion "epoch"
// object per lock, bumped by a conditional write whenever the lock object
// is created. It costs one more read and write per creation, which is per
// acquisition for schedule's per-slot locks (a new lock name for every
// run), a second object per lock name that could collide with a user's
// lock name, and it is itself lost to kubectl delete. The resourceVersion
// is free, cannot be deleted, and orders writes across the whole cluster.
//
// To reset a counter on purpose (for example after the fenced resource was
// restored and remembers lower tokens), free the lock (`baton release
// --force`) and set the annotation to the token before the next one you
// want: `kubectl annotate lease NAME baton.dev/token=N --overwrite`
// (ConfigMap: the same annotation; DistributedLock: status.token with
// kubectl edit). Deleting the object does not reset the counter to 1; it
// continues above the cluster's resourceVersion. So do not delete an
// object whose counter you set above its resourceVersion (Remove keeps
// it): its successor could issue smaller tokens.
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
// expired only once this process has seen its claim unchanged for its
// leaseDurationSeconds. Any write to the claim (holder, nonce, renewTime,
// leaseDurationSeconds, token), a renewal or anything else, restarts the
// count; a write of other fields alone (labels, annotations not baton's,
// owner references, a ConfigMap's data, by a controller or a GitOps tool)
// does not, since it renews nothing: otherwise a tool that touched the
// object more often than its lease duration would keep a crashed
// holder's lock from everyone for ever. Every renewal writes a renewTime
// other than the one it replaces. HeldError.RetryAfter and
// Record.Remaining are the rest of that observation window.
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
//     expired (Renew and Release return backend.ErrLost) no later than any
//     contender does. baton's engine stops the holder earlier still, at
//     send time + TTL - margin.
//   - Only clock *rate* matters, never offsets. The engine's margin
//     (default max(2% of TTL, 50ms)) covers rate differences.
//   - renewTime and acquireTime are written for people (kubectl get
//     leases, baton status). They are never compared with a clock; the
//     one decision that reads renewTime compares two versions' values for
//     equality (below), to tell a holder's renewal from another write.
//   - A claim's lease duration does not shrink in a process's judgement
//     between two renewals: a version of the same claim (holder and
//     nonce) with the same renewTime and a shorter leaseDurationSeconds
//     than one seen before, which only a hand edit writes, counts for the
//     longer one. The holder learns of such an edit at its next renewal
//     at the earliest and writes its own duration back (which counts from
//     then on, shorter or not); a process that first looks after the edit
//     cannot know the longer duration, so do not edit
//     leaseDurationSeconds of a held lock to free it: use baton release
//     --force. A claim whose duration was removed (the field deleted) is
//     judged with the duration a process saw before; one that never saw
//     it counts the claim as held until the object changes, which the
//     holder's next renewal does by writing its duration back, or a
//     forced release frees it (TestLeaseDurationRemoved).
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
//	  baton.dev/token          last fencing token, decimal uint64 ("42"),
//	                           or "resourceVersion" on a new object (see
//	                           Fencing tokens)
//	  baton.dev/nonce          the holder's nonce; absent when released
//	metadata.labels:
//	  baton.dev/app            the owning application (WithApplication)
//
// TTLs shorter than one second are rejected (backend.ErrInvalidOptions):
// leaseDurationSeconds cannot hold them. A TTL that is not a whole number
// of seconds is rounded up on the object; the holder's engine still
// measures its validity with the TTL it asked for, which is shorter. An
// acquisition or renewal whose lease duration the API server stored
// shorter than written (a mutating admission policy or webhook of the
// cluster rewrote it) would let others judge the claim expired while its
// holder still counts it valid: the acquisition is released and refused
// with an error matching backend.ErrMisconfigured, the renewal returns
// one matching backend.ErrLost, both naming the two durations.
//
// A Lease without the baton.dev/token annotation, label baton.dev/app,
// nonce or finalizer baton.dev/claim (MadeByBaton) was created by another
// tool (for example client-go leader election). One of baton's whose token
// annotation was removed by hand is still baton's: its token reads as its
// resourceVersion until its holder's next renewal writes the token back,
// so tokens keep growing (TestTokenAnnotationRemoved). A Lease whose
// baton.dev/app label differs from the store's application belongs to
// another application. TryAcquire never takes either over: it returns an
// *ApplicationError naming both applications (see WithApplication). A
// token annotation that is not a decimal number makes every operation on
// that lock fail with backend.ErrCorruptRecord; it is never overwritten.
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
// the last watcher's context. A rest.Config's Timeout bounds every request
// of its client, watches included: with one set, the store's watch is cut
// and re-established at each Timeout, which wakes its waiters once each
// time.
//
// # Rate limiting
//
// client-go limits requests per client (QPS, Burst). If lock traffic
// shares a client with the application and the application spends the
// budget, renewals queue behind it and the holder steps down. Give the
// store its own client: NewLeaseForConfig copies the *rest.Config and
// gives the copy its own token-bucket limiter (WithRateLimit, default 20
// QPS, burst 40). A holder whose renew waits in that limiter past the
// renew deadline steps down with an error matching ErrRateLimited that
// names QPS and Burst (the limiter records its waits; the step-down is
// no later for it), and a request the limiter did not send because its
// wait would have passed its context's deadline gives one too. A release
// queues in the same limiter: Unlock of a lease still held waits there as
// long as its context allows (give it a context with a deadline, such as
// context.WithTimeout(context.Background(), 5*time.Second)); the release
// of a lease already lost, after such a step-down, waits at most the
// engine's release timeout (5 s), and Unlock returns the loss. If you
// build the clientset yourself for NewLease, build it from
// rest.CopyConfig with its own QPS and Burst: the store cannot see that
// client's limiter, and a step-down for want of its tokens says only
// that the renew had no answer.
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
// (deploy/rbac/rbac.yaml ships it with a ServiceAccount and RoleBinding).
// Taking locks needs no "delete": a release keeps the object, and the
// finalizer FinalizerClaim is added and removed with update. Only Remove
// deletes, and only free objects (see Removing lock objects): package
// schedule's clean-up of the lock objects of finished slots, baton remove,
// and a program's own Remove of a lock it no longer uses, so their
// identities also need "delete" (add it to the verbs above; a scheduler
// can keep the objects instead, schedule.KeepSlotLocks). List (baton
// status) also needs "list". A denied request returns an error matching
// backend.ErrForbidden that names the namespace, the resource, the verb and
// the rule above (for "delete", also that only removal needs it); the
// engine does not retry it. A request that RBAC allows but a
// ValidatingAdmissionPolicy or an admission webhook of the cluster refuses
// (with whatever status code the policy chose, 422 by default) returns an
// error matching backend.ErrForbidden too, naming the policy and not a
// Role, and is not retried either: the same policy would refuse it again. A
// missing namespace returns an error matching ErrNamespaceNotFound and
// backend.ErrMisconfigured that says so; a namespace being deleted (the API
// server answers 403 to every create there) one matching
// backend.ErrMisconfigured, not backend.ErrForbidden, that says so; and a
// missing DistributedLock CRD one matching backend.ErrMisconfigured that
// says how to install it: the engine does not retry them either. An API
// server that cannot be reached gives an error matching
// backend.ErrUnavailable (retried), as does one that throttles requests
// (429 Too Many Requests) past client-go's own retries, which wait out
// each Retry-After: that error also matches ErrThrottled, and so does the
// error of a request whose context ended while a 429 was being waited
// out (the ForConfig constructors' clients note them); and a TLS setup
// that cannot work one matching backend.ErrMisconfigured. A server that
// answers as no API server does (a web server's 404 page or 501, a login
// page, JSON of another service: a kubeconfig pointing at the wrong URL)
// gives an error matching ErrNotAPIServer and backend.ErrMisconfigured
// that says what it answered, never backend.ErrNotFound; a proxy's 502
// page stays a transient failure.
package kubestore
