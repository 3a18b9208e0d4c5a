package cli_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// --app keeps two applications' locks of one name apart on etcd and Redis,
// as it does on Kubernetes: while application reports holds "nightly",
// application billing and a command without --app each take their own
// "nightly", reports' second replica is refused (exit 75), and the held
// claim lives under reports' key prefix.
func TestAppKeepsLockNamesApart(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	r := testenv.StartRedis(t)
	for _, tc := range []struct {
		backend string
		flags   []string
		claim   func(ctx context.Context) (bool, error) // reports' claim of nightly exists
	}{
		{"etcd", []string{"--endpoints", e.Endpoint()}, func(ctx context.Context) (bool, error) {
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
			if err != nil {
				return false, err
			}
			defer c.Close()
			resp, err := c.Get(ctx, "/baton/apps/reports/nightly", clientv3.WithCountOnly())
			return err == nil && resp.Count == 1, err
		}},
		{"redis", []string{"--redis-url", r.URL()}, func(ctx context.Context) (bool, error) {
			opt, err := redis.ParseURL(r.URL())
			if err != nil {
				return false, err
			}
			c := redis.NewClient(opt)
			defer c.Close()
			keys, err := c.Keys(ctx, "baton:reports:{nightly}:*").Result()
			return len(keys) > 0, err
		}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			args := func(cmd string, rest ...string) []string {
				return append(append([]string{cmd, "--backend", tc.backend}, tc.flags...), rest...)
			}
			f := newFence(t)
			holder := startCLI(t, "holder", f.env(), append(args("lock", "--app", "reports", "--name", "nightly", "--identity", "host-a"),
				append(timing, "--", exe(), cmdFenceWorker)...)...)
			f.waitWrite(t, "write by the holder", 15*time.Second, false, func(fenceWrite) bool { return true })
			for _, other := range [][]string{{"--app", "billing"}, nil} {
				if code, _, stderr := runCLI(t, args("lock", append(other, "--name", "nightly", "--wait", "0", "--", "true")...)...); code != 0 {
					t.Errorf("lock %v nightly while reports holds it: exit %d, stderr %q; want 0, a lock of its own", other, code, stderr)
				}
			}
			code, _, stderr := runCLI(t, args("lock", "--app", "reports", "--name", "nightly", "--wait", "0", "--", "true")...)
			if code != 75 || !strings.Contains(stderr, `"host-a"`) {
				t.Errorf("reports' second replica: exit %d, stderr %q; want 75 naming host-a", code, stderr)
			}
			if code, out, stderr := runCLI(t, args("status", "--app", "reports", "nightly")...); code != 0 || !strings.Contains(out, "host-a") {
				t.Errorf("status --app reports: exit %d, stdout %q, stderr %q; want host-a", code, out, stderr)
			}
			if ok, err := tc.claim(t.Context()); !ok {
				t.Errorf("reports' claim of nightly is not under its prefix (err %v)", err)
			}
			holder.signal(syscall.SIGTERM)
			holder.wait(15 * time.Second)
			f.checkFencing(t)
		})
	}
}
