//go:build linux

package safety

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// catcher records what the checker reports.
type catcher struct{ errs []string }

func (c *catcher) Helper()             {}
func (c *catcher) Logf(string, ...any) {}
func (c *catcher) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// TestCheckerFindsViolations feeds the checker histories that break each
// property and asserts that it reports them: the suite's checks can fail.
func TestCheckerFindsViolations(t *testing.T) {
	ms := time.Millisecond
	be := &backendEnv{name: "synthetic", ttl: ttl, claimLife: ttl}
	acq := func(c string, tok uint64, locking, acquired time.Duration) []event {
		return []event{{eventReq{C: c, Kind: "locking"}, locking}, {eventReq{C: c, Kind: "acquired", Tok: tok}, acquired}}
	}
	// A clean history: c1 holds token 5, then c2 token 6.
	clean := []op{
		{Seq: 0, C: "c1", Term: "c1/1", Tok: 5, Call: 10 * ms, Ret: 11 * ms, OK: true, FOut: 0},
		{Seq: 1, C: "c1", Term: "c1/1", Tok: 5, Write: true, Call: 12 * ms, Ret: 13 * ms, OK: true, FIn: 1, FBefore: 0},
		{Seq: 2, C: "c2", Term: "c2/1", Tok: 6, Call: 20 * ms, Ret: 21 * ms, OK: true, FOut: 1, FBefore: 1},
		{Seq: 3, C: "c2", Term: "c2/1", Tok: 6, Write: true, Call: 22 * ms, Ret: 23 * ms, OK: true, FIn: 2, FBefore: 1},
	}
	cleanEvs := append(acq("c1", 5, 0, 5*ms), acq("c2", 6, 1*ms, 15*ms)...)
	check := func(sc scenario, ops []op, evs []event) []string {
		var c catcher
		checkHistory(&c, be, sc, ops, evs, &result{})
		return c.errs
	}
	if errs := check(scenario{fault: faultKill, rounds: 1}, clean, cleanEvs); len(errs) != 0 {
		t.Fatalf("a clean history was reported: %q", errs)
	}
	with := func(f func(ops []op) []op) []op {
		return f(append([]op(nil), clean...))
	}
	cases := []struct {
		name string
		sc   scenario
		ops  []op
		evs  []event
		want string
	}{
		{"stale write accepted", scenario{fault: faultKill}, with(func(o []op) []op {
			return append(o, op{Seq: 4, C: "c1", Term: "c1/1", Tok: 5, Write: true, Call: 30 * ms, Ret: 31 * ms, OK: true, FIn: 3, FBefore: 2})
		}), cleanEvs, "stale op accepted"},
		{"current token refused", scenario{fault: faultKill}, with(func(o []op) []op {
			return append(o, op{Seq: 4, C: "c2", Term: "c2/1", Tok: 6, Write: true, Call: 30 * ms, Ret: 31 * ms, FIn: 3, FBefore: 2})
		}), cleanEvs, "current token refused"},
		{"lost update on the fenced register", scenario{fault: faultKill}, with(func(o []op) []op {
			o[3].FIn = 1
			return o
		}), cleanEvs, "lost update on the fenced register"},
		{"one token, two tenures", scenario{fault: faultKill}, with(func(o []op) []op {
			o[3].Term, o[3].C = "c3/1", "c3"
			return o
		}), cleanEvs, "used by two tenures"},
		{"token granted twice", scenario{fault: faultKill}, clean, append(cleanEvs, acq("c3", 6, 16*ms, 17*ms)...), "granted twice"},
		{"token order", scenario{fault: faultKill}, clean, append(cleanEvs, acq("c3", 4, 16*ms, 17*ms)...), "token order"},
		{"not linearizable", scenario{fault: faultKill}, with(func(o []op) []op {
			o[2].FOut = 7 // a read that returns a value nobody wrote
			return o
		}), cleanEvs, "not linearizable"},
		{"pause without a stale write", scenario{fault: faultStop, rounds: 1}, clean, cleanEvs, "stale writes attempted"},
		{"older holder reached the unfenced counter", scenario{fault: faultPartition}, with(func(o []op) []op {
			o[3].PStale = true
			return o
		}), cleanEvs, "older holder"},
		{"contender error", scenario{fault: faultKill}, clean, append(cleanEvs, event{eventReq{C: "c1", Kind: "error", Err: "boom"}, 40 * ms}), "reported an error"},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			errs := check(tc.sc, tc.ops, tc.evs)
			for _, e := range errs {
				if strings.Contains(e, tc.want) {
					return
				}
			}
			t.Errorf("want a report containing %q, got %q", tc.want, errs)
		})
	}
}

// TestCheckerCatchesUnfencedRegister runs the SIGSTOP scenario on the file
// backend against a register that does not check tokens: the paused
// holder's late write is then accepted, and the checker must say so.
func TestCheckerCatchesUnfencedRegister(t *testing.T) {
	h := newHarness(t, fileEnv(t), scenario{fault: faultStop, rounds: 1, lock: "unfenced"})
	h.reg.mu.Lock()
	h.reg.noFence = true
	h.reg.mu.Unlock()
	var c catcher
	h.rep = &c
	h.run()
	for _, e := range c.errs {
		if strings.Contains(e, "stale op accepted") {
			t.Logf("the checker reported: %s", e)
			return
		}
	}
	t.Errorf("the checker did not report the stale write an unfenced register accepted; it reported %q", c.errs)
}
