package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// call sends one command to r and returns its reply, as redisCall does:
// over TLS if r serves TLS, trusting its CA and presenting its own
// certificate (issued for both server and client use), so that the
// topologies of redistopo.go start and are observed alike with or without
// WithRedisTLS.
func (r *RedisServer) call(args ...string) (any, error) {
	if r.cfg.tls == nil {
		return redisCall(r.Addr(), args...)
	}
	tc, err := r.cfg.tls.clientConfig()
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: tc}
	conn, err := d.Dial("tcp", r.Addr())
	if err != nil {
		return nil, err
	}
	return roundTrip(conn, args...)
}

// clientConfig is a TLS client configuration that trusts f's CA and
// presents f's certificate.
func (f *RedisTLS) clientConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("testenv: no certificate in " + f.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// tlsArgs are the arguments of a server (or sentinel) that serves TLS
// only, on port, with f's files: its replication (a replica's link to
// its primary, a sentinel's to the servers it monitors) and its cluster
// bus use TLS too, as production topologies over TLS run.
func (f *RedisTLS) tlsArgs(port int) []string {
	auth := "no"
	if f.AuthClients {
		auth = "yes"
	}
	return []string{"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile, "--tls-ca-cert-file", f.CAFile,
		"--tls-auth-clients", auth, "--tls-replication", "yes", "--tls-cluster", "yes"}
}

// scheme returns "redis+kind://", or "rediss+kind://" if r serves TLS.
func (r *RedisServer) scheme(kind string) string {
	if r.cfg.tls != nil {
		return "rediss+" + kind + "://"
	}
	return "redis+" + kind + "://"
}

// ClientTLS returns a TLS client configuration that trusts f's CA and
// presents f's certificate (issued for client use too), for a test's own
// client of a server started with WithRedisTLS(f).
func (f RedisTLS) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	tc, err := f.clientConfig()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return tc
}
