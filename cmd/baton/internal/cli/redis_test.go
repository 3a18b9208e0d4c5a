package cli_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
	"github.com/redis/go-redis/v9"
)

// baton lock and status on a real redis-server, and on a Redlock of three.
func TestRedisBackends(t *testing.T) {
	t.Parallel()
	one := testenv.StartRedis(t)
	three := []*testenv.RedisServer{testenv.StartRedis(t), testenv.StartRedis(t), testenv.StartRedis(t)}
	for _, tc := range []struct {
		backend string
		urls    []string
	}{
		{"redis", []string{one.URL()}},
		{"redlock", []string{three[0].URL(), three[1].URL(), three[2].URL()}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			args := func(cmd string, rest ...string) []string {
				a := []string{cmd, "--backend", tc.backend}
				for _, u := range tc.urls {
					a = append(a, "--redis-url", u)
				}
				return append(a, rest...)
			}
			f := newFence(t)
			holder := startCLI(t, "holder", f.env(), append(args("lock", "--name", "nightly", "--identity", "host-a"),
				append(timing, "--", exe(), cmdFenceWorker)...)...)
			first := f.waitWrite(t, "write by the holder", 15*time.Second, false, func(fenceWrite) bool { return true })
			if first.Holder != "host-a" || first.Token == 0 {
				t.Fatalf("first write %+v, want a token by host-a", first)
			}
			code, _, stderr := runCLI(t, args("lock", "--name", "nightly", "--identity", "host-b", "--wait", "0", "--", "true")...)
			if code != 75 || !strings.Contains(stderr, `"host-a"`) {
				t.Fatalf("second lock: exit %d, stderr %q; want 75 naming host-a", code, stderr)
			}
			code, out, stderr := runCLI(t, args("status", "nightly")...)
			if code != 0 || !strings.Contains(out, "host-a") {
				t.Fatalf("status: exit %d, stdout %q, stderr %q", code, out, stderr)
			}
			holder.signal(syscall.SIGTERM) // forwarded; the worker exits, baton releases
			holder.wait(15 * time.Second)
			code, _, stderr = runCLI(t, args("lock", "--name", "nightly", "--wait", "0", "--", "true")...)
			if code != 0 {
				t.Fatalf("lock after the holder released: exit %d, stderr %q", code, stderr)
			}
			// A free lock's TTL is unknown on Redis: "-", not "0ms".
			code, out, _ = runCLI(t, args("status", "nightly", "-o", "wide")...)
			if fields := strings.Fields(strings.Split(out, "\n")[1]); code != 0 || len(fields) < 7 || fields[1] != "<none>" || fields[6] != "-" {
				t.Errorf("status -o wide of the free lock: exit %d:\n%s\nwant HOLDER <none> and TTL -", code, out)
			}
			f.checkFencing(t)
		})
	}
}

// baton lock and status reach a Sentinel-managed primary and a Redis
// Cluster through their documented URL forms; bad topology URLs are usage
// errors.
func TestRedisTopologies(t *testing.T) {
	t.Parallel()
	sentinel := testenv.StartRedisSentinel(t)
	cluster := testenv.StartRedisCluster(t, 3)
	for _, url := range []string{sentinel.URL(), cluster.URL()} {
		code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", url, "--name", "topo", "--wait", "0", "--", "true")
		if code != 0 {
			t.Fatalf("lock via %s: exit %d:\n%s", url, code, stderr)
		}
		code, out, stderr := runCLI(t, "status", "--backend", "redis", "--redis-url", url, "topo", "-o", "json")
		if code != 0 || !strings.Contains(out, `"name": "topo"`) {
			t.Errorf("status via %s: exit %d:\n%s%s", url, code, out, stderr)
		}
		// doctor asks the primary, or one cluster node, about the user's rights.
		code, out, stderr = runCLI(t, "doctor", "--backend", "redis", "--redis-url", url, "--name", "topo")
		if got := doctorTable(t, out)["permissions "+url]; code != 0 || got.result != "PASS" {
			t.Errorf("doctor via %s: exit %d, permissions row %+v, want PASS:\n%s%s", url, code, got, out, stderr)
		} else if cl := strings.HasPrefix(url, "redis+cluster"); cl != strings.Contains(got.detail, "ACL users are set node by node") {
			t.Errorf("doctor via %s: permissions row %q; want it to say that one node was asked if and only if the URL is a cluster's", url, got.detail)
		}
	}
	for _, bad := range []string{"redis+sentinel://127.0.0.1:26379", "redis+cluster://127.0.0.1:7000"} {
		if code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", bad, "--name", "topo", "--", "true"); code != cli.ExitUsage {
			t.Errorf("lock --redis-url %s: exit %d, want %d:\n%s", bad, code, cli.ExitUsage, stderr)
		}
	}
}

// A Redis with a private CA that requires client certificates: --cacert,
// --cert and --key reach it through a rediss:// URL, for lock and doctor;
// without the CA the certificate is not trusted (78), without a client
// certificate the server refuses (78), and the TLS flags beside a plain
// redis:// URL are a usage error.
func TestRedisMutualTLS(t *testing.T) {
	t.Parallel()
	files, _ := testenv.WriteTLSFiles(t)
	files.AuthClients = true
	other, _ := testenv.WriteTLSFiles(t)
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(files))
	base := []string{"--backend", "redis", "--redis-url", srv.URL(), "--name", "job"}
	withTLS := append(slices.Clone(base), "--cacert", files.CAFile, "--cert", files.CertFile, "--key", files.KeyFile)

	code, _, stderr := runCLI(t, append(append([]string{"lock"}, withTLS...), "--wait", "0", "--", "true")...)
	if code != 0 {
		t.Fatalf("lock with the CA and a client certificate: exit %d:\n%s", code, stderr)
	}
	code, out, _ := runCLI(t, append([]string{"doctor"}, withTLS...)...)
	rows := doctorTable(t, out)
	for _, name := range []string{"store", "persistence " + srv.URL(), "eviction " + srv.URL(), "permissions " + srv.URL()} {
		if row := rows[name]; row.result != "PASS" && row.result != "WARN" {
			t.Errorf("doctor with the CA and a client certificate: row %q %+v, want it answered (exit %d)\n%s", name, row, code, out)
		}
	}
	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		want  string
	}{
		{"no CA", nil, cli.ExitConfig, "signed by an authority the client does not trust"},
		{"no client certificate", []string{"--cacert", files.CAFile}, cli.ExitConfig, "requires a client certificate"},
		{"missing CA file", []string{"--cacert", files.CAFile + ".missing"}, cli.ExitConfig, "CA file"},
		// A client certificate of a CA the server does not trust yet (a
		// CA rotation done in the wrong order).
		{"client certificate of another CA", []string{"--cacert", files.CAFile, "--cert", other.CertFile, "--key", other.KeyFile}, cli.ExitConfig, "does not accept the client certificate (--cert): it must trust the CA that issued it"},
	} {
		args := append(append(append([]string{"lock"}, base...), tc.flags...), "--wait", "0", "--", "true")
		if code, _, stderr := runCLI(t, args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", tc.name, code, tc.code, tc.want, stderr)
		}
	}
	plain := "redis://" + srv.Addr()
	code, _, stderr = runCLI(t, "lock", "--backend", "redis", "--redis-url", plain, "--cacert", files.CAFile, "--name", "job", "--", "true")
	if code != cli.ExitUsage || !strings.Contains(stderr, "does not use it") {
		t.Errorf("--cacert with a redis:// URL: exit %d, want %d:\n%s", code, cli.ExitUsage, stderr)
	}
}

// A client certificate renewed on disk while baton holds a lock over
// mutual TLS: the server now trusts only the new certificate's CA, as it
// refuses an old certificate once it has expired, and drops baton's
// connections (a restart, a network fault). The holder reconnects with the
// certificate in the files and renews on. Before, --cert and --key were
// read once at start: every reconnection presented the old certificate,
// the server refused the handshake, and the holder stepped down at its
// renew deadline and exited 78, for a certificate that had been renewed
// in time.
func TestRedisClientCertRenewed(t *testing.T) {
	t.Parallel()
	old, oldCAs := testenv.WriteTLSFiles(t)
	old.AuthClients = true
	srv := testenv.StartRedis(t, testenv.WithRedisTLS(old))
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(cert, key string) { // as a Secret volume updates: by rename
		testenv.InstallFile(t, certFile, cert)
		testenv.InstallFile(t, keyFile, key)
	}
	install(old.CertFile, old.KeyFile)

	ctx := t.Context()
	adminCert, err := tls.LoadX509KeyPair(old.CertFile, old.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// One connection, opened before the switch, which CLIENT KILL skips.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxIdleConns: 1, ConnMaxIdleTime: -1,
		TLSConfig: &tls.Config{RootCAs: oldCAs, Certificates: []tls.Certificate{adminCert}}})
	defer admin.Close()

	holder := startCLI(t, "holder", nil, append([]string{"lock", "--backend", "redis", "--redis-url", srv.URL(),
		"--cacert", old.CAFile, "--cert", certFile, "--key", keyFile, "--name", "job", "--log-level", "debug"},
		append(timing, "--", "sleep", "600")...)...)
	holder.stderr.waitFor(t, "acquired", 15*time.Second)

	renewed, _ := testenv.WriteTLSFiles(t) // a certificate of another CA
	install(renewed.CertFile, renewed.KeyFile)
	if err := admin.ConfigSet(ctx, "tls-ca-cert-file", renewed.CAFile).Err(); err != nil {
		t.Fatal(err)
	}
	// The holder renews on a new connection, or steps down when the
	// server refuses it.
	killAndAwaitRenewal(t, admin, holder, "the switch to the new CA")
	stopHolder(t, holder)
}

// killAndAwaitRenewal closes every connection to the server admin is
// connected to but admin's own (CLIENT KILL), and waits for holder to
// renew on a new connection. It fails the test, saying after what, if
// holder exits first or does not renew within 30s.
func killAndAwaitRenewal(t *testing.T, admin *redis.Client, holder *proc, after string) {
	t.Helper()
	ctx := t.Context()
	lastID, err := admin.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"normal", "pubsub"} {
		if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	awaitRenewal(t, admin, holder, lastID, after)
}

// awaitRenewal waits until holder renews on a connection to admin's
// server newer than client lastID, failing t if holder exits or 30s
// pass first.
func awaitRenewal(t *testing.T, admin *redis.Client, holder *proc, lastID int64, after string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !renewsOnNewConnection(t, admin, lastID) {
		select {
		case <-holder.done:
			t.Fatalf("after %s, the holder exited %d without renewing on a new connection:\n%s", after, holder.code, holder.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, the holder did not renew on a new connection within 30s:\n%s", after, holder.stderr)
		}
	}
}

// stopHolder checks that holder, a baton lock running sleep, never lost
// its lock, and stops it with SIGTERM, which it passes to its command.
func stopHolder(t *testing.T, holder *proc) {
	t.Helper()
	if strings.Contains(holder.stderr.String(), "lock lost") {
		t.Errorf("the holder lost its lock:\n%s", holder.stderr)
	}
	holder.signal(syscall.SIGTERM)
	if code := holder.wait(15 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("holder: exit %d after SIGTERM, want %d (its command's)", code, 128+int(syscall.SIGTERM))
	}
}

// renewsOnNewConnection reports whether a client with an ID above lastID
// has run a script (a renewal) on the server admin is connected to.
func renewsOnNewConnection(t *testing.T, admin *redis.Client, lastID int64) bool {
	t.Helper()
	list, err := admin.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(list) {
		var id int64
		var cmd string
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "id":
				id, _ = strconv.ParseInt(v, 10, 64)
			case "cmd":
				cmd = v
			}
		}
		if id > lastID && strings.HasPrefix(cmd, "eval") {
			return true
		}
	}
	return false
}

// A store that goes silent while lock waits: the waiter sleeps on its
// watch until the claim it saw can end, so its last answer ("held") can be
// older than the silence. At the end of --wait lock asks once more, and
// exits 69 (not 75, "still held") when the store does not answer.
func TestWaitEndsOnSilentRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	args := func(rest ...string) []string {
		return append([]string{"lock", "--backend", "redis", "--redis-url", srv.URL(), "--name", "job"}, rest...)
	}
	holder := startCLI(t, "holder", nil, args("--identity", "host-a", "--log-level", "debug", "--", "sleep", "600")...)
	holder.stderr.waitFor(t, "acquired", 15*time.Second)

	code, _, stderr := runCLI(t, args("--wait", "500ms", "--", "true")...)
	if code != cli.ExitHeld || !strings.Contains(stderr, `still held by "host-a"`) {
		t.Fatalf("waiting on the answering server: exit %d, want %d naming host-a:\n%s", code, cli.ExitHeld, stderr)
	}

	waiter := startCLI(t, "waiter", nil, args("--wait", "5s", "--connect-timeout", "2s", "--", "true")...)
	waiter.stderr.waitFor(t, "waiting for the lock", 15*time.Second)
	srv.Pause()
	t.Cleanup(srv.Resume)
	if code := waiter.wait(60 * time.Second); code != cli.ExitUnavailable || !strings.Contains(waiter.stderr.String(), "the store then did not answer within 2s") {
		t.Errorf("waiting while the server is stopped: exit %d, want %d saying the store did not answer:\n%s", code, cli.ExitUnavailable, waiter.stderr)
	}
}

// status --watch over many locks watches a few of them, not one each (a
// watch per lock cost the store thousands of watches; on Kubernetes, one
// API watch per lock behind the client's rate limit delayed the view's
// reads by minutes), and still prints a change of a lock it does not
// watch, from its reads every second.
func TestStatusWatchManyLocks(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 40
	var last backend.Grant
	for i := range n {
		if last, err = s.TryAcquire(ctx, fmt.Sprintf("many-%02d", i), backend.Request{Holder: "h", Nonce: "n", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	out, errb := newSyncBuffer(), newSyncBuffer()
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(wctx, []string{"status", "--watch", "--backend", "redis", "--redis-url", srv.URL()}, nil, out, errb)
	}()
	out.waitFor(t, "many-39", 10*time.Second)
	if err := s.Release(ctx, last); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "\n\nNAME", 10*time.Second) // the watches were opened before the view read again
	channels, err := c.PubSubChannels(ctx, "baton:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(channels) > 2*16 { // each watched lock: its notice and handoff channels
		t.Errorf("status --watch over %d locks subscribed to %d channels, want those of at most 16 locks", n, len(channels))
	}
	stop()
	if code := <-done; code != 0 {
		t.Errorf("exit code %d; stderr: %s", code, errb)
	}
}
