package cli_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var addrRe = regexp.MustCompile(`serving /healthz, /readyz and /leader.* addr=(\S+)`)

// statusAddr waits for the supervisor's log line naming its HTTP address.
func statusAddr(t *testing.T, p *proc) string {
	t.Helper()
	p.stderr.waitFor(t, "serving /healthz", 15*time.Second)
	m := addrRe.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no address in:\n%s", p.stderr)
	}
	return "http://" + m[1]
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// awaitStatus polls url until it answers code (the probe's own view of a
// leadership change), failing after a deadline.
func awaitStatus(t *testing.T, url string, code int) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, body := get(t, url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d %q, want %d within 15s", url, got, body, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// /leader answers 200 only on the leader, so a readiness probe routes a
// Service to it; the standby turns ready when it takes over.
func TestRunHTTPLeaderEndpoint(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	withHTTP := func(args []string) []string { return append([]string{"run", "--http", "127.0.0.1:0"}, args[1:]...) }
	a := startCLI(t, "sup-a", f.env(), withHTTP(runArgs(dir, "web", "sup-a", worker()...))...)
	urlA := statusAddr(t, a)
	f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" })
	b := startCLI(t, "sup-b", f.env(), withHTTP(runArgs(dir, "web", "sup-b", worker()...))...)
	urlB := statusAddr(t, b)

	for _, u := range []string{urlA, urlB} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, _ := get(t, u+path); code != http.StatusOK {
				t.Errorf("GET %s%s = %d, want 200", u, path, code)
			}
		}
	}
	if code, body := get(t, urlA+"/leader"); code != http.StatusOK || !strings.Contains(body, "leading: sup-a") {
		t.Errorf("leader's /leader = %d %q", code, body)
	}
	if body := awaitStatus(t, urlB+"/leader", http.StatusServiceUnavailable); !strings.Contains(body, "the leader is sup-a") {
		t.Errorf("standby's /leader body %q does not name the leader", body)
	}

	a.signal(syscall.SIGTERM) // graceful: releases, sup-b takes over through the watch
	a.wait(15 * time.Second)
	if body := awaitStatus(t, urlB+"/leader", http.StatusOK); !strings.Contains(body, "leading: sup-b") {
		t.Errorf("new leader's /leader body %q", body)
	}
	f.checkFencing(t)
}
