// Package batonlock lets client-go's leader election, and so a
// controller-runtime manager, elect its leader on any backend.Backend: etcd,
// Redis, baton's Kubernetes Lease store, a file on one machine.
//
// A Lock implements k8s.io/client-go/tools/leaderelection/resourcelock's
// Interface. The package is called batonlock, not resourcelock, so that it
// can be imported beside client-go's resourcelock without renaming, and
// reads as what it is at the call site:
//
//	store, err := redisstore.New(redisClient)
//	lock, err := batonlock.New(store, "my-operator", podName+"_"+uuid)
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
//		LeaderElection:                      true,
//		LeaderElectionResourceLockInterface: lock,
//		LeaderElectionReleaseOnCancel:       true,
//	})
//
// With LeaderElectionResourceLockInterface set, controller-runtime ignores
// LeaderElectionID, LeaderElectionNamespace and LeaderElectionResourceLock;
// LeaseDuration, RenewDeadline and RetryPeriod still drive client-go's
// LeaderElector.
//
// # How client-go's calls map onto the backend
//
// client-go's LeaderElector reads the record (Get), judges it on its own,
// and then writes a whole new record (Create or Update). Its own Lease lock
// makes that write conditional on the resourceVersion the Get returned.
// baton's backends have no "write this record if unchanged" operation;
// they have acquire, renew and release, each atomic. A Lock therefore
// reads Update's record as an intention and performs the matching atomic
// operation, for its own identity only:
//
//	client-go call                    backend operation
//	Get                               Backend.Get
//	Create (record names me)          Backend.TryAcquire
//	Update (names me, I hold a claim) Backend.Renew of that claim
//	Update (names me, I hold none)    Backend.TryAcquire
//	Update (names nobody: release)    Backend.Release of my claim, if any
//	Update/Create (names another)     refused
//
// Every write is conditional in the backend: TryAcquire succeeds only if
// the lock is free or its claim expired as the backend judges it (server
// expiry on etcd and Redis, local observation on Kubernetes objects),
// Renew and Release only if the claim is still this Lock's (holder and a
// per-acquisition nonce). A Lock never writes a record client-go built.
//
// So a Get/Update pair means less than with client-go's own lock: Get is
// advice, and the condition of the write is the backend's current state,
// not "unchanged since my Get". A contender whose Get saw a free lock still
// fails if someone else took it meanwhile (the error matches
// backend.ErrHeld); a leader whose claim was taken away fails its Update
// (backend.ErrLost) and client-go steps down at its RenewDeadline.
//
// Get shows the holder only while the backend judges the claim valid; an
// expired claim shows an empty HolderIdentity, so that client-go does not
// add its own expiry wait (LeaseDuration of an unchanged record, on its
// local clock) to the backend's. A valid claim under this Lock's identity
// that it does not hold (a lost reply to an acquire, or a second process
// misconfigured with the same identity) is shown with its nonce appended,
// so that client-go does not believe it leads. The raw record client-go
// compares to
// notice changes carries the backend's version, token and renew time, so
// every renewal changes it.
//
// # Timing: client-go's, not baton's
//
// client-go's LeaderElector owns the timing: it renews every RetryPeriod
// and stops leading once no renew succeeded for RenewDeadline. baton's
// engine (Mutex, Elector, Lease) is not involved, so its guarantees about
// when a holder stops do not apply; client-go's do. The backend's TTL is
// the LeaseDuration client-go passes in the record, which client-go
// rounds down to whole seconds (int(LeaseDuration / time.Second)): a
// LeaseDuration of 2.9s is a TTL of 2s. A leader whose last successful
// renew was sent at S stops by about S + RetryPeriod + RenewDeadline (each
// renew attempt is bounded by the renew deadline), and the backend keeps
// its claim until at least S + TTL. So keep
//
//	RetryPeriod + RenewDeadline + a safety margin < TTL
//
// with TTL the LeaseDuration rounded down to whole seconds; give a whole
// number of seconds to leave no doubt. (client-go's defaults 2s + 10s <
// 15s leave 3s; the tests use 0.2s + 1.5s < 2s. 0.2s + 2.5s < 2.9s is not
// enough: the TTL is 2s, and a cut-off leader could lead for 0.7s after
// its claim expired.) A claim lost to the backend (expired, force-released) is noticed
// at the next renew; the leader then keeps running its runnables until
// RenewDeadline, as with client-go's own lock. If at that point the lock
// is free, client-go's next Update acquires it again, with a new fencing
// token, and client-go never notices that the term was interrupted.
//
// With ReleaseOnCancel, client-go tries to release after its renewals
// gave up and before it tells its callbacks (controller-runtime stops its
// runnables only then). That release starts with a Get, which against an
// unreachable store would block for up to another RenewDeadline, long
// past the claim's end. So while the last renew of the claim held failed,
// Get fails at once without asking the backend: such a leader only needs
// to renew, which client-go does without a Get. The release is then
// skipped and the claim expires after its TTL.
//
// An acquire whose reply is lost (a timeout after the store applied it)
// leaves a claim this Lock does not know it holds; it is held by the same
// identity but another nonce, so the Lock cannot renew it and acquires
// again only after it expired.
//
// # Fencing tokens
//
// LeaderElectionRecord has no field for a fencing token, so client-go and
// controller-runtime never see it. Lock.Token returns the token of the
// claim currently held; runnables that write to a resource which checks
// tokens (see package fence) read it for each write.
//
// # What is not mapped
//
//   - LeaderElectionRecord's times and LeaderTransitions are shown from the
//     backend's record (times for people, never compared across machines);
//     those client-go sends are ignored.
//   - Coordinated leader election (client-go's LeaseCandidate, Strategy,
//     PreferredHolder) is not supported: it needs Kubernetes Lease objects
//     that a coordinator edits.
//   - RecordEvent logs through slog (WithLogger) instead of recording a
//     Kubernetes Event.
//   - A Lock over baton's Lease store and client-go's own LeaseLock on
//     the same Lease (same name and namespace) exclude each other: both
//     count a claim expired only once the Lease stayed unchanged for its
//     leaseDurationSeconds, and both write it only on the resourceVersion
//     they read. A Lease that client-go created is refused with a
//     *kubestore.ApplicationError unless the store was opened with
//     kubestore.WithAdoption; with it a manager moves from its LeaseLock
//     to a Lock one replica at a time, and back in a rollback
//     (TestMigrationFromLeaseLock). On etcd, Redis or a file the Lock's
//     lock is not that Lease: old and new replicas would both lead, so
//     stop every replica on the LeaseLock before the first one on the
//     Lock starts.
package batonlock
