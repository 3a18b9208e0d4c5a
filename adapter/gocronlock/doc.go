// Package gocronlock runs gocron (github.com/go-co-op/gocron/v2) jobs once
// across replicas, on any backend.Backend.
//
// gocron offers two hooks for schedulers running the same jobs on several
// replicas, and this package implements both:
//
//   - Elector (gocron.WithDistributedElector): all jobs run on one replica,
//     the leader of a baton.Elector; the others skip every run until they
//     lead. Leadership ends before the claim can expire in the store, so
//     two schedulers never both pass the leader check at once. The check
//     is made when a run fires, so across a handover one slot can run on
//     both sides: the old leader's run fired before its term ended, and the
//     new leader's timer for the same slot fired late (a loaded machine)
//     after its term began. Use the Locker (with WithMinHold) where a slot
//     must never run twice.
//   - Locker (gocron.WithDistributedLocker or WithDistributedJobLocker):
//     every run of a job takes that job's baton.Mutex first; a scheduler
//     that finds it held skips the run. Work spreads over replicas, but a
//     job that ends faster than the skew between the schedulers' timers can
//     run twice for one slot unless WithMinHold keeps the lock a little
//     longer.
//
// With an Elector:
//
//	el, err := baton.NewElector(store, "billing-scheduler")
//	elector := gocronlock.NewElector(el)
//	done := make(chan error, 1)
//	go func() { done <- elector.Run(ctx) }()
//	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
//	...
//	<-ctx.Done()
//	_ = s.Shutdown()
//	<-done // Run has released the lock: close the store, exit
//
// Wait for Run to return before closing the store or exiting: it releases
// the lock after ctx ends, and a process that exits first leaves the lock
// held until its TTL ends, so the standby waits that long to take over.
//
// With a Locker:
//
//	locker, err := gocronlock.NewLocker(store, gocronlock.WithPrefix("billing."),
//		gocronlock.WithMinHold(time.Second))
//	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	_, err = s.NewJob(gocron.CronJob("0 3 * * *", false), gocron.NewTask(report),
//		gocron.WithName("nightly-report")) // the lock is "billing.nightly-report"
//
// # Job names are lock names
//
// gocron passes the job's name to the Locker; the lock name is the prefix
// plus that name and must be a valid baton lock name (lower-case letters,
// digits, '-' and '.'; see backend.ValidateName). gocron's default name is
// the function's name ("main.report", "github.com/acme/jobs.Report"),
// which is not: give every distributed job a name with gocron.WithName. A
// bad name makes every run of the job fail to lock, and gocron treats a
// lock error as "skip", so the job would silently never run; the Locker
// logs such errors at Error level, and Locker.LockName checks a name at
// startup.
//
// # What is and is not guaranteed
//
// Both hooks decide when a run starts. Neither stops a run that is under
// way: gocron asks the Elector only before each run, and a job's lease may
// be lost while it runs (the Locker renews it in the background, like any
// baton lease). A job whose writes must not outlive the lock passes a
// fencing token to the resource it writes to: the Token of the Lease that
// Elector.Term returned when the job started (nil if the term already
// ended: skip the run then; call Term once, not for each write). A
// skipped run is not retried: if the store is unreachable, the slot is
// lost, never run twice.
package gocronlock
