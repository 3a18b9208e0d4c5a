package safety

import "testing"

// TestSafetySemaphore runs the pause and the crash of a holder with every
// contender locking through a baton.Semaphore instead of a Mutex, on the
// file, Redis and etcd backends. A Semaphore of limit n is n slot locks;
// the register judges one lock, so the rows use limit 1 (one slot,
// name.slot-0), which puts the Semaphore's own acquiring and waiting (its
// attempts over the slots, its merged watch, TryAcquire for the pollers)
// under the faults with every check of the Mutex rows: 0 stale writes
// accepted, no token granted twice or going backwards, a takeover only
// after the holder's claim could have ended. That slots are independent
// locks under contention is batontest's Exclusive/Semaphore.
func TestSafetySemaphore(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(*testing.T) *backendEnv
	}{
		{"file", fileEnv},
		{"redis", redisEnv},
		{"etcd", etcdEnv},
	} {
		t.Run(be.name, func(t *testing.T) {
			env := be.open(t)
			for _, fault := range []string{faultStop, faultKill} {
				runSemaphore(t, env, fault, false)
			}
			if be.name == "etcd" { // plain mode above, the default below
				t.Run("fair_mode", func(t *testing.T) {
					for _, fault := range []string{faultStop, faultKill} {
						runSemaphore(t, env, fault, true)
					}
				})
			}
		})
	}
}

// runSemaphore is runScenario with contenders that lock through a
// Semaphore, on a lock name of their own.
func runSemaphore(t *testing.T, be *backendEnv, fault string, fair bool) {
	t.Helper()
	sc := scenario{fault: fault, rounds: rounds(), semaphore: true, fair: fair}
	sc.lock = "safety-semaphore-" + map[string]string{faultStop: "sigstop", faultKill: "kill"}[fault]
	if fair {
		sc.variant, sc.lock = "Semaphore, fair mode", sc.lock+"-fair"
	}
	t.Run(fault, func(t *testing.T) {
		newHarness(t, be, sc).run()
	})
}
