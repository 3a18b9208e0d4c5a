package logrbridge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/adapter/logrbridge"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/memstore"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
)

// The test's leases start renewal goroutines; all must end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sink collects funcr's lines.
type sink struct {
	mu    sync.Mutex
	lines []string
}

func (s *sink) write(prefix, args string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, prefix+" "+args)
}

// find returns the line containing every part, or "".
func (s *sink) find(parts ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
next:
	for _, l := range s.lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		return l
	}
	return ""
}

func TestBatonLinesReachLogr(t *testing.T) {
	var s sink
	log := funcr.New(s.write, funcr.Options{Verbosity: 4}).WithName("baton")
	store := memstore.New()
	m, err := baton.NewMutex(store, "report", baton.WithIdentity("worker-1"), baton.WithTTL(time.Second),
		baton.WithLogger(logrbridge.Logger(log).With("app", "billing")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// A Debug line (V(4)) with baton's attributes and the logger's.
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.find(`baton`, `"level"=4`, `"msg"="baton: released"`, `"lock"="report"`, `"holder"="worker-1"`, `"app"="billing"`); got == "" {
		t.Errorf("no V(4) line for the release; got:\n%s", strings.Join(s.lines, "\n"))
	}

	// A Warn line: the lock is taken away, the holder learns it at its
	// next renew and logs the loss at V(0), marked as a warning.
	l, err = m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ForceRelease(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	<-l.Done() // the lease ends at the next renew (TTL/3)
	if err := l.Unlock(ctx); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Unlock after a forced release: %v, want ErrLost", err)
	}
	if got := s.find(`"level"=0`, `"msg"="baton: lock lost"`, `"slog_level"="WARN"`, `"lock"="report"`); got == "" {
		t.Errorf("no marked V(0) line for the loss; got:\n%s", strings.Join(s.lines, "\n"))
	}
}

func TestVerbosityFilters(t *testing.T) {
	var s sink
	log := logrbridge.Logger(funcr.New(s.write, funcr.Options{Verbosity: 0}))
	log.Debug("hidden")
	log.Info("shown")
	log.Error("failed", "err", errors.New("boom"))
	if s.find("hidden") != "" || s.find(`"msg"="shown"`) == "" || s.find(`"msg"="failed"`, `"error"`) == "" {
		t.Errorf("at verbosity 0, want Info and Error but not Debug; got:\n%s", strings.Join(s.lines, "\n"))
	}
}

// Baton's log lines in a logr sink: here funcr printing to stdout; in a
// controller-runtime program, logrbridge.Logger(ctrl.Log.WithName("baton")).
func Example() {
	log := funcr.New(func(prefix, args string) { fmt.Println(prefix, args) }, funcr.Options{Verbosity: 4})
	m, err := baton.NewMutex(memstore.New(), "nightly-report",
		baton.WithIdentity("worker-1"),
		baton.WithLogger(logrbridge.Logger(log.WithName("baton"))))
	if err != nil {
		panic(err)
	}
	lease, err := m.TryLock(context.Background())
	if err != nil {
		panic(err)
	}
	_ = lease.Unlock(context.Background())
	// Output:
	// baton "level"=4 "msg"="baton: released" "lock"="nightly-report" "holder"="worker-1" "token"=1
}
