package schedule_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/schedule"
)

type requestKey struct{}

// ctxHandler records every log line, and those whose context did not carry
// requestKey's value, as a handler that adds a trace ID from the context
// would miss it.
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
	if ctx.Value(requestKey{}) != "svc-1" {
		h.missing = append(h.missing, r.Message)
	}
	return nil
}

// The scheduler's lines, and those of its slot locks, reach the handler
// with Run's context, so that a handler can add values from it.
func TestLogsWithRunsContext(t *testing.T) {
	env := newFakeEnv(t0)
	rec := newRecorder()
	h := &ctxHandler{}
	s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe), schedule.WithLogger(slog.New(h)))
	if err := s.Add("report", "* * * * *", func(context.Context, schedule.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), requestKey{}, "svc-1"))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	awaitWaiters(t, env.wall, 1)
	env.wall.Step(time.Minute)
	rec.expect(t, t0.Add(time.Minute), schedule.Ran)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Contains(h.lines, "schedule: job ran") {
		t.Errorf("no line %q; logged: %q", "schedule: job ran", h.lines)
	}
	if len(h.missing) > 0 {
		t.Errorf("lines logged without Run's context (its values lost to the handler): %q", h.missing)
	}
}
