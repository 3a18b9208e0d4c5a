package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/robfig/cron/v3"
)

// slotSuffixLen is the length of a slot's suffix in its lock name:
// "." followed by the slot in UTC as 20261130t030000z.
const slotSuffixLen = 1 + 16

// MaxJobNameLength is the longest job name Add accepts: a slot's lock name,
// the job name plus ".20261130t030000z", must fit backend.MaxNameLength.
const MaxJobNameLength = backend.MaxNameLength - slotSuffixLen

// LockName returns the name of the lock that guards job's slot: the job
// name, a dot, and the slot in UTC to the second, as in
// "nightly-report.20261130t030000z". Sub-second parts of slot are dropped
// (cron slots are whole seconds). The error matches backend.ErrInvalidName if
// job is not a valid lock name or is longer than MaxJobNameLength.
func LockName(job string, slot time.Time) (string, error) {
	if err := validateJobName(job); err != nil {
		return "", err
	}
	return lockName(job, slot), nil
}

func lockName(job string, slot time.Time) string { return job + "." + slotID(slot) }

// slotID is a slot in UTC to the second, in lower case so that it is valid
// in a DNS-1123 name: 20261130t030000z.
func slotID(slot time.Time) string {
	u := slot.UTC()
	return fmt.Sprintf("%04d%02d%02dt%02d%02d%02dz", u.Year(), int(u.Month()), u.Day(), u.Hour(), u.Minute(), u.Second())
}

func validateJobName(job string) error {
	if err := backend.ValidateName(job); err != nil {
		return fmt.Errorf("schedule: job name: %w", err)
	}
	if len(job) > MaxJobNameLength {
		return fmt.Errorf("schedule: job name: %w: %q is %d characters long; with the slot suffix (%d characters, as in %q) its lock names would exceed %d, so at most %d are allowed",
			backend.ErrInvalidName, job, len(job), slotSuffixLen, ".20261130t030000z", backend.MaxNameLength, MaxJobNameLength)
	}
	return nil
}

// spec is a parsed cron spec.
type spec struct {
	text  string
	sched cron.Schedule
	// every is set for "@every d": slots are the multiples of every since
	// the Unix epoch, so that every replica computes the same slots
	// whenever it started (cron's own ConstantDelaySchedule counts from
	// the time it is asked, which differs between replicas).
	every time.Duration
	loc   *time.Location
}

// parseSpec parses a standard cron spec with an optional leading seconds
// field, descriptors (@daily, @every 5m) and a CRON_TZ= prefix. It never
// panics: cron v3.0.1 panics on a TZ prefix without a schedule.
func parseSpec(text string, loc *time.Location) (sp spec, err error) {
	bad := func(err error) error {
		return fmt.Errorf("%w %q: %w", ErrInvalidSpec, text, err)
	}
	trimmed := strings.TrimSpace(text)
	if (strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=")) && !strings.Contains(trimmed, " ") {
		return spec{}, bad(fmt.Errorf("a time zone prefix must be followed by a schedule"))
	}
	defer func() {
		if r := recover(); r != nil {
			err = bad(fmt.Errorf("cron parser: %v", r))
		}
	}()
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(trimmed)
	if err != nil {
		return spec{}, bad(err)
	}
	sp = spec{text: text, sched: s, loc: loc}
	if e, ok := s.(cron.ConstantDelaySchedule); ok {
		sp.every = e.Delay
	}
	return sp, nil
}

// next returns the first slot strictly after t, or the zero time if there
// is none within five years (cron's search limit).
func (sp spec) next(t time.Time) time.Time {
	if sp.every > 0 {
		e := int64(sp.every / time.Second)
		u := t.Unix()
		k := u / e
		if u < 0 && u%e != 0 {
			k-- // floor
		}
		return time.Unix((k+1)*e, 0).In(sp.loc)
	}
	return sp.sched.Next(t.In(sp.loc))
}

// newest returns the newest n slots in (after, now], oldest first, and
// whether older slots in (after, now] were left out. Its cost grows with
// the number of slots in a window about twice as long as the distance from
// now back to the n-th newest slot, not with the length of (after, now].
func (sp spec) newest(after, now time.Time, n int) (slots []time.Time, left bool) {
	if n <= 0 || !now.After(after) {
		return nil, false
	}
	if first := sp.next(after); first.IsZero() || first.After(now) {
		return nil, false
	}
	// Find lo in [after, now) such that (lo, now] holds at least n slots,
	// doubling the window back from now.
	lo := after
	for w := time.Second; w < 20*366*24*time.Hour; w *= 2 {
		cand := now.Add(-w)
		if !cand.After(after) {
			break
		}
		if sp.countUpTo(cand, now, n) >= n {
			lo = cand
			break
		}
	}
	if lo.After(after) {
		if s := sp.next(after); !s.IsZero() && !s.After(lo) {
			left = true
		}
	}
	for s := sp.next(lo); !s.IsZero() && !s.After(now); s = sp.next(s) {
		slots = append(slots, s)
		if len(slots) > n {
			slots = slots[1:]
			left = true
		}
	}
	return slots, left
}

// countUpTo counts the slots in (after, now], stopping at limit.
func (sp spec) countUpTo(after, now time.Time, limit int) int {
	n := 0
	for s := sp.next(after); n < limit && !s.IsZero() && !s.After(now); s = sp.next(s) {
		n++
	}
	return n
}
