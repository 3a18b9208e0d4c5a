package batonlock_test

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// controller-runtime warns on stderr (from a goroutine of its own) if
	// its global logger is never set; the managers in these tests get
	// their own logger, this only silences that warning.
	ctrllog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m, leakOptions()...)
}

// leakOptions lists the goroutines that outlive a stopped
// controller-runtime manager and client-go clients by design. Each is a
// process-wide singleton of a dependency, not something a Lock or a test
// started and forgot.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		// klog's flush daemon, started by klog's init.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}
