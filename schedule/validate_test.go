package schedule_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/memstore"
	"github.com/baton-go/baton/schedule"
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	store, ledger := memstore.New(), schedule.NewMemoryLedger()
	for _, tc := range []struct {
		name   string
		b      backend.Backend
		ledger schedule.Ledger
		opts   []schedule.Option
		want   string
	}{
		{"nil backend", nil, ledger, nil, "backend is nil"},
		{"nil ledger", store, nil, nil, "ledger is nil"},
		// A nil pointer in the interface (a constructor's error ignored)
		// would otherwise panic at the first slot, maybe hours later.
		{"nil *FileLedger", store, (*schedule.FileLedger)(nil), nil, "ledger is a nil *schedule.FileLedger"},
		{"nil *MemoryLedger", store, (*schedule.MemoryLedger)(nil), nil, "ledger is a nil *schedule.MemoryLedger"},
		{"nil *memstore.Store", (*memstore.Store)(nil), ledger, nil, "backend is a nil *memstore.Store"},
		{"nil location", store, ledger, []schedule.Option{schedule.WithLocation(nil)}, "location is nil"},
		{"negative grace", store, ledger, []schedule.Option{schedule.WithShutdownGrace(-time.Second)}, "shutdown grace -1s"},
		{"lock TTL", store, ledger, []schedule.Option{schedule.WithLockOptions(baton.WithTTL(500 * time.Millisecond))}, "TTL 500ms"},
		{"lock deadline", store, ledger, []schedule.Option{schedule.WithLockOptions(baton.WithRenewDeadline(20 * time.Second))}, "renew deadline 20s must be shorter than TTL 15s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := schedule.New(tc.b, tc.ledger, tc.opts...)
			if s != nil || !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error matching ErrInvalidOptions containing %q", s, err, tc.want)
			}
		})
	}
}

func TestAddRejectsInvalidJobs(t *testing.T) {
	s, err := schedule.New(memstore.New(), schedule.NewMemoryLedger(), schedule.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	job := newCounter().job
	long := strings.Repeat("a", schedule.MaxJobNameLength+1)
	for _, tc := range []struct {
		name, job, spec string
		fn              schedule.Func
		opts            []schedule.JobOption
		is              error
		want            string
	}{
		{"empty spec", "j", "", job, nil, schedule.ErrInvalidSpec, `invalid cron spec ""`},
		{"garbage spec", "j", "every day", job, nil, schedule.ErrInvalidSpec, `"every day"`},
		{"seven fields", "j", "0 0 0 * * * *", job, nil, schedule.ErrInvalidSpec, "0 0 0 * * * *"},
		{"out of range", "j", "61 * * * *", job, nil, schedule.ErrInvalidSpec, "61"},
		{"Sunday as 7", "j", "0 3 * * 7", job, nil, schedule.ErrInvalidSpec, "write 0 or SUN for Sunday"},
		{"bad time zone", "j", "CRON_TZ=Mars/Olympus 0 3 * * *", job, nil, schedule.ErrInvalidSpec, "Mars/Olympus"},
		{"time zone alone", "j", "CRON_TZ=UTC", job, nil, schedule.ErrInvalidSpec, "followed by a schedule"},
		{"TZ alone", "j", "TZ=UTC", job, nil, schedule.ErrInvalidSpec, "followed by a schedule"},
		{"unknown descriptor", "j", "@fortnightly", job, nil, schedule.ErrInvalidSpec, "@fortnightly"},
		{"never", "j", "0 0 30 2 *", job, nil, schedule.ErrInvalidSpec, "no slot within five years"},
		// cron's parser would run these every second.
		{"every zero", "j", "@every 0s", job, nil, schedule.ErrInvalidSpec, "a positive whole number of seconds"},
		{"every negative", "j", "@every -5m", job, nil, schedule.ErrInvalidSpec, "a positive whole number of seconds"},
		{"every sub-second", "j", "@every 500ms", job, nil, schedule.ErrInvalidSpec, "a positive whole number of seconds"},
		{"every fraction", "j", "@every 1500ms", job, nil, schedule.ErrInvalidSpec, "a positive whole number of seconds"},
		{"every with a zone", "j", "CRON_TZ=UTC @every 0s", job, nil, schedule.ErrInvalidSpec, "a positive whole number of seconds"},
		{"upper-case name", "Nightly", "@daily", job, nil, backend.ErrInvalidName, `"Nightly"`},
		{"empty name", "", "@daily", job, nil, backend.ErrInvalidName, "empty"},
		{"long name", long, "@daily", job, nil, backend.ErrInvalidName, "at most 236"},
		{"nil func", "j", "@daily", nil, nil, backend.ErrInvalidOptions, "func is nil"},
		{"at-most zero", "j", "@daily", job, []schedule.JobOption{schedule.LockAtMostFor(0)}, backend.ErrInvalidOptions, "lock-at-most-for 0s must be positive"},
		{"at-least negative", "j", "@daily", job, []schedule.JobOption{schedule.LockAtLeastFor(-time.Second)}, backend.ErrInvalidOptions, "lock-at-least-for -1s"},
		{"at-least above at-most", "j", "@daily", job, []schedule.JobOption{schedule.LockAtLeastFor(time.Minute), schedule.LockAtMostFor(time.Second)}, backend.ErrInvalidOptions, "lock-at-least-for 1m0s must not exceed lock-at-most-for 1s"},
		{"catch-up negative", "j", "@daily", job, []schedule.JobOption{schedule.CatchUp(-1, time.Hour)}, backend.ErrInvalidOptions, "catch-up count -1"},
		{"catch-up too many", "j", "@daily", job, []schedule.JobOption{schedule.CatchUp(schedule.MaxCatchUp+1, time.Hour)}, backend.ErrInvalidOptions, "exceeds the maximum 1000"},
		{"catch-up no window", "j", "@daily", job, []schedule.JobOption{schedule.CatchUp(3, 0)}, backend.ErrInvalidOptions, "catch-up of 3 slots needs a positive window, got 0s"},
		{"window without count", "j", "@daily", job, []schedule.JobOption{schedule.CatchUp(0, time.Hour)}, backend.ErrInvalidOptions, "window 1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Add(tc.job, tc.spec, tc.fn, tc.opts...)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Add = %v; want an error matching %v containing %q", err, tc.is, tc.want)
			}
		})
	}
	// Valid specs of every form are accepted, and names are unique.
	for i, spec := range []string{"0 3 * * *", "*/5 * * * * *", "@daily", "@every 90m", "CRON_TZ=Europe/Berlin 30 2 * * 1-5", "  15 4 1 * *  "} {
		if err := s.Add("ok-"+string(rune('a'+i)), spec, job); err != nil {
			t.Errorf("Add(%q) = %v", spec, err)
		}
	}
	if err := s.Add("ok-a", "@daily", job); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "already added") {
		t.Errorf("Add of a duplicate name = %v", err)
	}
	if err := s.Add(strings.Repeat("a", schedule.MaxJobNameLength), "@daily", job); err != nil {
		t.Errorf("Add with a name of MaxJobNameLength: %v", err)
	}
}

func TestLockName(t *testing.T) {
	slot := time.Date(2026, 11, 30, 3, 4, 5, 600, time.FixedZone("CET", 3600))
	got, err := schedule.LockName("nightly-report", slot)
	if err != nil || got != "nightly-report.20261130t020405z" {
		t.Fatalf("LockName = %q, %v; want nightly-report.20261130t020405z (UTC, whole seconds)", got, err)
	}
	if err := backend.ValidateName(got); err != nil {
		t.Fatal(err)
	}
	max := strings.Repeat("x", schedule.MaxJobNameLength)
	got, err = schedule.LockName(max, slot)
	if err != nil || len(got) != backend.MaxNameLength || backend.ValidateName(got) != nil {
		t.Fatalf("LockName of a %d-character job = %d characters, %v", len(max), len(got), err)
	}
	if _, err := schedule.LockName(max+"x", slot); !errors.Is(err, backend.ErrInvalidName) {
		t.Fatalf("LockName of a too long job = %v", err)
	}
	if _, err := schedule.LockName("a_b", slot); !errors.Is(err, backend.ErrInvalidName) {
		t.Fatalf("LockName(a_b) = %v", err)
	}
}

// @every slots are multiples of the interval since the Unix epoch: two
// replicas started at different times agree on them.
func TestEverySlotsAreAligned(t *testing.T) {
	for _, off := range []time.Duration{0, 17 * time.Second} {
		env := newFakeEnv(t0.Add(off))
		rec := newRecorder()
		s := env.replica(t, "r", 0, schedule.WithObserver(rec.observe))
		if err := s.Add("sync", "@every 90s", newCounter().job); err != nil {
			t.Fatal(err)
		}
		stop := start(t, s)
		awaitWaiters(t, env.wall, 1)
		env.wall.Step(90 * time.Second)
		// t0 is 1_796_007_600 s after the epoch, a multiple of 90 s.
		rec.expect(t, t0.Add(90*time.Second), schedule.Ran)
		stop()
	}
}

// MemoryLedger keeps the first record of a slot, ignores sub-second parts
// and reports an ended context.
func TestMemoryLedger(t *testing.T) {
	ctx := context.Background()
	l := schedule.NewMemoryLedger()
	slot := t0.Add(500 * time.Millisecond) // sub-second parts are ignored
	if done, err := l.Done(ctx, "j", slot); done || err != nil {
		t.Fatalf("Done on an empty ledger = %v, %v", done, err)
	}
	if err := l.Record(ctx, "j", slot, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, "j", slot, 4); err != nil {
		t.Fatalf("second Record = %v, want nil (idempotent)", err)
	}
	if done, err := l.Done(ctx, "j", t0); !done || err != nil {
		t.Fatalf("Done = %v, %v; want true", done, err)
	}
	if tok, ok := l.Token("j", t0); !ok || tok != 3 {
		t.Fatalf("Token = %d, %v; want the first record's 3", tok, ok)
	}
	if done, _ := l.Done(ctx, "other", t0); done {
		t.Fatal("another job's slot is done")
	}
	l.Forget("j", t0)
	if done, _ := l.Done(ctx, "j", t0); done {
		t.Fatal("Done after Forget")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Done(cctx, "j", t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Done with an ended context = %v", err)
	}
}
