package cli

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

func newTestWaitReporter(t *testing.T) (*waitReporter, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	r := newWaitReporter(slog.New(slog.NewTextHandler(&out, nil)), "jobs")
	t.Cleanup(r.Close)
	return r, &out
}

// lastLine returns the last line of out.
func lastLine(out *bytes.Buffer) string {
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1]
}

// While the store does not answer, the minute's reminder says so instead
// of naming the holder an attempt saw before the outage as holding the
// lock, with the claim's end as estimated then.
func TestWaitReminderDuringOutage(t *testing.T) {
	r, out := newTestWaitReporter(t)
	r.Observe(baton.Event{Kind: baton.EventHeld, Name: "jobs", Holder: "pod-a", Token: 7, Duration: 15 * time.Second})
	r.Observe(baton.Event{Kind: baton.EventAcquireFailed, Name: "jobs", Holder: "me",
		Err: fmt.Errorf("%w: i/o timeout", baton.ErrUnavailable)})
	r.remindOnce()
	line := lastLine(out)
	if !strings.Contains(line, "still waiting") || !strings.Contains(line, "i/o timeout") || strings.Contains(line, "expires_in") || strings.Contains(line, " holder=") {
		t.Errorf("reminder during an outage:\n%s\nwant it to say the last attempt failed (with its error), and no holder or claim end as if the lock were held", line)
	}

	// An attempt answered again: the reminder names the holder it saw.
	r.Observe(baton.Event{Kind: baton.EventHeld, Name: "jobs", Holder: "pod-a", Token: 7, Duration: 15 * time.Second})
	r.remindOnce()
	if line := lastLine(out); !strings.Contains(line, "holder=pod-a") || strings.Contains(line, "i/o timeout") {
		t.Errorf("reminder once the store answers again:\n%s\nwant the holder, not the outage", line)
	}
}

// The reminder's expires_in is the latest attempt's estimate, not the
// first one's: the holder renews, and the first estimate is a minute old.
func TestWaitReminderExpiryIsCurrent(t *testing.T) {
	r, out := newTestWaitReporter(t)
	r.Observe(baton.Event{Kind: baton.EventHeld, Name: "jobs", Holder: "pod-a", Token: 7, Duration: 15 * time.Second})
	r.Observe(baton.Event{Kind: baton.EventHeld, Name: "jobs", Holder: "pod-a", Token: 7, Duration: 3 * time.Second})
	r.remindOnce()
	if line := lastLine(out); !strings.Contains(line, "expires_in=3s") && !strings.Contains(line, "expires_in=2.99") {
		t.Errorf("reminder:\n%s\nwant expires_in from the latest attempt (3s), not the first (15s)", line)
	}
}
