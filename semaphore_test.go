package baton_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/memstore"
)

func TestNewSemaphoreRejectsBadInput(t *testing.T) {
	store := memstore.New()
	long := strings.Repeat("a", baton.MaxNameLength-3)
	for _, tc := range []struct {
		name, lock string
		limit      int
		opts       []baton.Option
		want       error
		mentions   string
	}{
		{"zero limit", "jobs", 0, nil, baton.ErrInvalidOptions, "limit 0; use 1 to 64"},
		{"limit too large", "jobs", baton.MaxSemaphoreLimit + 1, nil, baton.ErrInvalidOptions, "limit 65"},
		{"bad name", "Jobs", 2, nil, baton.ErrInvalidName, "character 'J'"},
		{"slot name too long", long, 2, nil, baton.ErrInvalidName, "use a shorter name"},
		{"elector option", "jobs", 2, []baton.Option{baton.WithGrace(0)}, baton.ErrInvalidOptions, "WithGrace"},
		{"impossible timing", "jobs", 2, []baton.Option{baton.WithRenewDeadline(baton.DefaultTTL)}, baton.ErrInvalidOptions, "renew deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := baton.NewSemaphore(store, tc.lock, tc.limit, tc.opts...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mentions) {
				t.Errorf("NewSemaphore: %v; want an error matching %v that mentions %q", err, tc.want, tc.mentions)
			}
		})
	}
	if _, err := baton.NewSemaphore(nil, "jobs", 2); !errors.Is(err, baton.ErrInvalidOptions) {
		t.Errorf("NewSemaphore(nil backend): %v; want ErrInvalidOptions", err)
	}
}

func TestSemaphoreSlotNames(t *testing.T) {
	sem, err := baton.NewSemaphore(memstore.New(), "jobs", 3)
	if err != nil {
		t.Fatal(err)
	}
	if sem.Name() != "jobs" || sem.Limit() != 3 || sem.SlotName(2) != "jobs.slot-2" {
		t.Errorf("Name %q, Limit %d, SlotName(2) %q; want jobs, 3, jobs.slot-2", sem.Name(), sem.Limit(), sem.SlotName(2))
	}
	if err := baton.ValidateName(sem.SlotName(0)); err != nil {
		t.Errorf("slot name: %v", err)
	}
}
