// Package etcdstore provides a backend.Backend on etcd (v3 API, through
// go.etcd.io/etcd/client/v3): distributed locks and leader election whose
// fencing tokens are etcd revisions.
//
//	client, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: []string{"https://etcd-0:2379"}, CAFile: "ca.pem"})
//	...
//	defer client.Close()
//	store, err := etcdstore.New(client) // fair mode; etcdstore.WithFair(false) for plain mode
//	...
//	defer store.Close()
//	mu, err := baton.NewMutex(store, "nightly-report")
//
// OpenStore does both for a command-line tool; the Store then owns the
// client.
//
// The Store performs atomic operations on etcd; timing, retries and loss
// detection are the engine's (package baton), as on every backend.
//
// # Guarantees
//
//   - Exclusion: acquiring is one transaction that creates the lock's claim
//     key only if it does not exist (its CreateRevision is 0); in fair mode
//     a release may instead put the claim for the next waiter, in the
//     transaction that ends its own claim (see "Fair mode"). etcd
//     serializes transactions, so at most one claim per lock exists.
//   - Fencing tokens are the claim key's mod revision: the revision of the
//     transaction that gave the claim to its holder (the acquiring one, or
//     the releasing one that handed it over; for a claim that was not
//     handed over it equals the create revision). The claim key is written
//     by nothing else, and etcd revisions only grow, so tokens strictly
//     increase across holders, releases, expiries, client restarts and
//     member restarts, as long as etcd keeps its data. Restoring etcd from
//     an older snapshot takes revisions back, and tokens with them, unless
//     it is restored with etcdutl snapshot restore --bump-revision N
//     --mark-compacted, N above the revisions written since the snapshot.
//     A restore also brings back the claims and queue places of the
//     snapshot, on the snapshot's leases, and ends the claims taken since:
//     their holders lose them, found by the Store's verification (their
//     keys are gone, or on another lease), or by the read of every claim a
//     Store makes once it trusts etcd again after its keepalive stream
//     failed (a claim key put back with an older claim of the holder's
//     own lease, which a verification cannot tell apart). A restored claim
//     or place whose lease is gone is deleted with it; one on the lease
//     of a running Store that no longer holds it is deleted by that Store
//     (at its next acquire of the lock, or its lease's next verification),
//     and by a release that finds it under its own claim (restored.go).
//     A running Store follows the restored cluster without a restart, and
//     logs that etcd's raft term went back if it did.
//   - Ownership: only the Store that acquired a claim renews or releases it,
//     and only for the grant's holder, nonce and token. Release is one
//     transaction conditioned on the claim key's mod revision still being
//     the grant's token, so a late release never frees (or hands over) a
//     successor's claim.
//   - Expiry is judged by etcd (lease expiry, on the leader's monotonic
//     clock) and by the holder's own monotonic clock. No wall-clock time is
//     compared across machines; the times in the records are for people.
//   - The holder stops before anyone else can start (see "Leases and
//     renewal"): a successful acquire or Renew whose request left at S
//     means etcd keeps the claim at least until S + TTL.
//   - Losing a claim is reported: Renew fails with backend.ErrLost once the
//     Store knows its lease is gone (etcd says so, or no keepalive was
//     acknowledged in time), the claim's key was deleted or replaced (a
//     forced release; see "Deleted claims"), or the claim expired; the engine then ends the
//     lease's context. If renewals just stop succeeding, the engine steps
//     down at its renew deadline, before the claim can expire in etcd.
//
// # Key layout
//
// For a lock named N and the prefix P (default "/baton/locks/", see
// WithPrefix):
//
//	P N              the claim: exists while N is held; attached to the holder's
//	                 lease. Value: see below. Token = its mod revision.
//	P N /last        the last acquisition: written in the acquiring transaction, so
//	                 its mod revision is the last token issued; its version minus
//	                 one counts acquisitions after the first (Record.Transitions).
//	                 Never expires; release keeps it (Remove deletes it). Get
//	                 and List report a released lock from it.
//	P N /released    the release marker: put (value: the released token) by every
//	                 transaction that ends a claim on release (a fair handoff too)
//	                 or clean-up; never expires (Remove deletes it). A claim key
//	                 that vanished after the marker's last write was deleted by
//	                 someone else (see "Deleted claims").
//	P .guard/N       the claim's guard: same value, lease and mod revision as the
//	                 claim; put and deleted with it, but outlives a claim key deleted
//	                 by hand (see "Deleted claims"). No lock name starts with a dot.
//	P N /queue/ID    fair mode only: a waiter's place (and, once it acquires, the
//	                 holder's until its claim ends), attached to its Store's
//	                 lease; ordered by create revision. Value: the claim value
//	                 the waiter is handed, plus " handoff=1".
//
// Lock names never contain '/', so the keys of two locks never collide.
// Values are one line of text:
//
//	baton/v1 holder=<identity> nonce=<nonce> ttl=<TTL> at=<RFC 3339 time>
//
// (see `etcdctl get --prefix /baton/locks/`); for a claim handed over in
// fair mode, at= is when its holder queued. A claim value that does not
// parse is reported as backend.ErrCorruptRecord and never overwritten;
// one of a later format (baton/v2 and up: a newer baton wrote it, as a
// rollback meets) is refused the same way, with an error that says so and
// not to delete the key.
//
// # Leases and renewal
//
// A Store keeps one etcd lease for each distinct TTL its claims ask for (an
// application that uses one TTL has one lease), and one LeaseKeepAlive
// stream for all of them. So the cost of holding locks does not grow with
// their number: holding 10,000 locks with one TTL costs one keepalive
// message per keepalive period and one verification request per
// verification period, where per-lock leases would cost 10,000 of each.
//
// A lease for claims of TTL T has the TTL L = T + max(T/10, 500ms), rounded
// up to whole seconds (17s for the default 15s). The Store records, on this
// process's monotonic clock, the send time s of every grant or keepalive
// request, and when etcd answers with a TTL L' it knows that etcd keeps the
// lease at least until s + L' (etcd refreshes a lease when it handles the
// request, which is after s). While the lease carries claims, the Store
// sends a keepalive every K = min((L - T)/2, 1s) (1s for the default TTL).
//
// The engine calls Renew every T/3 for each lock. Renew is answered
// locally: if the last acknowledged keepalive keeps the lease until at
// least now + T, the claim is extended to now + T; as the keepalive period
// K leaves a margin of L - T - K ≥ K for a round trip, this is the normal
// case, and Renew sends nothing to etcd. Otherwise Renew asks for a
// keepalive at once and waits for its answer. Either way a successful
// Renew whose call began at S (the engine reads S before calling) means
// etcd keeps the claim until at least S + T, which is what the engine's
// clock model (baton.Lease) assumes. An acquire likewise makes sure, before
// its transaction leaves, that the lease lasts T from then, asking for a
// keepalive if it does not. A keepalive answered more than L - T after it
// was sent cannot make it last T from then: the acquire then fails with
// an error matching backend.ErrUnavailable that says how long the answer
// took (a slow path to etcd, or an etcd grpc-proxy), instead of waiting
// for the next keepalive, which would come as late, until its context
// ends (TestKeepaliveSlowerThanHeadroom).
//
// Since claims share a lease, a claim would live as long as any claim of
// its Store is renewed. So each claim also has a deadline, S + T of its
// last acquire or renew: once it passes, Renew and Release fail with
// ErrLost and the Store deletes the key (conditionally on its token). And
// since a lease alive does not prove that a key still exists (an
// administrator may have force-released it), the Store asks etcd every
// max(T/3, K) which keys are attached to each lease (LeaseTimeToLive with
// keys; one request per lease, confirmed per missing key with a read) and
// marks claims whose keys are gone as lost; their next Renew fails.
//
// "etcd keeps the lease" holds only for answers of the current raft
// leader. A leader whose process was stopped (SIGSTOP, a frozen VM) and
// resumes after the others elected a new one answers, for a moment, the
// keepalives that queued up meanwhile from its own lessor, and in etcd 3.7
// it skips its leadership check right after resuming; the new leader never
// hears of those renewals. So after a keepalive stream stalls or fails,
// the Store trusts no lease answer until a linearizable read (which only
// the current leader can serve) has returned, and then only answers to
// requests sent after it, from members in at least the read's raft term.
// Renew calls wait for a trusted keepalive meanwhile, usually one round
// trip; if none comes in time, the holder steps down. See trust.go for why
// a shorter stop (no stall) is covered by the new leader's extension.
//
// An acquiring transaction whose answer was lost (a timeout across a
// leader change) may still be applied, on this Store's lease. A TryAcquire
// call takes over a claim that one of its own transactions wrote; once a
// call has failed, the claims its unanswered transactions may still write
// are orphans of the lease, and the lease's verification deletes any it
// finds, as a release would (see orphan.go). Otherwise such a claim would
// last as long as the Store keeps the lease alive, held by nobody. In fair
// mode, a place in the queue that such a transaction may have put is an
// orphan too, deleted the same way: waiters behind it would wait for it,
// and a release would hand it the lock.
//
// What this means for the timeline of a holder:
//
//   - Cut off from etcd, its Renew calls keep succeeding while the last
//     acknowledged keepalive covers them (at most L - T after it), then
//     fail; the engine steps down at its renew deadline after the last
//     success. etcd expires the lease L after the last keepalive it
//     handled, and only then can another process acquire. Measured in this
//     package's tests (TTL 2s, lease 3s): step-down 2.0s after the cut,
//     takeover 3.0s after it.
//   - If the holder's process dies, etcd frees its claims when the lease
//     expires: at most L (not T) after its last keepalive. This headroom
//     (max(T/10, 500ms), plus rounding up to whole seconds) is the price of
//     renewing without a request per lock.
//   - If the engine stops renewing one lock (an Elector whose work did not
//     stop in time abandons its lease), its claim ends at its deadline.
//   - An etcd member restart, graceful or not, keeps leases (etcd even
//     extends them on recovery). A holder whose renew deadline did not pass
//     meanwhile keeps its locks; one that stepped down finds its claims
//     expired and deletes them when etcd is back, so a standby can start.
//     If etcd was out (a lost quorum) until the Store gave the lease up (no
//     keepalive acknowledged for the lease's TTL), the Store revokes it,
//     sending the revocation again until etcd answers: etcd extends every
//     lease by its TTL when a new leader is elected, so the lease would
//     otherwise keep the claims of the holder that stepped down for that
//     long after the outage (TestClusterQuorumLostLongerThanLease).
//
// Claims with different TTLs use different leases; each TTL's claims are
// governed by their own lease TTL and periods as above.
//
// Remaining (Get, List, HeldError.RetryAfter): for this Store's claims,
// the time to their deadline; for another Store's claim, from the holder's
// lease (LeaseTimeToLive, whole seconds rounded up) capped at the claim's
// TTL in Get and List, and 0 in HeldError.RetryAfter (no extra request on
// the contended path; the watch wakes waiters on release or expiry).
//
// # Raft leader changes
//
// A request sent to a member whose leader died waits for etcd's own
// request timeout (7s with the default election timeout) before it fails.
// So Release and a plain (not fair) acquire give each attempt a timeout of
// its own (2s, doubling up to 8s) and send the transaction again after a
// transient failure (gRPC Unavailable: no leader, leader changed, request
// timed out, connection lost), within the caller's context; a release also
// stops at the claim's deadline (the reaper deletes the key then). The
// Store's own clean-ups, the delete of an expired claim's key and of an
// abandoned queue place, time their attempts the same way and are sent
// again until etcd answers. All these transactions are conditional, so
// sending one again is safe: a release never frees a successor's claim,
// and an acquire whose earlier attempt was applied finds the claim with
// its own holder, nonce and lease and takes it. Measured on a
// three-member cluster (default raft timing): the leader killed, a
// release sent through a member left without a leader returns about 2s
// later (its first attempt's timeout, after the ~1.1s election), and a
// waiter acquires 0-2s after that, not when the holder's lease expires.
// A claim that expires during the election is deleted about 2s after its
// deadline in the same case (TestClusterLeaderKilledAtExpiry). A holder
// keeps its locks across the election if its TTL leaves room for it:
// Renew needs an acknowledged keepalive that covers the TTL, and the
// lease's headroom over the TTL (max(T/10, 500ms), rounded up to whole
// seconds) is what an election may consume before renewals wait.
//
// # Deleted claims
//
// A claim key deleted by someone else while held (`etcdctl del`, or
// ForceRelease for contenders that saw the claim) is not a free lock until the claim could have expired
// (DESIGN invariant 3):
//
//   - The holder: Renew is answered locally only within the TTL plus one
//     verification period (see "Leases and renewal") of the send time of
//     the last request that found the key in place (its acquire or a
//     verification); beyond that it asks for a verification and waits. So
//     the holder stops renewing at most that long after the deletion, and
//     its lease ends with ErrLost when the verification finds the key gone
//     (backend.LossNotifier), or at its next renew after it. At the claim's deadline, its Store deletes
//     its fair-mode queue key (which holds the waiters behind it until
//     then) and puts the release marker.
//   - A contender that saw the claim (an attempt found it held) acquires
//     only if the release marker is newer than that claim (a condition of
//     the acquiring transaction). If the key vanished without a release,
//     the claim counts as held for twice the TTL plus a verification
//     period (plus 2% of the TTL, at least 50ms) from when that Store first
//     found it gone, on its monotonic clock: the holder renewed at most
//     until then, and is valid a TTL after its last renew. The attempt
//     answers HeldError, with RetryAfter up to a verification period: the
//     contender looks again for the release marker that the holder's Store
//     puts at the claim's deadline once it noticed (usually well before the
//     grace ends). If etcd reports the claim's lease gone (its holder
//     died), the contender acquires at once. That also holds for a lease
//     that was revoked, not expired: `etcdctl lease revoke` on a holder's
//     lease, or etcd 3.7's own early revocation by a resumed, deposed
//     raft leader (see the safety suite's leader-pause rows), ends the
//     claims on it as ForceRelease does. Contenders acquire at once; the
//     holder's Store learns it from its next keepalive answer (one per
//     keepalive period, at most a second) and ends the holder's
//     baton.Lease then, without waiting for its next renew
//     (backend.LossNotifier: TestRevokedHolderStopsBeforeItsRenew); until
//     then only the fencing token protects the resource.
//   - A contender that never saw the claim is stopped by its guard (P
//     .guard/N, below): a key with the claim's value, put on the claim's
//     lease by the same transaction (so at the same revision), that every
//     acquire requires absent. A hand deletion of the claim key, or of
//     every key of the lock (`etcdctl del --prefix P N`), leaves the guard:
//     it goes at the claim's deadline, deleted by the holder's Store with
//     the release marker, or with the holder's lease if that Store is gone.
//     Meanwhile an attempt answers HeldError naming the deleted claim's
//     holder and token, with RetryAfter a verification period (the guard's
//     deletion wakes no watch); Get and List report the lock held.
//     ForceRelease deletes the guard too: it is the sanctioned way to free
//     a lock at once. A deletion that takes the guard with it (`etcdctl
//     del --prefix P`, over every lock, or of P .guard/N itself) leaves
//     only the condition above: contenders that saw the claim still wait,
//     but one that never saw it acquires at once, and until the holder
//     notices, only the fencing token protects the resource. In fair
//     mode `del --prefix` takes the waiters' places too: their attempts
//     fail with ErrLost, the engine retries, and they queue again, each
//     looking at etcd every verification period for the release marker.
//   - Tokens are still mod revisions: the next claim's is above the
//     deletion's revision.
//
// A Store remembers the claim it saw for each lock it found held, until it
// acquires that lock. A Store that never touches the name again (a
// replica that lost each slot of a scheduled job, whose locks have a name
// per slot) would keep one such claim per name. So once it has seen
// claims of more than 256 names, and again each time that number has
// doubled, it reads their release markers, claim keys and guards (in
// transactions of 96 reads, in the background) and forgets the claims
// that etcd shows released (the acquiring transaction's condition already
// holds for them), and those gone without a release (deleted by hand, or
// the lock removed: see "Removing a lock") whose grace above has passed
// since this Store first found them gone (a prune that finds one gone
// starts its grace). Claims still held, or whose guard is still in
// place, are kept.
//
// Stores of earlier versions write no release marker and no guard:
// contenders of this version that saw one of their claims treat its
// release as a deletion and wait as above, and while Stores of both
// versions share a lock, one of an earlier version can acquire over a
// guard. Upgrade every Store before relying on the guard.
//
// # Removing a lock
//
// Store.Remove (backend.Remover: package schedule removes the lock of each
// slot once the slot is done) deletes every key under P N/ (the /last
// record, the release marker, anything else left there) in one
// transaction that requires the claim key, its guard and every place in
// the queue absent. Otherwise it deletes nothing and returns an error
// matching backend.ErrHeld: naming the claim's holder and token, or the
// guarded claim's after a hand deletion of its key, or, when only places
// remain, the oldest of them (a waiter's, or the place of a holder whose
// claim was force-released, which that holder's Store deletes at the
// claim's deadline). It does not judge a claim expired: the key goes at
// the claim's deadline or with its lease, and Remove succeeds then. A lock
// without keys is not an error.
//
// Tokens go on increasing: the next claim's is its mod revision, above the
// removal's revision. Get reports backend.ErrNotFound until then, and
// Transitions counts from zero again. The Store that removed the lock
// forgets the claim it saw on it if the release marker it deleted showed
// that claim released. Other Stores that saw a claim of the lock cannot
// tell the removal from a deletion by hand: an attempt of theirs counts
// that claim as held for its grace (see "Deleted claims"; less if etcd
// reports the claim's lease gone), and their prune forgets it after that
// grace. Stores that never saw a claim of the lock acquire at once. So
// remove only a lock that will not be taken again soon. The Store of a
// force-released claim puts the release marker when its holder releases,
// or at the claim's deadline, even if the lock was removed before (that
// key alone is left): remove such a lock after that deadline.
//
// # Watch
//
// Waiters are woken by an etcd watch on the key they wait for (see
// Store.Watch): the claim, or in fair mode the queue entry just ahead.
// Watches always start at the present revision (a watch started at a past
// revision is served by etcd only at its next periodic resync, 100ms
// later), so a lock changes hands one round trip after its release. While
// the watch is established and nothing changed, an attempt answers "held"
// locally, so the engine's periodic retries cost nothing; only while the
// client has a connection to etcd, since the etcd client resumes a watch
// silently when its connection is lost: without one the attempt asks
// etcd, and fails naming why no answer came (a member unreachable,
// matching backend.ErrUnavailable, which the engine logs and retries; or
// a TLS handshake refused, matching backend.ErrMisconfigured: a waiter's
// Lock then ends with that error, as its holder's lease does). Each etcd
// request of an attempt waits at most 8s for an answer (etcd without a
// raft leader answers after its own request timeout, 7s by default; an
// election slower than that shows as failed attempts, logged and
// retried). Since a watched waiter's engine retries on its own only once
// a TTL, the Store wakes its waiters once its connection has not been
// ready for a second, once per such loss. In fair mode a waiter's place
// stays in the queue meanwhile, with its order: it goes only with its
// Store's lease, which outlasts an outage shorter than the TTL. A watch that
// starts after the waiter's read compares the key with that read once it
// is established (a serializable read, if the member has caught up with
// the watch's start: the watch covers what follows) and wakes the waiter
// if it changed in between; in fair mode the engine's retry right after
// the attempt that took a place (it retries at once when its Watch opens)
// relies on that comparison and asks etcd nothing.
//
// # Fair mode
//
// Fair mode is the default (WithFair(false) selects plain mode).
// Contenders that wait in baton.Mutex.Lock (or an
// Elector) get the lock in the order in which they started waiting, and
// each is woken only when the key just ahead of it in the queue is
// deleted or the lock is handed to it: no thundering herd, one waiter
// woken per handover. A handover costs one transaction (the release, which
// hands the lock over; a holder that knows no waiter reads first, unless
// it watches the queue); the
// waiter normally collects the lock from a watch event, without a
// request, having read the waiter behind it while it was next in line.
//
//   - An attempt that waits (backend.Request.Waiting: every attempt of Lock
//     and of a campaign; or any attempt while a Watch of the lock is open
//     in the Store, for callers that drive the Backend themselves)
//     acquires if the lock is free and the queue empty; otherwise the same
//     transaction puts the waiter's queue key (attached to the Store's
//     lease) and reads the key just ahead of it, which the waiter then
//     watches. One place per lock and holder identity in a Store; later
//     attempts reuse it. An attempt that does not wait (TryLock) never
//     queues and never overtakes: it acquires only if the claim is free and
//     the queue is empty, and when the Store's last look found the lock
//     busy it reads before it writes (a read costs etcd no disk sync).
//   - Handoff: a holder that acquired with a place reads, in the same
//     transaction or read, the oldest place behind its own (or read it ahead
//     of time: see "Collecting from the watch"). A holder that acquired a
//     free lock with an attempt that would have waited (Lock, a campaign),
//     or one that its Store has seen contended lately (the Store queued for
//     it, or its last release of it handed it over or found waiters), and
//     keeps it longer than its acquire's round trip watches the queue
//     from its claim's revision on (the acquire found the queue empty, so
//     every place put since reaches that watch, oldest first; a Store
//     keeps at most 256 such watches open) and takes the oldest place the
//     watch shows. A holder that knows no such place (nobody was behind
//     it when it read, or its watch shows none, failed or was never opened)
//     reads the oldest place behind its own, or any if it has none,
//     when it releases: a serializable read, which costs etcd no round of
//     consensus and no disk sync, against the write the waiter would send
//     after a plain release (a holder that took a free lock and releases it
//     within its acquire's round trip skips the read, so that a tight
//     uncontended loop does not pay it on every cycle; a waiter it misses
//     acquires after the plain release). A stale answer is safe: a place that
//     left since fails the condition below, and a place missing from a
//     member's older state is younger than every place in it. Its release is
//     one transaction: if its claim is still its own and that place's key is
//     unchanged (same create and mod revision), the claim is put with that
//     waiter's claim value (its queue value without the mark: holder, the
//     nonce of its Lock call, TTL), on that waiter's lease, and the /last
//     record with it; that waiter's queue key is touched (put with its value
//     and lease kept: only its mod revision moves), and the holder's queue key
//     is deleted; otherwise the claim and the queue key are deleted. (etcd
//     refuses a delete and a put of one key on one path of a transaction, so
//     the claim is overwritten in place: hence tokens are mod revisions.) An
//     expired claim's clean-up releases plainly.
//   - A waiter's attempt with a place first reads the claim, the key ahead,
//     its own key and the place behind it (serializably while its watch is
//     up and the member has caught up with the last change the watch
//     delivered; linearizably otherwise). If the claim holds its claim
//     value on its lease, the lock was handed to it: the attempt collects
//     it without a write (if another goroutine of the same holder queued
//     the place with another nonce or TTL, one conditional transaction
//     rewrites the claim for the attempt first). If the claim is free and
//     no queue key is older, one transaction acquires on those conditions.
//     (A waiter waiting for the claim itself, whose holder did not queue,
//     collects a claim handed to it from that watch's event, and skips
//     the read when the watch reports another change of the claim.) Its
//     queue key stays, as the holder's, until the claim ends, so the
//     waiter behind it keeps waiting for that one key.
//   - Collecting from the watch: a place is next in line when its Store
//     sees the key just ahead of it touched (the lock was handed to that
//     key's owner), or reads the claim held by that key's owner. Its
//     Store then also watches the claim key (a second etcd watch, until
//     the place is consumed or abandoned; in fair mode a Store's watches
//     of a lock stay open for a second after its last Watch of the lock
//     ends, for its next Lock), and reads the oldest place behind its own
//     (serializably, while the lock is still held), for its release to
//     hand over to. When an event shows the claim holding the place's
//     claim value on the place's lease, with a mod revision above the
//     place's create revision, the lock was handed to it: the next attempt
//     collects it from the event, as it would from the read above (same
//     conditions; the token is the event's mod revision), without a
//     request. The deletion of the key ahead is in the same transaction
//     but arrives on the other watch; if the claim watch started before
//     it, the waiter's wake-up waits up to 5ms for the claim's event. If
//     the event is missed (the claim watch started late or broke), the
//     attempt reads as above. (A place behind that is not known by then
//     is read by the release.) An event is a
//     committed state of etcd at its revision, as a serializable read's
//     answer is; and a claim handed to a place stays that place's until
//     its Store deletes it or its lease ends (see the next point), so
//     collecting it needs no fresher look. The place behind, read ahead
//     of time, may be gone by the release: the release's condition (its
//     key unchanged) then fails and it releases plainly; a place created
//     after that read is younger, so arrival order is kept. Nothing else
//     writes a queue key, so only a handoff moves a waiting key's mod
//     revision, and only the release that hands over compares it.
//   - The engine's clock model still holds for a handed claim (DESIGN
//     invariant 3: etcd keeps the claim at least until the send time S of
//     the acquiring request plus the TTL). The claim was written before S,
//     by another client, but it is attached to the waiter's own lease, the
//     one its Store keeps alive for its queue key. Before collecting, the
//     attempt makes sure, on this process's monotonic clock, that the last
//     acknowledged keepalive keeps that lease until at least now + TTL
//     (asking for a keepalive and waiting for it if not), where now is read
//     after the engine read S; the claim's deadline in the Store is
//     now + TTL. Nothing else deletes the claim before then: releases,
//     clean-ups and a later handoff are all conditioned on its mod
//     revision or its exact value, and only the waiter's Store issues them
//     (ForceRelease aside, which is the documented admin action). So etcd
//     keeps the claim until S + TTL at least, as for a claim the waiter
//     wrote itself.
//   - A place whose key is gone (the waiter's lease expired while it was cut
//     off, or an administrator removed it) never acquires: the attempt
//     fails with an error matching backend.ErrLost (etcd's concurrency.Mutex
//     returned the lock in that case). The engine treats that error as
//     transient: it logs it and tries again, at the end of the queue.
//   - A place is removed when the contexts of the attempts that used it
//     have ended (the Lock gave up), when the last Watch of the lock in the
//     Store ends (Lock returned), or with the Store's lease; Close removes
//     all of them. The removal is one transaction that deletes the place's
//     key and, if the lock was handed to the place meanwhile, the claim
//     (conditioned on its exact value and lease): a waiter that gave up
//     never keeps the lock. A handed claim whose waiter's lease ends goes
//     with the lease. The removal after a give-up is sent in the
//     background: Lock (or an Elector's Run) returns without waiting for
//     it, and Close waits for it. Close the Store before the process
//     exits: a standby stopped by SIGTERM that exited (os.Exit) right
//     after its Run returned, without Close, kept its place in 4 of 4
//     runs, and the leader's next release handed the lock to it, so the
//     other standby took over only after the TTL.
//   - ForceRelease deletes the claim only; the holder's Store deletes the
//     holder's queue key when it notices (within its verification period),
//     or the key expires with the holder's lease, and the next waiter goes
//     on.
//
// The lock is handed to the oldest waiter whether or not that waiter is
// still there to collect it: the release cannot tell a waiter that is about
// to give up from one that is about to come back. This adds no
// unavailability to a fair queue: the oldest waiter's place already blocks
// everyone behind it, and a handed claim ends exactly when that place does
// (the waiter's Store removes both at once when the Lock gives up, if the
// process lives on or closes the Store, or both go with its lease within
// the lease TTL when its process dies or is cut off). A waiter that is alive but slow to retry (a broken watch, noticed
// at its engine's next periodic retry) delays the queue as before, whether
// the lock is handed to it or merely free.
//
// The trade-offs: a place is per holder identity, so two goroutines of one
// baton.Mutex share one place (they are not ordered between themselves;
// different Mutexes have different identities by default). A waiter
// that is not first learns of a new holder only at its engine's
// next periodic retry (Store.Observe follows the holder at once). All clients of a lock
// should use the same mode: exclusion and tokens hold across modes, but a
// Store in plain mode does not queue and can overtake the queue. Versions
// before fair mode became the default opened plain Stores unless told
// otherwise, so during a rolling upgrade from one of them the lock stays
// exclusive and fenced but is not served in order until every client runs
// the new version (or pass WithFair(false) to keep plain mode).
//
// What fair mode costs: an uncontended acquire also checks that nobody
// queues, and a holder that kept the lock longer than its acquire's round
// trip reads the oldest place before it releases (a serializable read;
// a holder that took it with Lock, or on a lock the Store has seen
// contended, watches the queue instead, an etcd watcher while it holds,
// and reads only if the watch shows none),
// so a tight uncontended loop runs a few percent slower than in plain mode
// (docs/benchmarks.md); and TryLock never overtakes the queue, so where
// some clients wait with Lock and others poll with TryLock, the pollers
// acquire only while nobody waits. What plain mode costs: waiters race for a released
// claim, so with many contenders an unlucky waiter can wait many
// handovers, and the tail of the wait grows with the number of
// contenders (docs/benchmarks.md measures both modes beside etcd's
// concurrency.Mutex).
// Queue values of Stores that collect handed claims carry the handoff=1
// mark, and a release hands the lock only to such a place, so a Store
// without handoff (an earlier version) waiting in the same queue is never
// handed a claim it would not collect; but it reads tokens as create
// revisions, which a handed claim does not change, so its status views may
// show an older token for such a claim.
//
// # Permissions
//
// With etcd authentication on, the user needs read and write permission on
// the prefix's key range (etcdctl role grant-permission --prefix ROLE
// readwrite /baton/locks/). Leases need no further permission, nor does
// Remove. Refused operations fail with an error matching
// backend.ErrForbidden, which stops the engine from retrying (Remove's
// and CheckPermissions' errors name the permission to grant).
// Store.CheckPermissions asks etcd, without writing, whether the user may
// do what a lock needs, Remove included (baton doctor's permissions row).
//
// # Connections
//
// A connection dropped silently between the client and etcd (a NAT or a
// firewall that forgot the flow, a load balancer replaced: nothing
// answers, nothing is closed, a new connection would work) is noticed by
// gRPC's keepalive only after 10s + 5s, the shortest gRPC allows; every
// request and watch on it waits meanwhile. A Store over a client that
// Open (or OpenStore, or clientv3.New with Config.ClientConfig's result)
// made does not wait: when a lease keepalive goes unanswered for its stall
// timeout (four keepalive periods, at least 2s: 4s at TTL 15s), it closes
// the client's connections that have received nothing since that
// keepalive was sent, and gRPC dials again at once; the keepalive stream
// and the client's watches (which resume from the revision they had seen)
// go on over the new connection. A connection that received anything
// meanwhile is left alone. Measured (TestSilentDropKeepsLock,
// TestSilentDropStandbyTakesOver, TTL 15s): the holder kept its lock,
// renewing 5.0s after the drop, and a standby whose connection was
// dropped took over 5.0s after a release sent just after the drop (both
// modes). With a short TTL the renew deadline can come first (the safety
// suite's row, TTL 2s: the holder stepped down 1.3-1.9s after the drop,
// safely, and acquired again over a new connection).
//
// This needs the client's transport credentials and context as
// ClientConfig sets them (its DialOptions and Context). A Store over a
// client built from a configuration of your own is left to gRPC's
// keepalive (clientv3.Config.DialKeepAliveTime and DialKeepAliveTimeout):
// a holder behind a dropped connection steps down at its renew deadline
// at TTLs under about 45s, safely, and a standby hears a release only
// once gRPC has noticed. Only a Store with a lease to keep alive (a held
// claim, a queue place, an acquisition within the lease TTL) notices: a
// Store that only observes a lock is left to gRPC too.
//
// # etcd grpc-proxy
//
// baton does not support an etcd grpc-proxy (etcd grpc-proxy start)
// between its clients and etcd: point them at the members, or at a TCP
// load balancer in front of them. The proxy coalesces lease keepalives:
// it does not forward a client's keepalive request, but keeps the lease
// alive itself with a keepalive of its own every third of the lease's TTL,
// and answers every request waiting at the time with the next answer it
// receives (etcd's proxy/grpcproxy/lease.go). That answer may be to a
// keepalive that etcd handled before the client's request left (by the
// proxy's latency to the cluster, or longer if the proxy's process
// stalls), so a Store cannot bound when etcd last extended its lease, and
// the clock model of "Leases and renewal" does not hold. What it costs in
// practice, measured through a proxy in front of one member on loopback:
//
//   - Renewals wait for the proxy's schedule. At TTL 15s a holder logged
//     "lease keepalive stream failed; reopening" every 5s (2.5s at TTL
//     6s): the Store's stall timeout passed without an answer, and the
//     reopened stream was answered 0.3-0.5s later; it kept its lock. With 400ms of latency each way between
//     the proxy and the cluster, a holder at TTL 6s stepped down at its
//     renew deadline with no fault in 6 of 8 runs.
//   - An acquire by a Store whose lease already exists waits for a
//     keepalive answer: a waiter took over 1.5-2.0s after a release in 5
//     of 6 runs at TTL 6s (1ms in the other), instead of milliseconds. At
//     TTL 3s the proxy answered each keepalive 1.5s after it was sent,
//     more than the lease's headroom of 1s: after the proxy was paused for
//     2s, a Lock waited for a fresh enough answer until its context ended
//     (20s) in 3 of 14 runs; it now fails at once, saying so.
//   - The proxy keeps a lease alive for up to a lease TTL after the last
//     request of a client whose stream stays open (a frozen process), on
//     top of the lease's own TTL (from its source; not measured).
//   - It answers MemberList itself, with its own address and no header,
//     whatever the state of the cluster behind it: Open then asks for the
//     status of the member behind it (see Open).
//
// A proxy killed under a holder, or the member behind it killed, ended
// the holder's lease at its renew deadline (2.0s at TTL 3s) and before a
// standby connected to the member acquired. The proxy's --namespace
// prefixes keys verbatim: with --namespace=/svc-a/ and the default prefix,
// a lock's claim is /svc-a//baton/locks/NAME. To keep two services apart
// without a proxy, give each its own prefix (WithPrefix, the CLI's
// --app). IsGRPCProxy tells a proxy from a member, as baton doctor does;
// OpenStore warns when its endpoints are a proxy.
//
// # Goroutines
//
// A Store runs a session goroutine (keepalives, verification, clean-up),
// one goroutine per open keepalive stream, one per lock with an open Watch
// (in fair mode, until a second after the last one ended)
// and one per Observe, plus short-lived ones for background requests
// (the deletions of expired claims' keys: at most 16 at once, however many
// claims expired together, as after an outage).
// Close ends them all and waits for them. The etcd client's own goroutines
// end when the client is closed.
package etcdstore
