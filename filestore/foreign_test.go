//go:build linux || darwin

package filestore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
)

// otherKernel returns a Store on dir as a process on another machine
// sharing the directory would have it: another boot ID, and a machine
// clock of its own.
func otherKernel(t *testing.T, dir string) *Store {
	s := newStore(t, dir, newFakeClock())
	s.bootID = "boot-of-another-machine"
	return s
}

// A claim of another boot is taken as expired: a Store cannot tell one
// made before a reboot from one of another machine that shares the
// directory. Its own claim found taken by one tells: the loss also reports
// the misconfiguration, and the Store stops taking and removing locks.
func TestClaimTakenByAnotherKernel(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	here, there := newStore(t, dir, clk), otherKernel(t, dir)
	renewed := mustAcquire(t, here, "job", req("here", "n1", time.Hour))
	released := mustAcquire(t, here, "report", req("here", "n2", time.Hour))
	mustAcquire(t, here, "free", req("here", "n3", time.Hour))

	// The hole this detects, not prevents: the other machine takes live
	// claims as expired ones.
	mustAcquire(t, there, "job", req("there", "m1", time.Minute))
	mustAcquire(t, there, "report", req("there", "m2", time.Minute))

	_, err := here.Renew(bg, renewed)
	wantForeign(t, err, backend.ErrLost)
	wantForeign(t, here.Release(bg, released), backend.ErrLost)
	_, err = here.TryAcquire(bg, "other", req("here", "n4", time.Hour))
	wantForeign(t, err, backend.ErrMisconfigured)
	wantForeign(t, here.Remove(bg, "other"), backend.ErrMisconfigured)

	// Claims of this Store's that were not taken are kept and released.
	if err := here.Release(bg, backend.Grant{Key: "free", Holder: "here", Nonce: "n3", Token: 1, TTL: time.Hour}); err != nil {
		t.Fatalf("Release of a claim nobody took: %v", err)
	}
	// Another Store of this machine has not seen it (yet).
	if _, err := newStore(t, dir, clk).TryAcquire(bg, "other", req("x", "n5", time.Hour)); err != nil {
		t.Fatalf("TryAcquire on a Store that found nothing: %v", err)
	}
}

// A claim of another boot found expired by a Store of this machine is the
// reboot case: taking it says nothing about the directory.
func TestClaimOfEarlierBootTakenWithoutError(t *testing.T) {
	dir, clk := t.TempDir(), newFakeClock()
	mustAcquire(t, otherKernel(t, dir), "job", req("before", "m1", time.Hour))
	here := newStore(t, dir, clk)
	g := mustAcquire(t, here, "job", req("after", "n1", time.Hour))
	if _, err := here.Renew(bg, g); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := here.Release(bg, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func wantForeign(t *testing.T, err, target error) {
	t.Helper()
	wantErr(t, err, target, "another machine uses the directory")
	if !errors.Is(err, backend.ErrMisconfigured) {
		t.Fatalf("err = %v, want it to match backend.ErrMisconfigured", err)
	}
	if !strings.Contains(err.Error(), "boot-of-another-machine") {
		t.Fatalf("err = %v, want it to name the other boot", err)
	}
}

// An elector whose term is taken by another machine's process stops with
// the misconfiguration instead of campaigning again: its next claim would
// be taken as expired there too, and so on for ever.
func TestElectorStopsWhenAnotherKernelTakesItsTerm(t *testing.T) {
	dir := t.TempDir()
	here := newStore(t, dir, nil)
	el, err := baton.NewElector(here, "leader", baton.WithTTL(2*time.Second), baton.WithRenewDeadline(time.Second),
		baton.WithRetryPeriod(200*time.Millisecond), baton.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	leading := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(ctx context.Context, _ *baton.Lease) error {
			leading <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-leading:
	case err := <-done:
		t.Fatalf("Run = %v before leading", err)
	}
	mustAcquire(t, otherKernel(t, dir), "leader", req("there", "m1", time.Hour))
	err = <-done
	if !errors.Is(err, backend.ErrMisconfigured) || ctx.Err() != nil {
		t.Fatalf("Run = %v (context: %v), want an error matching backend.ErrMisconfigured before the test's deadline", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "another machine uses the directory") {
		t.Fatalf("Run = %v, want it to name the cause", err)
	}
}
