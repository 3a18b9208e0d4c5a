package cli_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// unreachableKubeconfig writes a kubeconfig whose API server does not run.
func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	return serverKubeconfig(t, "https://"+closedPort(t))
}

// serverKubeconfig writes a kubeconfig whose cluster's server is server.
func serverKubeconfig(t *testing.T, server string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gone"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "u", Namespace: "default"}
	kc.CurrentContext = "gone"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// A store that cannot be reached: lock and run try for --connect-timeout,
// with a line per attempt, then exit 69 naming the cause and the fix; the
// same on every network backend.
func TestUnreachableStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		backend string
		flags   []string
	}{
		{"redis", []string{"--redis-url", "redis://" + closedPort(t)}},
		{"etcd", []string{"--endpoints", "http://" + closedPort(t)}},
		{"lease", []string{"--kubeconfig", unreachableKubeconfig(t)}},
	} {
		for _, cmd := range []string{"lock", "run"} {
			t.Run(tc.backend+"/"+cmd, func(t *testing.T) {
				t.Parallel()
				args := append([]string{cmd, "--backend", tc.backend, "--name", "job", "--connect-timeout", "1s"}, tc.flags...)
				start := time.Now()
				code, _, stderr := runCLI(t, append(args, "--", "true")...)
				took := time.Since(start)
				if code != cli.ExitUnavailable {
					t.Fatalf("exit %d, want %d (cannot reach the store); stderr:\n%s", code, cli.ExitUnavailable, stderr)
				}
				for _, want := range []string{"cannot reach the " + tc.backend + " store", "connection refused", "--connect-timeout", "cannot reach the store; retrying"} {
					if !strings.Contains(stderr, want) {
						t.Errorf("stderr lacks %q:\n%s", want, stderr)
					}
				}
				// A hang guard, not a speed target: bounded by the flag
				// plus one attempt's own bound.
				if took > 30*time.Second {
					t.Errorf("took %v with --connect-timeout 1s", took)
				}
			})
		}
	}
}

// A Redis server that accepts connections and never answers (stopped with
// SIGSTOP) is unreachable too: retried until --connect-timeout, then 69
// naming the silence. Before, the client's read timeout (shorter than the
// default --connect-timeout) ended the first attempt with a bare "i/o
// timeout", exit 1. The flag is longer than that timeout on purpose.
func TestStoppedRedisServer(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	srv.Pause()
	t.Cleanup(srv.Resume)
	for _, cmd := range []string{"lock", "status"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			args := []string{cmd, "--backend", "redis", "--redis-url", srv.URL()}
			if cmd == "lock" { // status makes one attempt
				args = append(args, "--connect-timeout", "8s", "--name", "job", "--", "true")
			}
			code, _, stderr := runCLI(t, args...)
			if code != cli.ExitUnavailable || !strings.Contains(stderr, "did not answer in time") {
				t.Errorf("exit %d, want %d saying the server did not answer:\n%s", code, cli.ExitUnavailable, stderr)
			}
		})
	}
}

// A stopped etcd member: each connection attempt is bounded by what is
// left of --connect-timeout (it was etcdstore's 5 s default whatever the
// flag said).
func TestStoppedEtcdServer(t *testing.T) {
	t.Parallel()
	srv := testenv.StartEtcd(t, testenv.EtcdNoFsync())
	srv.Pause()
	t.Cleanup(srv.Resume)
	code, _, stderr := runCLI(t, "lock", "--backend", "etcd", "--endpoints", srv.Endpoint(), "--connect-timeout", "1s", "--name", "job", "--", "true")
	if code != cli.ExitUnavailable || !strings.Contains(stderr, "no answer within 1s") {
		t.Errorf("exit %d, want %d after attempts bounded by --connect-timeout:\n%s", code, cli.ExitUnavailable, stderr)
	}
	// doctor's store row keeps the flag too.
	code, out, _ := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", srv.Endpoint(), "--connect-timeout", "1s")
	if got := doctorTable(t, out)["store"]; code != 1 || got.result != "FAIL" || !strings.Contains(got.detail, "no answer within 1s") {
		t.Errorf("doctor: exit %d, store row %+v, want FAIL within --connect-timeout:\n%s", code, got, out)
	}
}

// doctor asks the endpoints of an etcd cluster at once: three silent
// members (SIGSTOPped) cost one endpoint check (5s), not three in a row.
func TestDoctorSilentEtcdCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartEtcdCluster(t, testenv.EtcdNoFsync())
	for _, m := range cl.Members {
		m.Pause()
		t.Cleanup(m.Resume)
	}
	start := time.Now()
	code, out, _ := runCLI(t, "doctor", "--backend", "etcd", "--endpoints", strings.Join(cl.Endpoints(), ","), "--connect-timeout", "1s")
	took := time.Since(start)
	rows := doctorTable(t, out)
	for _, ep := range cl.Endpoints() {
		if r := rows["etcd "+ep]; r.result != "FAIL" {
			t.Errorf("row of %s: %+v, want FAIL", ep, r)
		}
	}
	// Sequential checks took 3 x 5s plus the store row's second.
	if code != 1 || took >= 14*time.Second {
		t.Errorf("doctor: exit %d after %v, want 1 within 14s:\n%s", code, took.Round(time.Millisecond), out)
	}
}

// Setups that cannot work are not retried: they exit at once with the
// documented code and say what to fix.
func TestMisconfiguredStore(t *testing.T) {
	t.Parallel()
	kc, _ := kubeconfig(t)
	redisURL := testenv.StartRedis(t).URL()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"redis database out of range", []string{"--backend", "redis", "--redis-url", redisURL + "/99"}, cli.ExitConfig, "use a database number below the server's databases setting"},
		{"missing namespace", []string{"--backend", "lease", "--kubeconfig", kc, "-n", "no-such-ns"}, cli.ExitConfig, `namespace "no-such-ns" does not exist`},
		{"missing kubeconfig", []string{"--backend", "lease", "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, cli.ExitConfig, "missing"},
		// A truncated certificate-authority-data: no attempt can succeed
		// (it exited 1, an unclassified error).
		{"kubeconfig CA data not PEM", []string{"--backend", "lease", "--kubeconfig", badCAKubeconfig(t)}, cli.ExitConfig, "TLS settings cannot be used"},
		{"kubeconfig CA data not PEM, crd", []string{"--backend", "crd", "--kubeconfig", badCAKubeconfig(t)}, cli.ExitConfig, "TLS settings cannot be used"},
		{"redis URL without a scheme", []string{"--backend", "redis", "--redis-url", "localhost:16390"}, cli.ExitUsage, `--redis-url "localhost:16390"`},
		{"etcd endpoint of another scheme", []string{"--backend", "etcd", "--endpoints", "ftp://127.0.0.1:2379"}, cli.ExitUsage, "use http:// or https://"},
		{"etcd endpoint without a port", []string{"--backend", "etcd", "--endpoints", "http://127.0.0.1"}, cli.ExitUsage, "does not give HOST:PORT"},
		// A kubeconfig server with an IPv6 address not in brackets exited
		// 1 with client-go's "host must be a URL or a host:port pair"; a
		// port out of range was retried as unreachable, then exit 69.
		{"kubeconfig server IPv6 without brackets", []string{"--backend", "lease", "--kubeconfig", serverKubeconfig(t, "https://::1:6443")}, cli.ExitConfig, "IPv6 address without brackets"},
		{"kubeconfig server port out of range", []string{"--backend", "lease", "--kubeconfig", serverKubeconfig(t, "https://[::1]:70000")}, cli.ExitConfig, `has the port "70000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"lock", "--name", "job"}, tc.args...), "--", "true")
			code, _, stderr := runCLI(t, args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d; stderr should name %q:\n%s", code, tc.code, tc.want, stderr)
			}
			// Listing every lock meets the same setup: the same code and
			// fix (a Redis listing's errors went out unclassified, exit 1).
			// (Not the missing namespace: the API server lists nothing in
			// it, and status says there are no locks in it.)
			if tc.name == "missing namespace" {
				return
			}
			code, stdout, stderr := runCLI(t, append([]string{"status"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("status: exit %d, want %d; stderr should name %q:\n%s%s", code, tc.code, tc.want, stdout, stderr)
			}
		})
	}
}

// A KUBECONFIG that names a missing file is named in the error, not
// client-go's advice to set KUBERNETES_MASTER.
func TestKubeconfigEnvMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	t.Setenv("KUBECONFIG", missing)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	code, _, stderr := runCLI(t, "lock", "--backend", "lease", "--name", "job", "--", "true")
	if code != cli.ExitConfig || !strings.Contains(stderr, missing) || strings.Contains(stderr, "KUBERNETES_MASTER") {
		t.Errorf("exit %d, want %d naming %s:\n%s", code, cli.ExitConfig, missing, stderr)
	}
}

// In a pod whose service account token is not mounted (the environment
// says Kubernetes, the token file is missing) and with no kubeconfig, the
// error names the token and automountServiceAccountToken, not "not
// running in a cluster".
func TestInClusterWithoutToken(t *testing.T) {
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Skip("this machine has a service account token (a pod): the test needs its absence")
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "nope"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	code, _, stderr := runCLI(t, "lock", "--backend", "lease", "--name", "job", "--", "true")
	if code != cli.ExitConfig || !strings.Contains(stderr, "serviceaccount/token") || !strings.Contains(stderr, "automountServiceAccountToken: true") {
		t.Errorf("exit %d, want %d naming the token and automountServiceAccountToken:\n%s", code, cli.ExitConfig, stderr)
	}
}

// A cluster without the DistributedLock CRD: --backend crd exits at once
// with the code for a setup that cannot work, and says how to install it.
// (A second API server: the shared one has the CRD, and removing it
// would break the tests that run beside this one.)
func TestMissingCRD(t *testing.T) {
	t.Parallel()
	kc := bareKubeconfig(t)
	code, _, stderr := runCLI(t, "lock", "--backend", "crd", "--kubeconfig", kc, "--name", "job", "--", "true")
	if code != cli.ExitConfig || !strings.Contains(stderr, "CRD is not installed") || !strings.Contains(stderr, "kubectl apply -k deploy/crd") {
		t.Errorf("exit %d, want %d saying the CRD is missing and how to install it:\n%s", code, cli.ExitConfig, stderr)
	}
}

// --wait 0 tries an unreachable store once: no retries, exit 69 at once,
// and the message says why --connect-timeout did not apply.
func TestUnreachableWaitZero(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", "redis://"+closedPort(t), "--name", "job", "--wait", "0", "--connect-timeout", "5s", "--", "true")
	if code != cli.ExitUnavailable || !strings.Contains(stderr, "(1 attempt)") || strings.Contains(stderr, "retrying") ||
		!strings.Contains(stderr, "--connect-timeout (now 0s: --wait is shorter)") {
		t.Errorf("exit %d, want %d after one attempt:\n%s", code, cli.ExitUnavailable, stderr)
	}
}

// A rediss:// URL to a server without TLS: the handshake gets no answer,
// so the store counts as unreachable (exit 69), and the message says what
// a TLS URL to a plain port does.
func TestRedisTLSToPlainServer(t *testing.T) {
	t.Parallel()
	url := strings.Replace(testenv.StartRedis(t).URL(), "redis://", "rediss://", 1)
	code, _, stderr := runCLI(t, "lock", "--backend", "redis", "--redis-url", url, "--name", "job", "--connect-timeout", "1s", "--", "true")
	if code != cli.ExitUnavailable || !strings.Contains(stderr, "never answers the handshake; use redis://") {
		t.Errorf("exit %d, want %d naming the TLS handshake:\n%s", code, cli.ExitUnavailable, stderr)
	}
}

// An API server address that accepts connections and never answers (a
// hung server, a blackholing proxy): doctor's store row fails within
// --connect-timeout, and the rows that ask the API server are skipped as
// for a refused connection, instead of each waiting on the silent server
// (about 30 s in all) and failing with a fix that blames the identity's
// rights.
func TestDoctorKubeNoAnswer(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["silent"] = &clientcmdapi.Cluster{Server: "https://" + l.Addr().String(), InsecureSkipTLSVerify: true}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["silent"] = &clientcmdapi.Context{Cluster: "silent", AuthInfo: "u", Namespace: "default"}
	kc.CurrentContext = "silent"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, out, stderr := runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", path, "--name", "job", "--connect-timeout", "1s")
	took := time.Since(start)
	t.Logf("doctor (%v):\n%s", took, out)
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %s", code, stderr)
	}
	rows := doctorTable(t, out)
	if got := rows["store"]; got.result != "FAIL" || !strings.HasPrefix(got.detail, "no answer in time: ") {
		t.Errorf("store row %+v, want FAIL: no answer in time", got)
	}
	wantRows(t, out, map[string]doctorRow{
		"kubernetes": {"SKIP", "not checked: the API server did not answer within --connect-timeout (see the store row)"},
	})
	if took > 8*time.Second {
		t.Errorf("doctor took %v with --connect-timeout 1s against a silent server; want the store row's second and little more", took)
	}
}

// A TTL that the DistributedLock schema cannot hold (more than a day):
// lock and run refuse it (exit 2), so doctor's timing row fails too,
// instead of passing.
func TestDoctorCRDTTLTooLong(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "doctor", "--backend", "crd", "--kubeconfig", unreachableKubeconfig(t), "--ttl", "48h")
	got := doctorTable(t, out)["timing"]
	if code != 1 || got.result != "FAIL" || !strings.Contains(got.detail, "DistributedLock") {
		t.Errorf("doctor --backend crd --ttl 48h: exit %d, timing row %+v; want FAIL naming the DistributedLock maximum:\n%s", code, got, out)
	}
	code, out, _ = runCLI(t, "doctor", "--backend", "lease", "--kubeconfig", unreachableKubeconfig(t), "--ttl", "48h")
	if got := doctorTable(t, out)["timing"]; got.result != "PASS" {
		t.Errorf("doctor --backend lease --ttl 48h: timing row %+v; want PASS (a Lease holds it)", got)
	}
}

// badCAKubeconfig writes a kubeconfig whose certificate-authority-data is
// not a PEM certificate (cut short, as by a bad copy and paste).
func badCAKubeconfig(t *testing.T) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://" + closedPort(t), CertificateAuthorityData: []byte("-----BEGIN CERTIFICATE-----\nMIIBuTCCAV6g")}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "default"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
