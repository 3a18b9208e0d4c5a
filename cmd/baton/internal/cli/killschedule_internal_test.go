package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/supervise"
	"github.com/baton-go/baton/memstore"
)

// unreachable is a store whose renewals fail: the holder steps down at the
// renew deadline, while its claim is still valid until S + TTL - margin.
type unreachable struct{ *memstore.Store }

func (unreachable) Renew(context.Context, backend.Grant) (backend.Grant, error) {
	return backend.Grant{}, errors.New("store unreachable")
}

// startStubborn starts the test binary as a CMD that ignores SIGTERM (see
// TestMain in main_test.go) and waits until it is ready.
func startStubborn(t *testing.T) *supervise.Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "test-stubborn")
	cmd.Env = append(os.Environ(), "BATON_CLI_TEST_ROLE=cli", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := supervise.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("CMD said %q, %v", line, err)
	}
	return c
}

// The kill schedule: when the lease ends at the renew deadline, CMD gets
// SIGTERM, and SIGKILL at the validity end minus the lead: never before
// (timers do not fire early), and before the validity ends unless this
// machine fires timers late by more than the lead (measured beside it).
func TestKillScheduleBeforeValidityEnd(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mu, err := baton.NewMutex(unreachable{memstore.New()}, "sched",
		baton.WithTTL(ttl), baton.WithRenewDeadline(500*time.Millisecond), baton.WithRetryPeriod(100*time.Millisecond), baton.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	c := startStubborn(t)
	lead := max(baton.DefaultSafetyMargin(ttl), 100*time.Millisecond)
	// A probe timer for the same instant measures how late this machine
	// fires timers now: the kill cannot be expected to be less late.
	sched := l.ValidUntil().Add(-lead)
	probe := make(chan time.Time, 1)
	time.AfterFunc(time.Until(sched), func() { probe <- time.Now() })
	s := &supervisor{log: log, lead: lead}
	code, stopped := s.supervise(l.Context(), l, c)
	if !stopped || code != 137 {
		t.Fatalf("supervise = %d, %v; want 137 (SIGKILL), stopped", code, stopped)
	}
	validUntil, killedAt := l.ValidUntil(), c.KilledAt()
	t.Logf("SIGKILL %v before the validity end", validUntil.Sub(killedAt).Round(time.Millisecond))
	if killedAt.Before(validUntil.Add(-lead)) {
		t.Errorf("SIGKILL %v before the scheduled time (validity end - %v)", validUntil.Add(-lead).Sub(killedAt), lead)
	}
	late := (<-probe).Sub(sched)
	if !killedAt.Before(validUntil) && killedAt.Sub(sched) > 2*late+50*time.Millisecond {
		t.Errorf("SIGKILL %v after the validity end, %v after its scheduled time, while a timer for that time fired %v late",
			killedAt.Sub(validUntil), killedAt.Sub(sched), late)
	}
	if !errors.Is(l.Err(), backend.ErrLost) {
		t.Errorf("lease ended with %v, want ErrLost", l.Err())
	}
}

// A lease whose validity end has passed when the loss is noticed (the
// process was paused) gets SIGKILL at once, without a SIGTERM grace.
func TestKillAtOnceAfterValidityEnd(t *testing.T) {
	t.Parallel()
	c := startStubborn(t)
	s := &supervisor{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	start := time.Now()
	s.stopChild(c, start.Add(-time.Second), errors.New("paused"))
	// The child ignores SIGTERM: it exited because stopChild itself sent
	// SIGKILL before it returned, not at a later time.
	if !c.Exited() || c.KilledAt().IsZero() {
		t.Fatal("CMD not killed by the time stopChild returned")
	}
	t.Logf("SIGKILL %v after the call", c.KilledAt().Sub(start))
}
