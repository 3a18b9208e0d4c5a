//go:build linux

package safety

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// result is what one scenario measured: a row of the report.
type result struct {
	backend, fault string
	ops            int // operations on the fenced register (reads and writes)
	acquisitions   int
	faults         int
	staleWrites    int // fenced writes refused: stale writes attempted
	staleReads     int // fenced reads refused
	staleAccepted  int // must be 0
	plainLost      int // lost updates on the unfenced counter
	plainStale     int // writes with an older holder's token the unfenced counter took
	twoHolders     int // pairs of tenures interleaved on the unfenced counter
	takeovers      []time.Duration
	margins        []time.Duration // partition: from the holder's step-down to the successor's acquisition
	linearizable   string
	elapsed        time.Duration
}

// reporter is the part of *testing.T the checker uses, so that its own
// test can catch what it reports.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// checkHistory checks the recorded history of one scenario; see the
// package documentation for what each check means.
func checkHistory(t reporter, be *backendEnv, sc scenario, ops []op, evs []event, res *result) {
	t.Helper()
	res.ops = len(ops)

	// 1. The fenced register never accepted a stale token, and never
	//    refused a current one: accepted tokens never go down.
	var top uint64
	var accepted int
	for _, o := range ops {
		switch {
		case o.OK && o.Tok < top:
			res.staleAccepted++
			t.Errorf("stale op accepted: %+v after token %d", o, top)
		case o.OK:
			top = o.Tok
			accepted++
		case o.Tok >= top:
			t.Errorf("op with the current token refused: %+v (largest accepted %d)", o, top)
		case o.Write:
			res.staleWrites++
		default:
			res.staleReads++
		}
		if o.Write {
			if o.PLost {
				res.plainLost++
			}
			if o.PStale {
				res.plainStale++
			}
		}
	}
	// 2. Never two holders in one interval as the register sees them: the
	//    accepted operations of each token form one contiguous run, each
	//    run belongs to one tenure, and no increment was lost.
	type span struct {
		first, last int
		term        string
	}
	spans := map[uint64]*span{}
	var order []uint64
	for _, o := range ops {
		if !o.OK {
			continue
		}
		s, ok := spans[o.Tok]
		if !ok {
			spans[o.Tok] = &span{first: o.Seq, last: o.Seq, term: o.Term}
			order = append(order, o.Tok)
			continue
		}
		if s.term != o.Term {
			t.Errorf("token %d used by two tenures: %s and %s (op %d)", o.Tok, s.term, o.Term, o.Seq)
		}
		s.last = o.Seq
	}
	for i := 1; i < len(order); i++ {
		a, b := spans[order[i-1]], spans[order[i]]
		if b.first < a.last {
			t.Errorf("two holders at once on the fenced register: token %d (ops %d..%d) and token %d (ops %d..%d)",
				order[i-1], a.first, a.last, order[i], b.first, b.last)
		}
	}
	for _, o := range ops {
		if o.Write && o.OK && o.FIn != o.FBefore+1 {
			t.Errorf("lost update on the fenced register: op %d wrote %d over %d", o.Seq, o.FIn, o.FBefore)
		}
	}

	// 3. Tokens strictly increase per lock, as acquired: unique, and an
	//    acquisition that started after another was reported has a larger
	//    token.
	type acq struct {
		c        string
		tok      uint64
		locking  time.Duration
		acquired time.Duration
	}
	var acqs []acq
	lockingAt := map[string]time.Duration{}
	seen := map[uint64]string{}
	for _, e := range evs {
		switch e.Kind {
		case "locking":
			lockingAt[e.C] = e.At
		case "acquired":
			if other, dup := seen[e.Tok]; dup {
				t.Errorf("token %d granted twice: to %s and %s", e.Tok, other, e.C)
			}
			seen[e.Tok] = e.C
			acqs = append(acqs, acq{e.C, e.Tok, lockingAt[e.C], e.At})
		case "error":
			t.Errorf("contender %s reported an error: %s", e.C, e.Err)
		}
	}
	res.acquisitions = len(acqs)
	for _, y := range acqs {
		for _, x := range acqs {
			if x.acquired < y.locking && y.tok <= x.tok {
				t.Errorf("token order: %s acquired token %d at %v, and %s, which started locking later (%v), got %d",
					x.c, x.tok, x.acquired, y.c, y.locking, y.tok)
			}
		}
	}

	// What the unfenced counter saw: pairs of tenures whose operations
	// interleave (two holders at once, as a resource that does not check
	// tokens sees them).
	res.twoHolders = countInterleavings(ops)

	// 4. The fenced register's history is linearizable for a register
	//    that accepts an operation only if its token is at least the
	//    largest accepted.
	res.linearizable = checkLinearizable(t, ops)

	// 5. What the faults must show: a paused holder did try to write with
	//    its old token (and the unfenced counter took it); without a pause
	//    the holder stopped before anyone else started, so even the
	//    unfenced counter saw no older holder's write.
	switch sc.fault {
	case faultStopAny:
		// A pause at a random instant may or may not fall between a read
		// and its write: stale writes may come, none may be accepted.
	case faultStop:
		if res.staleWrites < sc.rounds {
			t.Errorf("%d stale writes attempted, want at least one per pause (%d)", res.staleWrites, sc.rounds)
		}
	default:
		if res.plainStale > 0 {
			t.Errorf("%d writes by an older holder reached the unfenced counter: a holder kept working after a successor started", res.plainStale)
		}
	}
	if res.staleAccepted > 0 {
		t.Errorf("%d stale writes accepted", res.staleAccepted)
	}
	t.Logf("%s / %s: %d ops, %d acquisitions, %d faults, %d stale writes refused (%d reads), %d accepted; unfenced: %d lost updates, %d stale writes; takeovers %v; step-down to takeover %v; %s",
		be.name, sc.fault, res.ops, res.acquisitions, res.faults, res.staleWrites, res.staleReads, res.staleAccepted,
		res.plainLost, res.plainStale, roundAll(res.takeovers), roundAll(res.margins), res.linearizable)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// The porcupine model: a fenced register.
type regState struct {
	max uint64
	val int64
}

type regIn struct {
	write bool
	tok   uint64
	val   int64
}

type regOut struct {
	ok  bool
	val int64
}

var fencedModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regIn), output.(regOut)
		if in.tok < s.max {
			return !out.ok, s
		}
		if in.write {
			return out.ok, regState{in.tok, in.val}
		}
		return out.ok && out.val == s.val, regState{in.tok, s.val}
	},
	Equal: func(a, b any) bool { return a == b },
	DescribeOperation: func(input, output any) string {
		in, out := input.(regIn), output.(regOut)
		if in.write {
			return fmt.Sprintf("write(%d, tok %d) -> %v", in.val, in.tok, out.ok)
		}
		return fmt.Sprintf("read(tok %d) -> %v %d", in.tok, out.ok, out.val)
	},
}

// checkLinearizable checks the fenced register's history with porcupine,
// using the call and return times the register recorded.
func checkLinearizable(t reporter, ops []op) string {
	t.Helper()
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in := regIn{write: o.Write, tok: o.Tok, val: o.FIn}
		out := regOut{ok: o.OK, val: o.FOut}
		id, _ := strconv.Atoi(strings.TrimPrefix(o.C, "c"))
		hist = append(hist, porcupine.Operation{ClientId: id, Input: in, Output: out, Call: int64(o.Call), Return: int64(o.Ret)})
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(fencedModel, hist, time.Minute)
	took := time.Since(start).Round(time.Millisecond)
	switch res {
	case porcupine.Ok:
		return fmt.Sprintf("linearizable (%d ops, checked in %v)", len(hist), took)
	case porcupine.Illegal:
		t.Errorf("the fenced register's history (%d ops) is not linearizable", len(hist))
		return "NOT linearizable"
	default:
		t.Errorf("porcupine gave no answer within a minute on %d ops", len(hist))
		return "unknown"
	}
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}
