package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/baton-go/baton/backend"
)

// CAFile is a PEM bundle of the CAs that sign a server's certificate,
// read again when it changes. A CA rotated by cert-manager or Vault
// passes through a bundle that holds the old and the new CA, then the
// servers' certificates are reissued by the new one, then the old one
// leaves the bundle: a client that read the bundle once at start
// verifies no new connection after the reissue. CAFile looks at the
// file's metadata (its identity, size and modification time: a Secret
// mounted as a volume is updated by swapping a symlink, which changes the
// identity) at each Config, which a caller asks for once per new
// connection, and reads the file only when they changed.
//
// A bundle that cannot be read or parsed at that moment (half-written,
// removed for an instant) does not drop the CAs read before: they stay
// trusted, the file is tried again at the next connection, and Explain
// names the file and what failed. Verification is crypto/tls's own
// (the chain to a trusted CA, the server name, expiry): CAFile changes
// only the pool of trusted CAs.
type CAFile struct {
	path string

	mu      sync.Mutex
	pool    *x509.CertPool
	data    []byte      // the content pool was parsed from
	info    os.FileInfo // the file's metadata when data was read
	lastErr error       // why the last read again failed; nil if it did not
}

// LoadCAFile reads path, which must hold at least one PEM certificate. Its
// errors name the file and match backend.ErrMisconfigured.
func LoadCAFile(path string) (*CAFile, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", backend.ErrMisconfigured, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", backend.ErrMisconfigured, err)
	}
	pool, err := parseCAs(path, data)
	if err != nil {
		return nil, err
	}
	return &CAFile{path: path, pool: pool, data: data, info: info}, nil
}

// Config returns base with RootCAs the CAs now in the file: base itself
// if they did not change since base was made (or c is nil), else a clone.
func (c *CAFile) Config(base *tls.Config) *tls.Config {
	if c == nil {
		return base
	}
	pool := c.current()
	if base.RootCAs == pool {
		return base
	}
	tc := base.Clone()
	tc.RootCAs = pool
	return tc
}

// current returns the pool of the CAs in the file, read again if its
// metadata changed since it was last read.
func (c *CAFile) current() *x509.CertPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	info, err := os.Stat(c.path)
	switch {
	case err != nil:
		c.lastErr = err
		return c.pool
	case sameFile(info, c.info):
		return c.pool
	}
	data, err := os.ReadFile(c.path)
	if err == nil && !bytes.Equal(data, c.data) {
		var pool *x509.CertPool
		if pool, err = parseCAs(c.path, data); err == nil {
			c.pool, c.data = pool, data
		}
	}
	if c.lastErr = err; err == nil {
		c.info = info
	}
	return c.pool
}

// sameFile reports whether a and b describe one version of one file.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// Explain returns err, a failed handshake's error, with what the file has
// to do with it: that the file could not be read again and the CAs read
// before were used, or that the server's certificate is signed by no CA
// in the file (then matching backend.ErrMisconfigured). It returns err
// itself if c is nil or neither applies.
func (c *CAFile) Explain(err error) error {
	if c == nil || err == nil {
		return err
	}
	c.mu.Lock()
	lastErr := c.lastErr
	c.mu.Unlock()
	var unknown x509.UnknownAuthorityError
	switch {
	case lastErr != nil:
		return fmt.Errorf("%w (the CA file %s could not be read again: %v; the CAs read from it before are still the ones trusted)", err, c.path, lastErr)
	case errors.As(err, &unknown):
		return fmt.Errorf("%w: %w (no CA in the CA file %s signed the server's certificate: add the CA that did to that file, which is read again at the next connection once it changes)", backend.ErrMisconfigured, err, c.path)
	}
	return err
}

// parseCAs parses the certificates of a PEM bundle, skipping the blocks
// of other types and the certificates that do not parse, as
// x509.CertPool.AppendCertsFromPEM does. A bundle with no certificate, or
// that ends in a block cut short (a file read while it was written), is
// an error that names path and matches backend.ErrMisconfigured.
func parseCAs(path string, data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			if bytes.Contains(rest, []byte("-----BEGIN")) {
				return nil, fmt.Errorf("%w: CA file %s ends in an incomplete PEM block (is it being written?)", backend.ErrMisconfigured, path)
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			pool.AddCert(cert)
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", backend.ErrMisconfigured, path)
	}
	return pool, nil
}
