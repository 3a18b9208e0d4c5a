package batonlock_test

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The managers, control plane, stores and clients the tests start are all
// stopped by them, so no goroutine may remain: a stopped
// controller-runtime manager and closed client-go clients leave none that
// goleak sees, and nothing needs ignoring.
func TestMain(m *testing.M) {
	// controller-runtime complains on stderr if its global logger is never
	// set; the managers in these tests get their own logger.
	ctrllog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m)
}
