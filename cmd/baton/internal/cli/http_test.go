package cli_test

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var addrRe = regexp.MustCompile(`serving /healthz, /readyz, /leader and /metrics.* addr=(\S+)`)

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

// awaitStatus polls url until it answers code with a body that contains
// want (the probe's own view of a leadership change), failing after a
// deadline.
func awaitStatus(t *testing.T, url string, code int, want string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, body := get(t, url)
		if got == code && strings.Contains(body, want) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d %q, want %d and %q within 15s", url, got, body, code, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// /leader answers 200 only on the leader (for scripts and monitoring, not
// for readiness); the standby's turns 200 when it takes over.
func TestRunHTTPLeaderEndpoint(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	// Long timings: the roles must stay put until the SIGTERM, and on a
	// busy machine a 1.4s renew deadline can pass (a step-down is then
	// correct, but the standby would lead and count no conflict). The
	// handover is a release: it does not wait for the TTL.
	slow := []string{"--ttl", "20s", "--renew-deadline", "15s", "--retry-period", "2s"}
	withHTTP := func(args []string) []string {
		i := slices.Index(args, "--") // the later flags win: put them after runArgs's timing
		return slices.Concat([]string{"run", "--http", "127.0.0.1:0"}, args[1:i], slow, args[i:])
	}
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
	// The standby names the leader once it has read the lock; before,
	// it answers "the leader is unknown".
	awaitStatus(t, urlB+"/leader", http.StatusServiceUnavailable, "the leader is sup-a")

	a.signal(syscall.SIGTERM) // graceful: releases, sup-b takes over through the watch
	a.wait(15 * time.Second)
	awaitStatus(t, urlB+"/leader", http.StatusOK, "leading: sup-b")
	f.checkFencing(t)
}

// metricValue returns the value of the sample name{lock="lock"} in the text
// exposition of a /metrics answer, or false if there is none.
func metricValue(body, name, lock string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+`{lock="`+lock+`"}`) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// awaitMetric polls url's /metrics until name{lock} has a value that
// satisfies ok (described by want), and returns that answer.
func awaitMetric(t *testing.T, url, name, lock, want string, ok func(float64) bool) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := get(t, url+"/metrics")
		if v, found := metricValue(body, name, lock); code == http.StatusOK && found && ok(v) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s/metrics = %d, want %s{lock=%q} %s within 15s; got:\n%s", url, code, name, lock, want, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func is(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// /metrics exports baton_leader 1 on the leader and 0 on the standby, for
// the lock name, and they swap when the leader hands over.
func TestRunHTTPMetrics(t *testing.T) {
	t.Parallel()
	dir, f := t.TempDir(), newFence(t)
	// Long timings: the roles must stay put until the SIGTERM, and on a
	// busy machine a 1.4s renew deadline can pass (a step-down is then
	// correct, but the standby would lead and count no conflict). The
	// handover is a release: it does not wait for the TTL.
	slow := []string{"--ttl", "20s", "--renew-deadline", "15s", "--retry-period", "2s"}
	withHTTP := func(args []string) []string {
		i := slices.Index(args, "--") // the later flags win: put them after runArgs's timing
		return slices.Concat([]string{"run", "--http", "127.0.0.1:0"}, args[1:i], slow, args[i:])
	}
	a := startCLI(t, "sup-a", f.env(), withHTTP(runArgs(dir, "metered", "sup-a", worker()...))...)
	urlA := statusAddr(t, a)
	f.waitWrite(t, "write by sup-a", 15*time.Second, false, func(w fenceWrite) bool { return w.Holder == "sup-a" })
	b := startCLI(t, "sup-b", f.env(), withHTTP(runArgs(dir, "metered", "sup-b", worker()...))...)
	urlB := statusAddr(t, b)

	bodyA := awaitMetric(t, urlA, "baton_leader", "metered", "1", is(1))
	tokenA, _ := metricValue(bodyA, "baton_fencing_token", "metered")
	if tokenA < 1 {
		t.Errorf("leader's baton_fencing_token = %v, want its token", tokenA)
	}
	for _, family := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !strings.Contains(bodyA, "\n"+family+" ") {
			t.Errorf("/metrics lacks %s", family)
		}
	}
	// The standby exports 0 from the start, and counts the attempts that
	// found the lock held.
	bodyB := awaitMetric(t, urlB, "baton_conflicts_total", "metered", "at least 1", func(v float64) bool { return v >= 1 })
	if v, ok := metricValue(bodyB, "baton_leader", "metered"); !ok || v != 0 {
		t.Errorf("standby's baton_leader = %v (present %v), want 0", v, ok)
	}

	a.signal(syscall.SIGTERM) // graceful: releases, sup-b takes over through the watch
	a.wait(15 * time.Second)
	bodyB = awaitMetric(t, urlB, "baton_leader", "metered", "1", is(1))
	if tokenB, _ := metricValue(bodyB, "baton_fencing_token", "metered"); tokenB <= tokenA {
		t.Errorf("new leader's baton_fencing_token = %v, want more than %v", tokenB, tokenA)
	}
	if v, _ := metricValue(bodyB, "baton_leader_changes_total", "metered"); v != 2 {
		t.Errorf("standby's baton_leader_changes_total = %v, want 2 (to sup-a, to itself)", v)
	}
	f.checkFencing(t)
}
