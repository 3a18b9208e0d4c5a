package schedule

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the time zone database, whatever the machine has
)

func TestNewest(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	mustParse := func(s string) spec {
		sp, err := parseSpec(s, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	for _, tc := range []struct {
		spec       string
		after, now time.Time
		n          int
		want       []time.Time
		left       bool
	}{
		{"* * * * * *", t0, at(3 * time.Second), 1, []time.Time{at(3 * time.Second)}, true},
		{"* * * * * *", t0, at(3 * time.Second), 5, []time.Time{at(time.Second), at(2 * time.Second), at(3 * time.Second)}, false},
		{"* * * * * *", t0, at(3*time.Second + 500*time.Millisecond), 2, []time.Time{at(2 * time.Second), at(3 * time.Second)}, true},
		{"* * * * * *", t0, t0, 3, nil, false},                         // empty interval
		{"* * * * * *", t0, at(999 * time.Millisecond), 3, nil, false}, // no slot yet
		{"0 3 * * *", t0.Add(-24 * time.Hour), at(time.Hour), 1, []time.Time{t0}, false},
		// A year of every-second slots: only the newest are enumerated.
		{"* * * * * *", t0.Add(-366 * 24 * time.Hour), t0, 2, []time.Time{at(-time.Second), t0}, true},
		// Slots clustered in one hour, far before now.
		{"* * 1 * * *", t0.Add(-48 * time.Hour), t0, 2, []time.Time{at(-time.Hour - 2*time.Second), at(-time.Hour - time.Second)}, true},
		{"@every 90s", t0, at(5 * time.Minute), 2, []time.Time{at(3 * time.Minute), at(270 * time.Second)}, true},
	} {
		sp := mustParse(tc.spec)
		got, left := sp.newest(tc.after, tc.now, tc.n)
		if !slices.EqualFunc(got, tc.want, time.Time.Equal) || left != tc.left {
			t.Errorf("%q newest(%v, %v, %d) = %v, %v; want %v, %v", tc.spec, tc.after, tc.now, tc.n, got, left, tc.want, tc.left)
		}
	}
}

func TestNextEveryIsEpochAligned(t *testing.T) {
	sp, err := parseSpec("@every 1h", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for _, from := range []time.Time{base, base.Add(time.Nanosecond), base.Add(59 * time.Minute), time.Unix(-1, 0)} {
		n := sp.next(from)
		if n.Unix()%3600 != 0 || !n.After(from) || n.Sub(from) > time.Hour {
			t.Errorf("next(%v) = %v: not the first hour boundary after it", from, n)
		}
	}
	// CRON_TZ wins over the scheduler's location; slots without one are in it.
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err) // time/tzdata is embedded: this cannot depend on the machine
	}
	sp, _ = parseSpec("0 3 * * *", ny)
	if n := sp.next(base); n.Hour() != 3 || n.Location() != ny {
		t.Errorf("next in New York = %v", n)
	}
	sp, _ = parseSpec("CRON_TZ=UTC 0 3 * * *", ny)
	if n := sp.next(base); !n.Equal(base.Add(24 * time.Hour)) {
		t.Errorf("next with CRON_TZ=UTC = %v, want %v", n, base.Add(24*time.Hour))
	}
}

// A spec that names times of day runs each of them once on the days its
// zone changes offset: a repeated reading at its first occurrence, a
// skipped one when the skip ends. Specs that name every hour follow the
// clock: each real hour has its slots.
func TestNextAcrossOffsetChanges(t *testing.T) {
	zone := func(name string) *time.Location {
		l, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	berlin, lordHowe, santiago := zone("Europe/Berlin"), zone("Australia/Lord_Howe"), zone("America/Santiago")
	cairo, beirut := zone("Africa/Cairo"), zone("Asia/Beirut")
	utc := func(s string) time.Time {
		u, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		spec string
		loc  *time.Location
		from string // UTC
		want []string
	}{
		// Berlin falls back at 01:00 UTC on 2026-10-25 (03:00 CEST -> 02:00 CET).
		{"30 2 * * *", berlin, "2026-10-24 12:00", []string{"2026-10-25 00:30", "2026-10-26 01:30"}},
		{"*/30 2 * * *", berlin, "2026-10-24 12:00", []string{"2026-10-25 00:00", "2026-10-25 00:30", "2026-10-26 01:00"}},
		{"0 3 * * *", berlin, "2026-10-24 12:00", []string{"2026-10-25 02:00", "2026-10-26 02:00"}},
		{"0 * * * *", berlin, "2026-10-24 23:30", []string{"2026-10-25 00:00", "2026-10-25 01:00", "2026-10-25 02:00"}},
		// From inside the repeated hour, its readings are behind.
		{"30 2 * * *", berlin, "2026-10-25 01:10", []string{"2026-10-26 01:30"}},
		// Berlin springs forward at 01:00 UTC on 2026-03-29 (02:00 CET -> 03:00 CEST).
		{"30 2 * * *", berlin, "2026-03-28 12:00", []string{"2026-03-29 01:00", "2026-03-30 00:30"}},
		{"0,30 2 * * *", berlin, "2026-03-28 12:00", []string{"2026-03-29 01:00", "2026-03-30 00:00"}},
		{"0 3 * * *", berlin, "2026-03-28 12:00", []string{"2026-03-29 01:00", "2026-03-30 01:00"}},
		{"30 * * * *", berlin, "2026-03-28 23:45", []string{"2026-03-29 00:30", "2026-03-29 01:30"}},
		{"CRON_TZ=Europe/Berlin 30 2 * * *", time.UTC, "2026-03-28 12:00", []string{"2026-03-29 01:00"}},
		{"30 2 29 3 *", berlin, "2026-03-01 00:00", []string{"2026-03-29 01:00", "2027-03-29 00:30"}},
		// Lord Howe moves by half an hour: 02:00 -> 01:30 on 2026-04-05 (15:00 UTC on the 4th).
		{"45 1 * * *", lordHowe, "2026-04-04 12:00", []string{"2026-04-04 14:45", "2026-04-05 15:15"}},
		// Santiago springs forward at midnight: 2026-09-06 00:00 does not exist (04:00 UTC).
		{"0 0 * * *", santiago, "2026-09-05 12:00", []string{"2026-09-06 04:00", "2026-09-07 03:00"}},
		// So do Cairo (Friday 2026-04-24, 22:00 UTC) and Beirut (Sunday
		// 2026-03-29, 22:00 UTC the day before): a spec of every hour of
		// that day has the day's real hours, from 01:00.
		{"30 * * * 5", cairo, "2026-04-23 12:00", []string{"2026-04-23 22:30", "2026-04-23 23:30", "2026-04-24 00:30"}},
		{"*/30 * * * 0", beirut, "2026-03-28 12:00", []string{"2026-03-28 22:00", "2026-03-28 22:30", "2026-03-28 23:00"}},
		{"30 * * * 6", beirut, "2026-03-28 12:00", []string{"2026-03-28 12:30", "2026-03-28 13:30"}},
	} {
		sp, err := parseSpec(tc.spec, tc.loc)
		if err != nil {
			t.Fatal(err)
		}
		at := utc(tc.from)
		for _, w := range tc.want {
			at = sp.next(at)
			if !at.Equal(utc(w)) {
				t.Errorf("%q in %v: next = %v, want %s UTC", tc.spec, tc.loc, at.UTC(), w)
				break
			}
		}
	}
}

// A daily spec at a time of day runs exactly once on every local date for
// three years in zones with daylight saving time of every kind, including
// times that some nights skip or repeat, and its slots always increase.
func TestDailyOncePerLocalDate(t *testing.T) {
	for _, name := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe", "America/Santiago", "UTC"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"30 2 * * *", "0 0 * * *", "45 1 * * *", "0 3 * * *"} {
			sp, err := parseSpec(s, loc)
			if err != nil {
				t.Fatal(err)
			}
			from := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			end := from.AddDate(3, 0, 0)
			runs := map[string]int{}
			prev := from.Add(-time.Nanosecond)
			for at := sp.next(from.Add(-time.Nanosecond)); at.Before(end); at = sp.next(at) {
				if !at.After(prev) {
					t.Fatalf("%s in %s: slot %v after %v", s, name, at, prev)
				}
				prev = at
				runs[at.In(loc).Format(time.DateOnly)]++
			}
			for d := from; d.Before(end); d = d.AddDate(0, 0, 1) {
				if n := runs[d.Format(time.DateOnly)]; n != 1 {
					t.Errorf("%s in %s: %d runs on %s, want 1", s, name, n, d.Format(time.DateOnly))
				}
			}
		}
	}
}

// Run.Slot is in the spec's CRON_TZ zone if it has one, else in the
// scheduler's location, as Run documents: a job that takes the day of its
// slot ("0 1 * * *" in Tokyo is 16:00 UTC of the day before) gets the
// zone's day.
func TestSlotInSpecZone(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		spec string
		loc  *time.Location
		want *time.Location
	}{
		{"CRON_TZ=Asia/Tokyo 0 1 * * *", time.UTC, tokyo},
		{"CRON_TZ=Asia/Tokyo 0 * * * *", ny, tokyo},
		{"TZ=Asia/Tokyo @every 1h", time.UTC, tokyo},
		{"0 1 * * *", ny, ny},
		{"0 * * * *", ny, ny},
		{"@every 1h", ny, ny},
	} {
		sp, err := parseSpec(tc.spec, tc.loc)
		if err != nil {
			t.Fatal(err)
		}
		if n := sp.next(from); n.Location().String() != tc.want.String() {
			t.Errorf("%q with location %v: slot %v is in %v, want %v", tc.spec, tc.loc, n, n.Location(), tc.want)
		}
	}
}

// A CRON_TZ=Local (or TZ=Local) prefix reads the spec in the process's
// local zone (the TZ variable, else /etc/localtime), as cron's parser
// does, whatever WithLocation says: "CRON_TZ=Local 0 3 * * *" on a
// machine in India runs at 03:00 there, not at 03:00 UTC. The test runs
// itself again with TZ set, since the local zone is read once per process.
func TestCronTZLocal(t *testing.T) {
	const zoneName = "Asia/Kolkata" // +05:30: an every-hour spec shows it too
	if os.Getenv("BATON_TEST_CRON_TZ_LOCAL") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCronTZLocal$", "-test.v")
		cmd.Env = append(os.Environ(), "TZ="+zoneName, "BATON_TEST_CRON_TZ_LOCAL=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestCronTZLocal") {
			t.Fatalf("with TZ=%s: %v\n%s", zoneName, err, out)
		}
		return
	}
	kolkata, err := time.LoadLocation(zoneName)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	if _, off := from.In(time.Local).Zone(); off != 5*3600+1800 {
		t.Fatalf("the local zone's offset is %ds, not %s's: TZ was not applied", off, zoneName)
	}
	for _, tc := range []struct {
		spec string
		want time.Time
	}{
		{"CRON_TZ=Local 0 3 * * *", time.Date(2026, 7, 2, 3, 0, 0, 0, kolkata)},
		{"TZ=Local 0 3 * * *", time.Date(2026, 7, 2, 3, 0, 0, 0, kolkata)},
		{"CRON_TZ=Local 0 * * * *", time.Date(2026, 7, 1, 6, 0, 0, 0, kolkata)}, // 00:30 UTC
		{"CRON_TZ=Local @every 1h", time.Date(2026, 7, 1, 1, 0, 0, 0, time.UTC)},
	} {
		sp, err := parseSpec(tc.spec, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		n := sp.next(from)
		if !n.Equal(tc.want) {
			t.Errorf("%q with location UTC: next(%v) = %v, want %v", tc.spec, from, n.UTC(), tc.want.UTC())
		}
		if n.Location() != time.Local {
			t.Errorf("%q: slot %v is in %v, want Local", tc.spec, n, n.Location())
		}
	}
}
