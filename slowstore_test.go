package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
)

// A store that answers, but slower than the timings allow (a store in
// another region with a TTL of a few of its round trips), makes the holder
// step down: the step-down names how long the store took and the TTL that
// would work, not only a renew without an answer, which reads as a store
// that does not answer.
func TestStepDownNamesSlowStore(t *testing.T) {
	b := newScript()
	b.renewBlock = make(chan struct{}) // the renew's answer never comes in time
	clk := clocktest.NewFakeClock(t0)
	slow := &slowGrant{script: b, clk: clk, late: []time.Duration{4 * time.Second}} // retry period 2s
	m, err := baton.NewMutex(slow, "jobs.nightly", baton.WithClock(clk), baton.WithIdentity("me"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	awaitTimer(t, clk)
	clk.Step(time.Second) // +5s: the renew is sent
	<-b.renews
	awaitTimer(t, clk)
	clk.Step(5 * time.Second) // +10s: the renew deadline
	waitClosed(t, l.Done(), "lease at the renew deadline")
	err = l.Err()
	if !errors.Is(err, baton.ErrStepDown) || !strings.Contains(err.Error(), "the acquire took 4s") || !strings.Contains(err.Error(), "a TTL of at least 40s") {
		t.Fatalf("cause = %v, want a step-down naming the acquire's 4s and a TTL of 40s", err)
	}
}

// A grant refused as late names the store's slowness and the fix too: at
// a round trip past the renew deadline no acquire is ever handed out.
func TestLateGrantNamesSlowStore(t *testing.T) {
	b := newScript()
	clk := clocktest.NewFakeClock(t0)
	slow := &slowGrant{script: b, clk: clk, late: []time.Duration{1500 * time.Millisecond}}
	m, err := baton.NewMutex(slow, "jobs.nightly", baton.WithClock(clk), baton.WithIdentity("me"), baton.WithTTL(time.Second), quiet)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.TryLock(context.Background())
	if !errors.Is(err, baton.ErrUnavailable) || !strings.Contains(err.Error(), "not before the renew deadline") ||
		!strings.Contains(err.Error(), "the acquire took 1.5s") || !strings.Contains(err.Error(), "a TTL of at least 15s") {
		t.Fatalf("TryLock answered after 1.5s with TTL 1s: err = %v, want the refusal naming the acquire's 1.5s and a TTL of 15s", err)
	}
}

// A renew that succeeds but takes longer than the retry period is warned
// of once per lease, naming the round trip and the fix: the warnings that
// renewals had no answer alone blame a store that answers.
func TestSlowRenewWarnedOnce(t *testing.T) {
	b := newScript()
	logs := &lines{}
	obs, ev := events()
	m, clk := newMutex(t, b, obs, baton.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	l, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	for i, toRenew := range []time.Duration{5 * time.Second, 2 * time.Second} { // renews sent at +5s, +10s
		block := make(chan struct{})
		b.mu.Lock()
		b.renewBlock = block
		b.mu.Unlock()
		awaitTimer(t, clk)
		clk.Step(toRenew) // the renew is sent
		<-b.renews
		awaitTimer(t, clk)
		clk.Step(3 * time.Second) // answered 3s later, past the retry period (2s)
		close(block)
		next(t, ev, baton.EventRenewed)
		if l.Err() != nil {
			t.Fatalf("renew %d: lease ended: %v", i, l.Err())
		}
	}
	out := logs.String()
	if n := strings.Count(out, "the store answers too slowly"); n != 1 || !strings.Contains(out, "a renew took 3s") || !strings.Contains(out, "a TTL of at least 30s") {
		t.Fatalf("log after two renews of 3s:\n%s\nwant one warning naming the 3s round trip and a TTL of 30s", out)
	}
}

// silentRelease is a script whose Release is never answered: it returns
// when its context ends, with the context's error, as a network store's
// client does when the server is silent or far away.
type silentRelease struct{ *script }

func (silentRelease) Release(ctx context.Context, g backend.Grant) error {
	<-ctx.Done()
	return fmt.Errorf("release lock %q: %w", g.Key, ctx.Err())
}

// An Unlock whose context was live when it began, and whose deadline
// passed while the store did not answer, blames the store and not the
// caller: it said the context given to Unlock had ended and to pass
// context.WithoutCancel(ctx), advice for a cancelled context, which baton
// lock and run (a fresh 5 s context) printed over a silent link.
func TestUnlockDeadlineWhileStoreSilentBlamesTheStore(t *testing.T) {
	m, _ := newMutex(t, silentRelease{newScript()})
	l, err := m.TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = l.Unlock(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the store did not answer the release") ||
		!strings.Contains(err.Error(), "may stay held until its TTL (15s)") || strings.Contains(err.Error(), "WithoutCancel") {
		t.Fatalf("Unlock with the store silent past its deadline = %v; want it to say the store did not answer, and no advice for a cancelled context", err)
	}
}
