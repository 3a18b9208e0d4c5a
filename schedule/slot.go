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
	// wall is sched read on wall-clock readings of zone, represented in
	// UTC, which has no offset changes; nil for "@every d". A spec that
	// names times of day (its hour field does not name every hour) has
	// its slots by nextWall, one that names every hour (hourly is set)
	// by nextClock.
	wall   *cron.SpecSchedule
	hourly bool
	zone   *time.Location
	// loc is the zone the spec is read in, and the location of the slots
	// next returns (see Run.Slot): the spec's CRON_TZ zone if it has
	// one, else the scheduler's location.
	loc *time.Location
}

// everyHour is a cron hour field's bits for hours 0-23.
const everyHour = 1<<24 - 1

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
	if err := checkEvery(trimmed); err != nil {
		return spec{}, bad(err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = bad(fmt.Errorf("cron parser: %v", r))
		}
	}()
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(trimmed)
	if err != nil && strings.Contains(err.Error(), "above maximum (6)") {
		// Only the day of the week ends at 6; cron(8) also takes 7 for
		// Sunday, this parser does not.
		err = fmt.Errorf("%w (the day of the week runs from 0, Sunday, to 6: write 0 or SUN for Sunday)", err)
	}
	if err != nil {
		return spec{}, bad(err)
	}
	sp = spec{text: text, sched: s, loc: loc}
	// A prefix's zone replaces loc. It is told by the prefix, not by the
	// zone cron returns: cron gives CRON_TZ=Local the zone it gives a
	// spec without a prefix, time.Local, and drops the zone of
	// "CRON_TZ=Zone @every d" (whose slots do not depend on it, but
	// Run.Slot is shown in it).
	if zone := tzPrefix(trimmed); zone != "" {
		z, err := time.LoadLocation(zone)
		if err != nil {
			return spec{}, bad(err)
		}
		sp.loc = z
	}
	switch s := s.(type) {
	case cron.ConstantDelaySchedule:
		sp.every = s.Delay
	case *cron.SpecSchedule:
		w := *s
		w.Location = time.UTC
		sp.wall, sp.zone = &w, sp.loc
		sp.hourly = s.Hour&everyHour == everyHour
	}
	return sp, nil
}

// tzPrefix returns the zone name of spec's TZ= or CRON_TZ= prefix, or "".
func tzPrefix(spec string) string {
	if !strings.HasPrefix(spec, "TZ=") && !strings.HasPrefix(spec, "CRON_TZ=") {
		return ""
	}
	prefix, _, _ := strings.Cut(spec, " ")
	_, zone, _ := strings.Cut(prefix, "=")
	return zone
}

// checkEvery refuses an "@every d" whose d is not a positive whole number
// of seconds, which cron's parser would silently run every second (0s,
// -5m, 500ms) or at another interval (1500ms as 1s). Slots are whole
// seconds: their lock names are the slot to the second.
func checkEvery(spec string) error {
	if i := strings.Index(spec, " "); i > 0 && strings.Contains(spec[:i], "TZ=") {
		spec = strings.TrimSpace(spec[i+1:])
	}
	arg, ok := strings.CutPrefix(spec, "@every ")
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(arg))
	if err != nil {
		return err
	}
	if d < time.Second || d%time.Second != 0 {
		return fmt.Errorf("@every needs a positive whole number of seconds, as in @every 90s, not %v (cron's parser would make it every %v)",
			d, max(d.Truncate(time.Second), time.Second))
	}
	return nil
}

// next returns the first slot strictly after t, in the spec's CRON_TZ zone
// or else the scheduler's location, or the zero time if there is none
// within five years (cron's search limit).
func (sp spec) next(t time.Time) time.Time {
	n := sp.nextIn(t)
	if n.IsZero() {
		return n
	}
	return n.In(sp.loc)
}

func (sp spec) nextIn(t time.Time) time.Time {
	if sp.every > 0 {
		e := int64(sp.every / time.Second)
		u := t.Unix()
		k := u / e
		if u < 0 && u%e != 0 {
			k-- // floor
		}
		return time.Unix((k+1)*e, 0).In(sp.loc)
	}
	if sp.hourly {
		return sp.nextClock(t)
	}
	if sp.wall != nil {
		return sp.nextWall(t)
	}
	return sp.sched.Next(t.In(sp.loc))
}

// nextClock returns the first slot strictly after t of a spec that names
// every hour, such as "*/15 * * * *", in the scheduler's location as next
// does. Its slots follow the clock: each moment at which the wall clock in
// the spec's zone reads a time the spec names, so that a skipped hour has
// none and a repeated hour has its slots twice. It searches one period of
// the zone's offset at a time, from t's: a reading whose moment falls
// after the period's end is looked for again in the next period, from its
// first reading. (cron's own Next, which moves from day to day through
// local midnight, skipped every slot of a day whose midnight the zone
// skips, such as Fridays of "30 * * * 5" in Cairo on the day it springs
// forward.)
func (sp spec) nextClock(t time.Time) time.Time {
	from, r := t, wallReading(t, sp.zone)
	for from.Sub(t) < maxSearch {
		_, off := from.In(sp.zone).Zone()
		_, end := from.In(sp.zone).ZoneBounds()
		w := sp.wall.Next(r)
		if w.IsZero() {
			return w
		}
		if at := w.Add(-time.Duration(off) * time.Second); end.IsZero() || at.Before(end) {
			return at.In(sp.loc)
		}
		// The readings from the next period's first one, in its offset.
		from, r = end, wallReading(end, sp.zone).Add(-time.Nanosecond)
	}
	return time.Time{}
}

// maxSearch bounds nextClock's search, as cron's Next is bounded to five
// years.
const maxSearch = 5 * 366 * 24 * time.Hour

// nextWall returns the first slot strictly after t of a spec that names
// times of day, such as "30 2 * * *", in the scheduler's location as next
// does. Its slots are readings of the wall clock in the spec's zone, each
// a slot once, also on the days the zone changes its offset, much as
// cron(8) runs them: a reading that occurs twice (the clock falls back) is
// a slot at its first occurrence only, and a reading that is skipped (the
// clock springs forward) is a slot at the end of the skipped interval.
// (cron's own Next would run a daily 02:30 job twice on the day Europe
// falls back and not at all on the day it springs forward.)
//
// Slots follow the order of their readings, and the slot of t's own
// reading is not after t, so no earlier reading has a slot after t: the
// loop starts at t's reading and ends at the first reading whose slot is
// after t. It passes over readings only within a repeated interval.
func (sp spec) nextWall(t time.Time) time.Time {
	for w := sp.wall.Next(wallReading(t, sp.zone)); !w.IsZero(); w = sp.wall.Next(w) {
		if at := slotOf(w, sp.zone); at.After(t) {
			return at.In(sp.loc)
		}
	}
	return time.Time{}
}

// wallReading returns what a wall clock in zone reads at t, as a time in
// UTC.
func wallReading(t time.Time, zone *time.Location) time.Time {
	_, off := t.In(zone).Zone()
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// slotOf returns the first moment at which a wall clock in zone reads w
// (a reading in UTC, as from wallReading), or, if the zone skips w, the
// moment the skip ends. The offsets tried are those in effect a day
// before and a day after w: zones change their offset at most once in
// such a span.
func slotOf(w time.Time, zone *time.Location) time.Time {
	var first, skipped time.Time
	for _, probe := range []time.Time{w.Add(-24 * time.Hour), w.Add(24 * time.Hour)} {
		_, off := probe.In(zone).Zone()
		at := w.Add(-time.Duration(off) * time.Second)
		if wallReading(at, zone).Equal(w) {
			if first.IsZero() || at.Before(first) {
				first = at
			}
		} else if skipped.IsZero() || at.After(skipped) {
			// Read with the earlier, smaller offset, a skipped reading
			// falls after the change: the zone in effect there began
			// when the skip ended.
			skipped = at
		}
	}
	if !first.IsZero() {
		return first.In(zone)
	}
	if resumed, _ := skipped.In(zone).ZoneBounds(); !resumed.IsZero() {
		return resumed
	}
	return skipped.In(zone)
}

// newest returns the newest n slots in (after, now], oldest first, and
// whether older slots in (after, now] were left out. Its cost grows with
// the number of slots in a window about twice as long as the distance from
// now back to the n-th newest slot, not with the length of (after, now].
//
// Slots are wall-clock times, so it compares wall readings only: a
// monotonic reading in after or now (the system clock's Now has one) is
// dropped. With both, Go compares times by their monotonic readings,
// which a step of the wall clock does not move: after a step back, a
// window reaching before after by the wall clock passed for one after
// it, and its slots, already handled, came round again.
func (sp spec) newest(after, now time.Time, n int) (slots []time.Time, left bool) {
	after, now = after.Round(0), now.Round(0)
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
