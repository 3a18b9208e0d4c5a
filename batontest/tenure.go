package batontest

import (
	"cmp"
	"slices"
	"sync"
	"testing"
	"time"
)

// The contention subtests check exclusivity from what each holder saw,
// after the run, rather than with a counter of holders inside the critical
// section: on a busy machine a holder can be descheduled inside it for
// longer than its lease lasts, and then another holder may rightly start.
// What must never happen is two holders at once while both are valid.

// A tenure is one holder's time in the critical section, on this process's
// monotonic clock (every contender runs in this process, so their times
// compare).
type tenure struct {
	holder string
	token  uint64
	// start is taken after the grant returned, so the store granted the
	// claim before it.
	start time.Time
	// end is taken before the release was sent, or is the end of the
	// holder's validity if that came first: the claim was the holder's
	// alone until end.
	end time.Time
}

// tenures collects the tenures of one run; add is safe for concurrent use.
type tenures struct {
	mu   sync.Mutex
	list []tenure
}

// add records a tenure that began at start and ended at left (taken before
// the release was sent) or at validUntil, whichever is earlier.
func (ts *tenures) add(holder string, token uint64, start, left, validUntil time.Time) {
	end := left
	if validUntil.Before(end) {
		end = validUntil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.list = append(ts.list, tenure{holder, token, start, end})
}

// check reports a repeated token, and a tenure that started before the
// tenure of a smaller token ended: the store then granted the larger token
// while the holder of the smaller one was still valid and had not
// released, which is two holders at once (or a token that did not
// increase from one holder to the next). A tenure that started only after
// its own validity ended (a holder descheduled between the grant and the
// critical section) overlaps nothing.
func (ts *tenures) check(t *testing.T) {
	t.Helper()
	ts.mu.Lock()
	list := slices.Clone(ts.list)
	ts.mu.Unlock()
	slices.SortFunc(list, func(a, b tenure) int { return cmp.Compare(a.token, b.token) })
	const shown = 5 // violations reported in full; the rest are counted
	violations := 0
	report := func(format string, args ...any) {
		t.Helper()
		if violations++; violations <= shown {
			t.Errorf(format, args...)
		}
	}
	var latest tenure // the tenure with the latest end among smaller tokens
	for i, cur := range list {
		if i > 0 && cur.token == list[i-1].token {
			report("token %d was granted twice (to %q and %q); tokens must strictly increase", cur.token, list[i-1].holder, cur.holder)
		}
		if i > 0 && cur.start.Before(latest.end) {
			report("two holders at once: %q with token %d was in the critical section %v before %q with the smaller token %d left it (while still valid)",
				cur.holder, cur.token, latest.end.Sub(cur.start), latest.holder, latest.token)
		}
		if i == 0 || cur.end.After(latest.end) {
			latest = cur
		}
	}
	if violations > shown {
		t.Errorf("%d violations in %d tenures in all", violations, len(list))
	}
}

// holders returns the number of distinct holders that had a tenure.
func (ts *tenures) holders() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	seen := map[string]bool{}
	for _, tn := range ts.list {
		seen[tn.holder] = true
	}
	return len(seen)
}
