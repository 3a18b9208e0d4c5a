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
		return []event{{eventReq{C: c, Kind: "locking"}, locking, locking, 0}, {eventReq{C: c, Kind: "acquired", Tok: tok}, acquired, acquired, 0}}
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
		checkHistory(&c, be, sc, ops, evs, &result{faultsTracked: true})
		return c.errs
	}
	ended := func(c string, tok uint64, cause string, at time.Duration) event {
		return event{eventReq{C: c, Kind: "releasing", Tok: tok, Cause: cause}, at, at, 0}
	}
	// c1 was killed (no end reported) while valid until 30ms; c2 acquired
	// at 15ms.
	withVU := func(vu time.Duration) []op {
		o := append([]op(nil), clean...)
		o[1].Live, o[1].VU, o[1].HasVU = 12*ms, vu, true
		return o
	}
	if errs := check(scenario{fault: faultKill, rounds: 1}, clean, cleanEvs); len(errs) != 0 {
		t.Fatalf("a clean history was reported: %q", errs)
	}
	// Also clean: c1 valid until 14ms (before c2's 15ms); c1 valid until
	// 30ms but reported its end at 14ms, before c2 acquired; a step-down
	// under a fault on its contender.
	if errs := check(scenario{fault: faultKill}, withVU(14*ms), cleanEvs); len(errs) != 0 {
		t.Fatalf("a holder valid until before its successor's acquisition was reported: %q", errs)
	}
	if errs := check(scenario{fault: faultKill}, withVU(30*ms), append(append(cleanEvs[:2:2], ended("c1", 5, causeDone, 14*ms)), cleanEvs[2:]...)); len(errs) != 0 {
		t.Fatalf("a holder that had stopped before its successor's acquisition was reported: %q", errs)
	}
	{
		var c catcher
		res := &result{faultsTracked: true, disturbed: []disturbance{{c: "c2", from: 25 * ms, to: 35 * ms}}}
		checkHistory(&c, be, scenario{fault: faultPartition}, clean, append(cleanEvs, ended("c2", 6, causeStepDown, 30*ms)), res)
		if len(c.errs) != 0 {
			t.Fatalf("a step-down under a partition of its contender was reported: %q", c.errs)
		}
		// A paused holder's late (refused) write overlaps by design.
		c = catcher{}
		late := append(append([]op(nil), clean...), op{Seq: 4, C: "c1", Term: "c1/1", Tok: 5, Write: true, Call: 24 * ms, Ret: 25 * ms, FBefore: 2, PLost: true})
		checkHistory(&c, be, scenario{fault: faultStop, rounds: 1}, late, cleanEvs, &result{paused: map[string]bool{"c1/1": true}})
		if len(c.errs) != 0 {
			t.Fatalf("a paused holder's refused late write was reported: %q", c.errs)
		}
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
		{"contender error", scenario{fault: faultKill}, clean, append(cleanEvs, event{eventReq{C: "c1", Kind: "error", Err: "boom"}, 40 * ms, 0, 0}), "reported an error"},
		{"two tenures interleave", scenario{fault: faultKill}, with(func(o []op) []op {
			// c1 works on after c2's first operation (refused: no stale
			// write accepted, yet two holders at once).
			return append(o, op{Seq: 4, C: "c1", Term: "c1/1", Tok: 5, Call: 24 * ms, Ret: 25 * ms, FBefore: 2})
		}), cleanEvs, "interleave on the registers"},
		{"lost update on the unfenced counter", scenario{fault: faultKill}, with(func(o []op) []op {
			o[3].PLost = true
			return o
		}), cleanEvs, "lost update on the unfenced counter"},
		{"live after ValidUntil", scenario{fault: faultKill}, with(func(o []op) []op {
			o[1].Live, o[1].VU, o[1].HasVU = 1500*ms, 11*ms, true
			return o
		}), cleanEvs, "after its ValidUntil"},
		{"acquired past its renew deadline", scenario{fault: faultKill}, clean, append(cleanEvs[:3:3],
			event{eventReq{C: "c2", Kind: "acquired", Tok: 6}, 1500 * ms, 1500 * ms, 15 * ms}), "a grant that came too late was handed out"},
		{"early takeover", scenario{fault: faultKill}, withVU(30 * ms), cleanEvs, "early takeover"},
		{"loss without a fault", scenario{fault: faultKill}, clean,
			append(cleanEvs, ended("c2", 6, causeLost, 30*ms)), "with no fault on its contender"},
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
