// Package schedule runs cron jobs so that each scheduled slot runs once
// across the replicas of a service, on any baton backend.
//
//	s, err := schedule.New(store, ledger)
//	err = s.Add("nightly-report", "0 3 * * *", report,
//		schedule.LockAtMostFor(time.Hour), schedule.LockAtLeastFor(time.Minute))
//	err = s.Run(ctx)
//
// Every replica runs the same Scheduler with the same jobs, the same lock
// backend and the same Ledger.
//
// # How a slot is run
//
// A slot is one time a cron spec fires (for "0 3 * * *", 03:00:00 UTC of
// each day). When this replica's wall clock reaches a slot, the replica:
//
//  1. tries once to take the slot's lock, named "<job>.<slot in UTC>" (see
//     LockName), and skips the slot if another owner holds it;
//  2. asks the Ledger whether the slot is done, and skips it if so (or if
//     the ledger cannot answer);
//  3. runs the job under the lock's context, bounded by LockAtMostFor;
//  4. if the job returned nil, records the slot in the ledger (retrying a
//     few times), still holding the lock (if the lock was lost while the
//     job ran and the job still returned nil, the work is done: the slot
//     is recorded anyway and a warning logged);
//  5. keeps the lock until LockAtLeastFor after the slot time, then
//     releases it, and removes the lock's record, whatever the run's
//     outcome (see Lock records).
//
// # Guarantees
//
// At most once per slot, while the ledger keeps its data: a replica that
// reaches a slot late (it started late, was busy, or its wall clock is
// behind) finds the lock held or the slot recorded, and does not run it
// again. Two limits, as for every lease:
//
//   - A job that does not stop when its context ends (or a process paused
//     past its lease, in a long GC or a SIGSTOP) can overlap with a second
//     run of the same slot by a replica that took the lock after the lease
//     expired and found no record yet. Fence the job's writes with
//     Run.Token against Run.Lock (tokens are per lock, hence per slot), or
//     do its database work inside fence.RunLog.Exec for the slot, which
//     commits the work and the slot's record together.
//   - If Record fails after the job ran, the slot is not recorded, and a
//     replica that reaches it after the lock was released runs it again:
//     one whose wall clock is behind by more than LockAtLeastFor, or one
//     catching up (CatchUp). The same holds when a ledger loses records.
//     The run is reported as Unrecorded and logged as an error.
//
// At least once, unless every replica misses the slot: a slot is attempted
// by each replica whose wall clock reaches it while the replica runs and
// is not busy with an earlier run of the same job. It is not run when
// every replica was down, busy, or could not reach the lock store or the
// ledger at that time (with CatchUp, a replica attempts missed slots when
// it starts or becomes free). A run that fails (the job returned an error)
// is not retried by other replicas: they find the lock held or, after
// LockAtLeastFor, attempt the slot only if their own clock reaches it
// later (CatchUp can retry it at a replica's next start).
//
// # Clocks
//
// Each replica decides slot times with its own wall clock (WithClock;
// default the system clock): slots are wall-clock times, and nothing else
// can define "03:00". Replicas whose clocks differ by some seconds each
// reach a slot at a different true time; the lock and the ledger make the
// first one run it and the others skip it. A replica whose clock is behind
// by more than LockAtLeastFor relies on the ledger alone.
//
// The locks are baton's: their validity is measured on each process's
// monotonic clock and never compared across machines (see baton.Lease).
// LockAtMostFor and waits are timers on the scheduler's clock; the wall
// clock is read again at least once a minute, so a step of the wall clock
// (NTP, an administrator) is noticed within a minute. Slots that a forward
// step jumps over count as missed; after a backward step, slots already
// handled are not attempted again by this replica.
//
// Specs without a CRON_TZ= prefix are read in UTC unless WithLocation says
// otherwise; give every replica the same location. CRON_TZ=Local reads a
// spec in the process's local zone (TZ, else /etc/localtime), which must
// then be the same on every replica. Slots of "@every d" are
// the multiples of d since the Unix epoch, so that replicas agree on them.
//
// In a zone with daylight saving time, a spec that names times of day (its
// hour field is not every hour, as in "30 2 * * *") runs each of them once
// on the days the zone changes its offset, much as cron(8) does: a time
// the clock passes twice when it falls back runs at its first occurrence
// only, and a time the clock skips when it springs forward runs when the
// skip ends (at 03:00 for a 02:30 job in Europe; times skipped together
// run once, together). A spec whose hour field is every hour
// ("*/15 * * * *", "@hourly") follows the clock: a skipped hour has no
// slots and a repeated hour has its slots twice, each an hour of real
// time. Replicas agree on these slots when their time zone databases agree
// on the change.
//
// # Lock records
//
// Every slot has a lock of its own. Where the backend can delete a free
// lock's record (backend.Remover: every backend of this module, filestore
// included), the replica that held a slot's lock removes its record after
// releasing it, whether the job ran, failed or was found done, so that the
// store does not keep a record per run for ever. That changes nothing
// about which slots run, since the ledger, not the record, says whether a
// slot is done: a replica that reaches the slot later creates the record
// again, with a larger fencing token, finds the slot done in the ledger
// (or, after a failed run, runs it again, as it would with the record
// kept) and removes the record in turn. On Kubernetes it needs the delete verb on the lock's
// resource (a refusal is logged once as a warning, and the records stay);
// KeepSlotLocks turns removal off.
//
// Give a metrics observer to WithLockObserver, which names every slot's
// lock events after its job, rather than to the slot locks themselves:
// each slot's lock has a name of its own.
package schedule
