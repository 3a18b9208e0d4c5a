package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// etcdStartTimeout bounds how long an etcd may take to report healthy (it
// replays its WAL first after a restart, and tests run under -race on two
// cores).
const etcdStartTimeout = 30 * time.Second

// etcdStopTimeout bounds a graceful stop; after it the process is killed.
const etcdStopTimeout = 15 * time.Second

// EtcdOption configures StartEtcd.
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	tls        *EtcdTLS
	autoTLS    bool // generate the files with WriteTLSFiles
	args       []string
	unsafeSync bool
}

// EtcdTLS names the PEM files of the client listener. With it, the server
// accepts only TLS on its client port. The peer and metrics listeners stay
// plain HTTP on loopback.
type EtcdTLS struct {
	CertFile, KeyFile, CAFile string
	// ClientCertAuth requires clients to present a certificate signed by
	// CAFile (etcd's --client-cert-auth and --trusted-ca-file). Without
	// it, CAFile is only what ClientTLS trusts.
	ClientCertAuth bool
}

// WithEtcdTLS serves clients over TLS only, with the given files.
// ClientTLS then returns a configuration that trusts CAFile and presents
// CertFile/KeyFile as the client certificate.
func WithEtcdTLS(files EtcdTLS) EtcdOption {
	return func(c *etcdConfig) { c.tls = &files; c.autoTLS = false }
}

// WithEtcdClientCertAuth serves clients over TLS only, with a fresh CA and a
// certificate for 127.0.0.1 and localhost (WriteTLSFiles), and requires each
// client to present a certificate signed by that CA. ClientTLS returns a
// configuration that does; TLSFiles names the files, e.g. for a CLI's
// --cacert/--cert/--key flags.
func WithEtcdClientCertAuth() EtcdOption {
	return func(c *etcdConfig) { c.tls = nil; c.autoTLS = true }
}

// EtcdArgs adds command-line flags, e.g. "--auto-compaction-retention=1".
func EtcdArgs(args ...string) EtcdOption {
	return func(c *etcdConfig) { c.args = append(c.args, args...) }
}

// EtcdNoFsync runs etcd with --unsafe-no-fsync: faster writes that still
// survive a Kill (the kernel keeps the page cache) but not a machine crash.
// Leave it off where write latency is measured.
func EtcdNoFsync() EtcdOption { return func(c *etcdConfig) { c.unsafeSync = true } }

// Etcd is a single-member etcd process on free loopback ports, with its data
// directory in t.TempDir(). Stop and Kill keep the data directory and the
// ports, so Start brings the same member back with its data (every write it
// acknowledged, even after Kill). It is killed in t.Cleanup. Methods are safe
// for concurrent use.
type Etcd struct {
	server // Start, Stop (SIGTERM, SIGKILL after 15s), Kill, Restart, Log, Pause, Resume
	bin    string
	cfg    etcdConfig

	// ClientPort is the client (gRPC and HTTP) port on 127.0.0.1.
	ClientPort int
	// PeerPort is the raft peer port on 127.0.0.1.
	PeerPort int
	// MetricsPort serves /health and /metrics over plain HTTP on 127.0.0.1,
	// whatever the client port's TLS settings.
	MetricsPort int
	// Dir is the data directory (WAL and snapshots); it survives restarts.
	Dir string

	// name and initialCluster make the process a member of a cluster
	// (EtcdCluster); empty, it is a cluster of one named "baton-test".
	name, initialCluster string
	// joins makes it join a running cluster (--initial-cluster-state
	// existing), as a member added with etcdctl member add does.
	joins bool
}

// newEtcd returns a stopped member; StartEtcd and StartEtcdCluster start it.
func newEtcd(t testing.TB, bin string, cfg etcdConfig, name, dir string) *Etcd {
	e := &Etcd{bin: bin, cfg: cfg, name: name, Dir: dir}
	e.server = server{t: t, kind: "etcd", addr: e.Addr, launch: e.launch, stopSig: syscall.SIGTERM, stopTimeout: etcdStopTimeout}
	return e
}

// FindEtcd returns the path of the etcd binary: $BATON_ETCD_BIN if set, else
// $KUBEBUILDER_ASSETS/etcd, else etcd in the tools/testbin cache
// (TestbinDir), else the first etcd on PATH.
func FindEtcd() (string, error) {
	if p := os.Getenv("BATON_ETCD_BIN"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("BATON_ETCD_BIN=%s is not an executable file; build etcd with: %s", p, TestbinHint)
		}
		return p, nil
	}
	var looked []string
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		p := filepath.Join(dir, "etcd")
		if isExecutable(p) {
			return p, nil
		}
		looked = append(looked, p)
	}
	if dir, err := TestbinDir(); err == nil {
		p := filepath.Join(dir, "etcd")
		if isExecutable(p) {
			return p, nil
		}
		looked = append(looked, p)
	} else {
		looked = append(looked, "the test binary cache ("+err.Error()+")")
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	looked = append(looked, "PATH")
	return "", fmt.Errorf("etcd not found (BATON_ETCD_BIN is not set; looked in %s); build it with: %s", strings.Join(looked, ", "), TestbinHint)
}

// StartEtcd starts a single-member etcd and returns once its /health endpoint
// reports healthy (it has a leader and serves reads). If etcd is missing or
// does not start, the test fails when CI=true and is skipped otherwise.
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	bin, err := FindEtcd()
	if err != nil {
		unavailable(t, "%v", err)
	}
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	e := newEtcd(t, bin, cfg, "", filepath.Join(t.TempDir(), "data"))
	if e.cfg.autoTLS {
		files, _ := WriteTLSFiles(t)
		e.cfg.tls = &EtcdTLS{CertFile: files.CertFile, KeyFile: files.KeyFile, CAFile: files.CAFile, ClientCertAuth: true}
	}
	t.Cleanup(e.Kill)
	err = startOnFreePorts(etcdPorts, func(ports []int) error {
		e.setPorts(ports)
		err := e.start()
		if err != nil {
			// A failed start may have created the data directory.
			_ = os.RemoveAll(e.Dir)
		}
		return err
	})
	if err != nil {
		unavailable(t, "cannot start %s: %v (build it with: %s)", bin, err, TestbinHint)
	}
	return e
}

// etcdPorts is the number of ports an etcd listens on: client, peer and
// metrics.
const etcdPorts = 3

// setPorts takes the client, peer and metrics ports from ports.
func (e *Etcd) setPorts(ports []int) {
	e.ClientPort, e.PeerPort, e.MetricsPort = ports[0], ports[1], ports[2]
}

// Addr returns the client address "127.0.0.1:port", e.g. for a TCP proxy in
// front of the server.
func (e *Etcd) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.ClientPort)) }

// Endpoint returns the client URL: http://127.0.0.1:port, or https:// with
// TLS.
func (e *Etcd) Endpoint() string {
	if e.cfg.tls != nil {
		return "https://" + e.Addr()
	}
	return "http://" + e.Addr()
}

// Endpoints returns []string{Endpoint()}, for clientv3.Config.Endpoints.
func (e *Etcd) Endpoints() []string { return []string{e.Endpoint()} }

// TLSFiles returns the client listener's TLS files, and false without TLS.
func (e *Etcd) TLSFiles() (EtcdTLS, bool) {
	if e.cfg.tls == nil {
		return EtcdTLS{}, false
	}
	return *e.cfg.tls, true
}

// ClientTLS returns a TLS configuration for a client of this server: RootCAs
// holds CAFile and, when the server requires client certificates, the
// configuration presents CertFile/KeyFile. It returns nil without TLS.
func (e *Etcd) ClientTLS() *tls.Config {
	e.t.Helper()
	f := e.cfg.tls
	if f == nil {
		return nil
	}
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		e.t.Fatalf("testenv: etcd client TLS: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		e.t.Fatalf("testenv: etcd client TLS: no certificate in %s", f.CAFile)
	}
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if f.ClientCertAuth {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			e.t.Fatalf("testenv: etcd client TLS: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

func (e *Etcd) args() []string {
	name := e.name
	if name == "" {
		name = "baton-test"
	}
	scheme := "http"
	if e.cfg.tls != nil {
		scheme = "https"
	}
	client := scheme + "://" + e.Addr()
	peer := e.peerURL()
	cluster := e.initialCluster
	if cluster == "" {
		cluster = name + "=" + peer
	}
	state := "new"
	if e.joins {
		state = "existing"
	}
	a := []string{
		"--name=" + name,
		"--data-dir=" + e.Dir,
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + cluster,
		"--initial-cluster-state=" + state,
		"--listen-metrics-urls=http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort)),
		"--log-outputs=stderr",
	}
	if f := e.cfg.tls; f != nil {
		a = append(a, "--cert-file="+f.CertFile, "--key-file="+f.KeyFile)
		if f.ClientCertAuth {
			// etcd requires client certificates whenever it has a trusted
			// CA file, so pass one only when that is asked for.
			a = append(a, "--trusted-ca-file="+f.CAFile, "--client-cert-auth")
		}
	}
	if e.cfg.unsafeSync {
		a = append(a, "--unsafe-no-fsync")
	}
	return append(a, e.cfg.args...)
}

func (e *Etcd) peerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.PeerPort))
}

// launch starts etcd and returns it once it is healthy.
func (e *Etcd) launch() (*proc, error) {
	cmd := exec.Command(e.bin, e.args()...)
	cmd.Dir = filepath.Dir(e.Dir)
	cmd.Env = etcdEnv()
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = nil
	setPdeathsig(cmd)
	p, serving, err := startProc(cmd, out, etcdServingMetrics)
	if err != nil {
		return nil, err
	}
	if err := e.waitHealthy(p, serving); err != nil {
		p.kill()
		return p, err
	}
	return p, nil
}

// etcdServingMetrics is in the line etcd logs once it has bound its
// metrics listener.
const etcdServingMetrics = `"msg":"serving metrics"`

// waitHealthy waits until p says it serves its metrics listener, then
// polls that listener's /health until etcd reports {"health":"true"}: it
// has a leader and a linearizable read went through. Until p has bound the
// port, another process may hold it and answer: a member whose metrics
// port a fellow member took as its client port failed to bind, took
// seconds to exit, and meanwhile that member's /health passed for its own.
func (e *Etcd) waitHealthy(p *proc, serving <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdStartTimeout)
	defer cancel()
	select {
	case <-serving:
	case <-p.exited:
		return fmt.Errorf("etcd exited before it served: %s", lastLines(p.log.String(), 8))
	case <-ctx.Done():
		return fmt.Errorf("etcd not serving its metrics listener after %v: %s", etcdStartTimeout, lastLines(p.log.String(), 8))
	}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort)) + "/health"
	return pollHealth(ctx, p, "etcd", url, func(resp *http.Response) string {
		var h struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}
		err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h)
		if err == nil && resp.StatusCode == http.StatusOK && h.Health == "true" {
			return ""
		}
		return fmt.Sprintf("/health: %s %s %s", resp.Status, h.Health, h.Reason)
	})
}
