package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
)

// A Redis 200 ms away (100 ms each way through a proxy): the round trip
// row measures it and judges it against the timing flags. With --ttl 1s a
// renew has 333 ms before the renew deadline, less than two round trips:
// it fails, naming a TTL that would work; with a retry period shorter than
// the round trip it warns; the defaults pass.
func TestDoctorRoundTrip(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetLatency(100 * time.Millisecond)
	url := "redis://" + p.Addr()
	for _, tc := range []struct {
		name   string
		flags  []string
		code   int
		result string
		detail string // a part of the row's detail
		fix    string // a part of the row's fix; none if empty
	}{
		{"ttl 1s", []string{"--ttl", "1s"}, 1, "FAIL", "less than two round trips before the renew deadline 666.666666ms", "give --ttl 3s or more"},
		{"short retry period", []string{"--ttl", "10s", "--retry-period", "100ms"}, 0, "WARN", "longer than the retry period 100ms", "give a --retry-period longer than the round trip"},
		{"defaults", nil, 0, "PASS", "within the retry period 2s", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, append([]string{"doctor", "--backend", "redis", "--redis-url", url, "--name", "job"}, tc.flags...)...)
			t.Logf("doctor:\n%s", out)
			row := doctorTable(t, out)["round trip"]
			if code != tc.code || row.result != tc.result || !strings.Contains(row.detail, tc.detail) || !strings.Contains(row.detail, "the store answers a read in ") {
				t.Errorf("exit %d, round trip row %+v (stderr %s); want exit %d and %s with %q", code, row, stderr, tc.code, tc.result, tc.detail)
			}
			if fix := doctorFix(out, "round trip"); !strings.Contains(fix, tc.fix) || (tc.fix == "") != (fix == "") {
				t.Errorf("fix %q, want one with %q", fix, tc.fix)
			}
		})
	}
}

// A Redlock with one server of three 200 ms away: acquires and renewals
// wait for a quorum, so the row judges the quorum's round trip, not the
// slowest server's (a read of the lock waits for that one, and judged by it
// the row failed --ttl 1s, which works); it warns that the far server, past
// a tenth of the TTL, counts as failed at every renewal.
func TestDoctorRoundTripRedlock(t *testing.T) {
	t.Parallel()
	near1, near2, far := testenv.StartRedis(t), testenv.StartRedis(t), testenv.StartRedis(t)
	p, err := faultproxy.New(far.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetLatency(100 * time.Millisecond)
	urls := []string{"--redis-url", near1.URL(), "--redis-url", near2.URL(), "--redis-url", "redis://" + p.Addr()}
	for _, tc := range []struct {
		ttl, result, detail, fix string
	}{
		{"1s", "WARN", "the slowest server answers more than a tenth of the TTL (100ms) after the quorum", "replace that server by one as near as the others"},
		{"15s", "PASS", "within the retry period 2s", ""},
	} {
		t.Run(tc.ttl, func(t *testing.T) {
			code, out, stderr := runCLI(t, append([]string{"doctor", "--backend", "redlock", "--name", "job", "--ttl", tc.ttl}, urls...)...)
			t.Logf("doctor:\n%s", out)
			row := doctorTable(t, out)["round trip"]
			if code != 0 || row.result != tc.result || !strings.Contains(row.detail, tc.detail) || !strings.Contains(row.detail, "a quorum of 2 servers answers in ") {
				t.Errorf("exit %d, round trip row %+v (stderr %s); want exit 0 and %s with %q", code, row, stderr, tc.result, tc.detail)
			}
			if fix := doctorFix(out, "round trip"); !strings.Contains(fix, tc.fix) || (tc.fix == "") != (fix == "") {
				t.Errorf("fix %q, want one with %q", fix, tc.fix)
			}
		})
	}
}
