//go:build linux

package safety

import (
	"fmt"
	"strings"
	"testing"
)

// rounds is how many times each scenario injects its fault.
func rounds() int {
	if long() {
		return 4
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
	sc.lock = fmt.Sprintf("safety-%s", strings.ToLower(strings.NewReplacer("_", "-").Replace(name)))
	t.Run(name, func(t *testing.T) {
		newHarness(t, be, sc).run()
	})
}

// TestSafety runs every backend under every fault it supports: a paused
// holder (SIGSTOP past the TTL) whose late write must be refused, a killed
// holder, a holder partitioned from the store, a store restart, clock rate
// drift and API throttling.
func TestSafety(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		be := fileEnv(t)
		runScenario(t, be, scenario{fault: faultStop})
		runScenario(t, be, scenario{fault: faultKill})
	})
	t.Run("redis", func(t *testing.T) {
		be := redisEnv(t)
		runScenario(t, be, scenario{fault: faultStop})
		runScenario(t, be, scenario{fault: faultKill})
		runScenario(t, be, scenario{fault: faultPartition})
		runScenario(t, be, scenario{fault: faultRestart})
		if long() {
			runScenario(t, be, scenario{fault: faultDrift, rates: driftRates})
		}
	})
	t.Run("etcd", func(t *testing.T) {
		be := etcdEnv(t)
		runScenario(t, be, scenario{fault: faultStop})
		runScenario(t, be, scenario{fault: faultKill})
		runScenario(t, be, scenario{fault: faultPartition})
		runScenario(t, be, scenario{fault: faultRestart})
		if long() {
			runScenario(t, be, scenario{fault: faultDrift, rates: driftRates})
		}
	})
	t.Run("lease", func(t *testing.T) {
		be := leaseEnv(t, "lease")
		runScenario(t, be, scenario{fault: faultStop})
		runScenario(t, be, scenario{fault: faultKill})
		runScenario(t, be, scenario{fault: faultPartition})
		runScenario(t, be, scenario{fault: faultDrift, rates: driftRates})
		be.throttle(throttleFraction)
		defer be.throttle(0)
		runScenario(t, be, scenario{fault: faultThrottle})
	})
	t.Run("redlock", func(t *testing.T) {
		be := redlockEnv(t)
		runScenario(t, be, scenario{fault: faultStop})
		runScenario(t, be, scenario{fault: faultKill})
		runScenario(t, be, scenario{fault: faultPartition})
		runScenario(t, be, scenario{fault: faultRestart})
	})
}

// driftRates are the contenders' clock rates in the drift scenarios: one
// slow and one fast by 1%, inside the default safety margin (2% of the
// TTL, at least 50ms: 2.5% of a 2s TTL).
var driftRates = []float64{0.99, 1.0, 1.01}

// throttleFraction of the API requests are answered 429.
const throttleFraction = 0.1
