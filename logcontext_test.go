package baton_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

type requestKey struct{}

// ctxHandler records every log line, and those whose context did not carry
// requestKey's value, as a handler that adds a trace ID from the context
// (an OpenTelemetry bridge) would miss it.
type ctxHandler struct {
	mu      sync.Mutex
	lines   []string
	missing []string
}

func (h *ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *ctxHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *ctxHandler) WithGroup(string) slog.Handler            { return h }

func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, r.Message)
	if ctx.Value(requestKey{}) != "req-1" {
		h.missing = append(h.missing, r.Message)
	}
	return nil
}

// check fails t unless every line in want was logged, each with the
// caller's context values.
func (h *ctxHandler) check(t *testing.T, want ...string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range want {
		if !slices.Contains(h.lines, w) {
			t.Errorf("no line %q; logged: %q", w, h.lines)
		}
	}
	if len(h.missing) > 0 {
		t.Errorf("lines logged without the context of the call they are about (its values lost to the handler): %q", h.missing)
	}
}

// The lines of a Lock and of its Lease reach the handler with the context
// given to Lock (the Lease's context keeps its values), so that a handler
// can add values from it, such as a trace ID.
func TestMutexLogsWithCallersContext(t *testing.T) {
	h := &ctxHandler{}
	b := &flaky{script: newScript(), failures: 1}
	m, clk := newMutex(t, b, baton.WithLogger(slog.New(h)))
	ctx := context.WithValue(context.Background(), requestKey{}, "req-1")
	got := make(chan *baton.Lease, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	awaitTimer(t, clk)
	clk.Step(2200 * time.Millisecond) // past the jittered retry period
	l := <-got
	if l == nil {
		return
	}
	b.set("thief") // the next renew finds the claim taken
	awaitTimer(t, clk)
	clk.Step(5 * time.Second)
	waitClosed(t, l.Done(), "lease whose renew was rejected")
	_ = l.Unlock(ctx)

	b.set("")
	l, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h.check(t, "baton: acquire failed; retrying", "baton: the store answers again", "baton: lock lost", "baton: released")
}

// An Elector's lines reach the handler with Run's context.
func TestElectorLogsWithRunsContext(t *testing.T) {
	h := &ctxHandler{}
	b := newScript()
	b.set("other")
	e, clk := newElector(t, b, baton.WithLogger(slog.New(h)))
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), requestKey{}, "req-1"))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
			cancel()
			<-ctx.Done()
			return nil
		})
	}()
	awaitTimer(t, clk) // the campaign waits, the lock held by "other"
	b.set("")
	clk.Step(2200 * time.Millisecond)
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	h.check(t, "baton: new leader", "baton: started leading", "baton: stopped leading")
}
