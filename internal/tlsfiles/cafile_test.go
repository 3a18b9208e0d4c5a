package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/tlsfiles"
	"go.uber.org/goleak"
)

// caPEM returns the PEM of i's CA certificate.
func (i *issuer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.cert.Raw})
}

// replace writes data to path by rename, as a Secret volume is updated.
func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// handshake runs one TLS handshake with a server that presents *cert and
// returns the client's error.
func handshake(t *testing.T, cert *atomic.Pointer[tls.Certificate], tc *tls.Config) error {
	t.Helper()
	srv := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Load(), nil }}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if c, err := ln.Accept(); err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	defer func() { <-done }()
	c, err := tls.Dial("tcp", ln.Addr().String(), tc)
	if err != nil {
		return err
	}
	return c.Close()
}

// A CA rotated as cert-manager or Vault rotates it: the bundle gets the
// new CA beside the old, the server's certificate is reissued by the new
// one, the old one leaves the bundle. A client whose configuration comes
// from CAFile.Config at each connection trusts the server throughout,
// still checks the server's name, keeps the CAs it had when the file is
// caught half-written, and says which file did not sign a certificate.
// Before, the CA file was read once, and every connection after the
// reissue failed with "certificate signed by unknown authority".
func TestCAFileRotated(t *testing.T) {
	defer goleak.VerifyNone(t)
	oldCA, newCA := newIssuer(t), newIssuer(t)
	dir := t.TempDir()
	serverCert := func(ca *issuer) *tls.Certificate {
		certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
		ca.issue(t, "server", certFile, keyFile)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return &pair
	}
	var cert atomic.Pointer[tls.Certificate]
	cert.Store(serverCert(oldCA))
	caFile := filepath.Join(dir, "ca.crt")
	replace(t, caFile, oldCA.caPEM())
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	ca, err := tlsfiles.Apply(base, caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string) {
		t.Helper()
		if err := handshake(t, &cert, ca.Config(base)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("before the rotation")
	replace(t, caFile, append(oldCA.caPEM(), newCA.caPEM()...))
	step("the bundle holds both CAs, the server the old CA's certificate")
	cert.Store(serverCert(newCA))
	step("the bundle holds both CAs, the server the new CA's certificate")

	// Caught half-written: the CAs read before stay trusted.
	whole := newCA.caPEM()
	replace(t, caFile, whole[:len(whole)/2])
	step("the bundle half-written")
	if err := ca.Explain(errors.New("handshake failed")); !strings.Contains(err.Error(), caFile) || !strings.Contains(err.Error(), "incomplete PEM block") {
		t.Errorf("Explain with the bundle half-written: %v, want the file and what failed", err)
	}
	replace(t, caFile, whole)
	step("the old CA left the bundle")

	// The server's name is still verified.
	wrongName := base.Clone()
	wrongName.ServerName = "other.example"
	var hostname x509.HostnameError
	if err := handshake(t, &cert, ca.Config(wrongName)); !errors.As(err, &hostname) {
		t.Errorf("handshake for another server name: %v, want a hostname error", err)
	}

	// A server of a CA no longer in the bundle is refused, naming the file.
	cert.Store(serverCert(oldCA))
	err = ca.Explain(handshake(t, &cert, ca.Config(base)))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || !strings.Contains(err.Error(), caFile) {
		t.Errorf("handshake with a server of the removed CA: %v, want an unknown authority naming %s", err, caFile)
	}
}

// LoadCAFile fails at once on a file that cannot work, naming it.
func TestLoadCAFileBad(t *testing.T) {
	dir := t.TempDir()
	half := filepath.Join(dir, "half.crt")
	whole := newIssuer(t).caPEM()
	if err := os.WriteFile(half, whole[:len(whole)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.crt"), half} {
		if _, err := tlsfiles.LoadCAFile(path); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadCAFile(%s): %v, want ErrMisconfigured naming the file", path, err)
		}
	}
}
