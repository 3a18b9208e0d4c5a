package cli_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Test 8: the demo runs to completion and shows a takeover with a larger
// token after the crash, and a handover after the SIGTERM.
func TestDemo(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := startCLI(t, "demo", nil, "demo")
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d; stdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	out := p.stdout.String()
	t.Logf("demo took %v", time.Since(start).Round(time.Millisecond))
	_, timeline, ok := strings.Cut(out, "\nTimeline:\n")
	if !ok {
		t.Fatalf("no timeline:\n%s", out)
	}
	// On a busy machine a leader may step down and lead again: the story
	// then has more leaders. What must hold: tokens only grow, the crashed
	// replica never leads after its crash, and the crash and the handover
	// are told.
	leads := regexp.MustCompile(`\+\d+\.\d\ds\s+(replica-\d) leads \(token (\d+)\)`).FindAllStringSubmatch(timeline, -1)
	if len(leads) < 3 {
		t.Fatalf("want at least 3 leaders in the timeline:\n%s", timeline)
	}
	var prev uint64
	for _, m := range leads {
		tok, _ := strconv.ParseUint(m[2], 10, 64)
		if tok <= prev {
			t.Errorf("token %d after %d: tokens must grow:\n%s", tok, prev, timeline)
		}
		prev = tok
	}
	crashed := regexp.MustCompile(`SIGKILL (replica-\d)'s supervisor`).FindStringSubmatch(timeline)
	if crashed == nil {
		t.Fatalf("timeline lacks the crash:\n%s", timeline)
	}
	_, afterCrash, _ := strings.Cut(timeline, crashed[0])
	if strings.Contains(afterCrash, crashed[1]+" leads") {
		t.Errorf("%s led after its crash:\n%s", crashed[1], timeline)
	}
	if !regexp.MustCompile(`replica-\d.s CMD \(pid \d+\) is gone too`).MatchString(out) {
		t.Errorf("the crashed replica's CMD was not seen to die:\n%s", out)
	}
	for _, want := range []string{"after the crash", "SIGTERM replica-", "after the SIGTERM"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("timeline lacks %q:\n%s", want, timeline)
		}
	}
	// Workers printed their tokens.
	if !regexp.MustCompile(`\[replica-\d\] token \d+: working`).MatchString(out) {
		t.Errorf("no worker output with a token:\n%s", out)
	}
	// The temporary directory is gone.
	m := regexp.MustCompile(`on the file backend in (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo did not name its directory:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("demo directory %s left behind (%v)", m[1], err)
	}
}
