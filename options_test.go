package baton_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/memstore"
)

func TestOptionsRejectImpossibleTimings(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []baton.Option
		want string
	}{
		{"ttl below minimum", []baton.Option{baton.WithTTL(500 * time.Millisecond)}, "TTL 500ms is shorter than the minimum 1s"},
		// Beyond where the defaults' arithmetic (2/3 of the TTL) overflows.
		{"ttl above maximum", []baton.Option{baton.WithTTL(200 * 365 * 24 * time.Hour)}, "TTL 1752000h0m0s is longer than the maximum 8760h0m0s (a year)"},
		{"renew deadline equals ttl", []baton.Option{baton.WithRenewDeadline(15 * time.Second)}, "renew deadline 15s must be shorter than TTL 15s"},
		{"renew deadline above ttl", []baton.Option{baton.WithTTL(5 * time.Second), baton.WithRenewDeadline(10 * time.Second)}, "renew deadline 10s must be shorter than TTL 5s"},
		{"no room for margin", []baton.Option{baton.WithTTL(10 * time.Second), baton.WithRenewDeadline(9900 * time.Millisecond)}, "renew deadline 9.9s plus safety margin 200ms must be shorter than TTL 10s"},
		{"retry equals renew deadline", []baton.Option{baton.WithRetryPeriod(10 * time.Second)}, "retry period 10s must be shorter than renew deadline 10s (the default, 2/3 of the TTL)"},
		{"renew interval too long", []baton.Option{baton.WithRenewInterval(12 * time.Second)}, "renew interval 12s must be shorter than renew deadline 10s (the default, 2/3 of the TTL)"},
		{"set renew deadline, set interval", []baton.Option{baton.WithRenewDeadline(4 * time.Second), baton.WithRenewInterval(5 * time.Second)}, "renew interval 5s must be shorter than renew deadline 4s"},
		{"set retry, set deadline", []baton.Option{baton.WithTTL(time.Minute), baton.WithRenewDeadline(5 * time.Second), baton.WithRetryPeriod(8 * time.Second)}, "retry period 8s must be shorter than renew deadline 5s"},
		{"negative retry", []baton.Option{baton.WithRetryPeriod(-time.Second)}, "retry period -1s must be positive"},
		{"zero renew deadline", []baton.Option{baton.WithRenewDeadline(0)}, "renew deadline 0s must be positive"},
		{"negative grace", []baton.Option{baton.WithGrace(-time.Second)}, "grace period -1s must not be negative"},
		{"blank identity", []baton.Option{baton.WithIdentity("  ")}, "identity is empty"},
		{"identity with space", []baton.Option{baton.WithIdentity("pod 1")}, `identity "pod 1" contains the character ' '`},
		{"identity too long", []baton.Option{baton.WithIdentity(strings.Repeat("x", 254))}, "identity is 254 bytes long, at most 253"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := baton.NewMutex(newScript(), "ok", tc.opts...)
			if !errors.Is(err, baton.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewMutex = %v\nwant ErrInvalidOptions containing %q", err, tc.want)
			}
			if _, err := baton.NewElector(newScript(), "ok", tc.opts...); !errors.Is(err, baton.ErrInvalidOptions) {
				t.Fatalf("NewElector = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestOptionsAcceptClientGoStyleTimings(t *testing.T) {
	for _, opts := range [][]baton.Option{
		nil,                             // 15s/10s/2s
		{baton.WithTTL(time.Second)},    // 666ms/133ms
		{baton.WithTTL(time.Minute)},    // 40s/8s
		{baton.WithTTL(24 * time.Hour)}, // scales
		{baton.WithTTL(baton.MaxTTL)},
		{baton.WithTTL(4 * time.Second), baton.WithRenewDeadline(3 * time.Second), baton.WithRetryPeriod(time.Second)},
		{baton.WithTTL(time.Second), baton.WithRenewDeadline(800 * time.Millisecond), baton.WithRetryPeriod(100 * time.Millisecond)},
		// A renew deadline given alone bounds the defaults derived from
		// it (retry 1s, renew every 2.5s; 800ms and 2s for the second).
		{baton.WithTTL(time.Minute), baton.WithRenewDeadline(5 * time.Second)},
		{baton.WithRenewDeadline(4 * time.Second)},
	} {
		if _, err := baton.NewMutex(newScript(), "ok", opts...); err != nil {
			t.Error(err)
		}
	}
}

func TestNewMutexRejectsBadInput(t *testing.T) {
	if _, err := baton.NewMutex(nil, "ok"); !errors.Is(err, baton.ErrInvalidOptions) || !strings.Contains(err.Error(), "backend is nil") {
		t.Fatalf("nil backend: %v", err)
	}
	if _, err := baton.NewMutex(newScript(), "Bad_Name"); !errors.Is(err, baton.ErrInvalidName) {
		t.Fatalf("bad name: %v", err)
	}
}

// A nil pointer as the backend (its constructor's error ignored) is
// refused, naming its type, by every constructor: accepted, it panicked at
// the first Lock, TryLock, Acquire or Run.
func TestNewRejectsNilPointerBackend(t *testing.T) {
	var store *memstore.Store
	_, merr := baton.NewMutex(store, "ok")
	_, eerr := baton.NewElector(store, "ok")
	_, serr := baton.NewSemaphore(store, "ok", 2)
	for _, err := range []error{merr, eerr, serr} {
		if !errors.Is(err, baton.ErrInvalidOptions) || !strings.Contains(err.Error(), "nil *memstore.Store") {
			t.Errorf("nil *memstore.Store: %v", err)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "jobs", "nightly-report", "jobs.nightly.20261130t0300z", "0", strings.Repeat("a", 253)} {
		if err := baton.ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                       "name is empty",
		strings.Repeat("a", 254): "254 characters long, at most 253",
		"Upper":                  `has the character 'U' at byte 0`,
		"a/b":                    `has the character '/' at byte 1`,
		"ä":                      `"ä" has the character 'ä' at byte 0`,
		"a\xffb":                 `has the character '�' at byte 1`,
		"../x":                   "must start and end with a lower-case letter or digit",
		"-x":                     "must start and end",
		"x.":                     "must start and end",
		"a..b":                   "each dot-separated part",
		"a.-b":                   "each dot-separated part",
		"a-.b":                   "each dot-separated part",
		"a b":                    `has the character ' '`,
		"a\x00b":                 `has the character '\x00'`,
	} {
		err := baton.ValidateName(name)
		if !errors.Is(err, baton.ErrInvalidName) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName containing %q", name, err, want)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "a.b", "a..b", "-", "ü", "a-b.c-d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if err := baton.ValidateName(name); err != nil {
			if !errors.Is(err, baton.ErrInvalidName) {
				t.Fatalf("error %v does not match ErrInvalidName", err)
			}
			return
		}
		for _, part := range strings.Split(name, ".") {
			if part == "" || part[0] == '-' || part[len(part)-1] == '-' {
				t.Fatalf("accepted %q with a bad part %q", name, part)
			}
		}
	})
}

// An error about a value the caller did not set says that it is a default
// and how it was derived, with every value spelled out.
func TestOptionsErrorNamesDefaults(t *testing.T) {
	_, err := baton.NewMutex(newScript(), "ok", baton.WithTTL(2*time.Second), baton.WithRetryPeriod(2*time.Second))
	want := `baton: lock "ok": invalid options: retry period 2s must be shorter than renew deadline 1.333333333s (the default, 2/3 of the TTL)`
	if err == nil || err.Error() != want {
		t.Fatalf("NewMutex = %v\nwant %s", err, want)
	}
}

// Elector-only options are refused by NewMutex (which would ignore them)
// and accepted by NewElector; CheckOptions says the same without a
// Backend.
func TestElectorOnlyOptions(t *testing.T) {
	only := []baton.Option{
		baton.WithGrace(time.Second), baton.WithReleaseOnCancel(false),
		baton.OnStartedLeading(func(context.Context, *baton.Lease) {}),
		baton.OnStoppedLeading(func(*baton.Lease, error) {}),
		baton.OnNewLeader(func(string) {}),
	}
	_, err := baton.NewMutex(memstore.New(), "job", only...)
	want := "WithGrace, WithReleaseOnCancel, OnStartedLeading, OnStoppedLeading, OnNewLeader apply only to an Elector"
	if !errors.Is(err, baton.ErrInvalidOptions) || !strings.Contains(err.Error(), want) {
		t.Errorf("NewMutex with Elector-only options: %v; want ErrInvalidOptions naming them", err)
	}
	if _, err := baton.NewElector(memstore.New(), "job", only...); err != nil {
		t.Errorf("NewElector: %v", err)
	}
	if err := baton.CheckOptions(false, only...); !errors.Is(err, baton.ErrInvalidOptions) {
		t.Errorf("CheckOptions for a Mutex: %v", err)
	}
	if err := baton.CheckOptions(true, only...); err != nil {
		t.Errorf("CheckOptions for an Elector: %v", err)
	}
	if err := baton.CheckOptions(false, baton.WithTTL(10*time.Second), baton.WithRenewDeadline(10*time.Second)); !errors.Is(err, baton.ErrInvalidOptions) {
		t.Errorf("CheckOptions of impossible timings: %v", err)
	}
}
