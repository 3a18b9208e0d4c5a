package clocktest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The zero FakeClock reads the zero time and runs timers; it panicked
// ("close of nil channel") at its first timer.
func TestZeroFakeClock(t *testing.T) {
	var clk clocktest.FakeClock
	if !clk.Now().IsZero() {
		t.Fatalf("Now = %v, want the zero time", clk.Now())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	armed := make(chan error, 1)
	go func() { armed <- clk.AwaitWaiters(ctx, func(n int) bool { return n == 1 }) }()
	tm := clk.NewTimer(time.Second)
	if err := <-armed; err != nil {
		t.Fatalf("AwaitWaiters: %v", err)
	}
	clk.Step(time.Second)
	if got := <-tm.C(); !got.Equal(time.Time{}.Add(time.Second)) {
		t.Fatalf("timer fired at %v, want a second after the zero time", got)
	}
}

// Readings carry no monotonic part, as the doc says, even for a clock set
// from time.Now (whose monotonic reading the clock used to keep).
func TestFakeClockReadingsHaveNoMonotonicPart(t *testing.T) {
	clk := clocktest.NewFakeClock(time.Now())
	clk.Step(time.Second)
	if now := clk.Now(); now != now.Round(0) {
		t.Fatalf("NewFakeClock(time.Now()).Now() = %v, carries a monotonic reading", now)
	}
	clk.SetTime(time.Now())
	if now := clk.Now(); now != now.Round(0) {
		t.Fatalf("after SetTime(time.Now()), Now() = %v, carries a monotonic reading", now)
	}
}
