package tlsfiles_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/tlsfiles"
	"go.uber.org/goleak"
)

// issuer signs client certificates for the tests.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &issuer{cert, key, pool}
}

// issue writes a certificate for cn, with an IP SAN for 127.0.0.1, and its
// key to certFile and keyFile, replacing them as a rotation does.
func (i *issuer) issue(t *testing.T, cn, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, i.cert, &key.PublicKey, i.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, typ string, der []byte) {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, "CERTIFICATE", der)
	write(keyFile, "EC PRIVATE KEY", keyDER)
}

// presented connects to a TLS server that requires a client certificate
// with tc and returns the common name of the certificate the client
// presented, or the handshake's error.
func presented(t *testing.T, srv *tls.Config, tc *tls.Config) (string, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		cn  string
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		tlc := c.(*tls.Conn)
		if err := tlc.Handshake(); err != nil {
			got <- result{err: err}
			return
		}
		got <- result{cn: tlc.ConnectionState().PeerCertificates[0].Subject.CommonName}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), tc)
	if err == nil {
		err = c.Handshake()
		c.Close()
	}
	r := <-got
	if err != nil {
		return "", err
	}
	return r.cn, r.err
}

// A client certificate replaced on disk (cert-manager renewing it, a
// Kubernetes Secret updated in a mounted volume) is the one presented at
// the next handshake, as client-go and etcd's own client do: a process
// that holds a lock for days reconnects (a network fault, a server
// restart) with the certificate now in the files, not the one read at
// start, which may have expired since. Before, Apply read the pair once,
// and every new connection presented the first certificate.
func TestClientCertificateRotated(t *testing.T) {
	defer goleak.VerifyNone(t)
	ca := newIssuer(t)
	dir := t.TempDir()
	srvCert, srvKey := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	ca.issue(t, "server", srvCert, srvKey)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}

	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	ca.issue(t, "first", certFile, keyFile)
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if _, err := tlsfiles.Apply(tc, caFile, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	if cn, err := presented(t, srv, tc); err != nil || cn != "first" {
		t.Fatalf("first handshake: presented %q (%v), want the certificate in the files, \"first\"", cn, err)
	}
	ca.issue(t, "second", certFile, keyFile)
	if cn, err := presented(t, srv, tc); err != nil || cn != "second" {
		t.Fatalf("handshake after the files were replaced: presented %q (%v), want the new certificate, \"second\"", cn, err)
	}
	// Files that cannot be read at a handshake fail it, naming them.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := presented(t, srv, tc); err == nil {
		t.Fatal("handshake with the key file removed succeeded")
	}
	if _, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{}); !errors.Is(err, backend.ErrMisconfigured) {
		t.Errorf("certificate with the key file removed: %v, want ErrMisconfigured naming the files", err)
	}
}

// Apply still fails at once on a pair it cannot load, naming the files.
func TestClientCertificateMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := tlsfiles.Apply(&tls.Config{}, "", filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"))
	if !errors.Is(err, backend.ErrMisconfigured) {
		t.Errorf("Apply with missing files: %v, want ErrMisconfigured", err)
	}
}
