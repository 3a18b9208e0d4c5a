// Package tlsfiles loads the PEM files that configure a TLS client: a
// bundle of the CAs that sign the server's certificate, and a client
// certificate with its key for mutual TLS. Its errors name the file and
// match backend.ErrMisconfigured: a file that is missing, unreadable or
// not PEM is a setup that cannot work, which retrying does not fix.
package tlsfiles

import (
	"crypto/tls"
	"fmt"

	"github.com/baton-go/baton/backend"
)

// Apply sets tc's RootCAs from caFile and its client certificate from
// certFile and keyFile; an empty name leaves that part of tc as it is.
// certFile and keyFile go together. It returns the loaded CA file (nil
// without caFile), whose Config gives tc with the CAs now in the file.
//
// The pair is loaded once here, so that files that cannot work fail at
// once, and again at every TLS handshake (tc.GetClientCertificate): a
// certificate replaced on disk (renewed by cert-manager, a Secret updated
// in a mounted volume) is presented from the next connection on, as
// client-go and etcd's client do, instead of the one read at start, which
// may have expired since. A pair that cannot be loaded at a handshake
// fails that handshake, naming the files.
func Apply(tc *tls.Config, caFile, certFile, keyFile string) (*CAFile, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both a certificate file (%q) and a key file (%q)", backend.ErrInvalidOptions, certFile, keyFile)
	}
	var ca *CAFile
	if caFile != "" {
		var err error
		if ca, err = LoadCAFile(caFile); err != nil {
			return nil, err
		}
		tc.RootCAs = ca.pool
	}
	if certFile != "" {
		if _, err := loadPair(certFile, keyFile); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return loadPair(certFile, keyFile)
		}
	}
	return ca, nil
}

// loadPair reads a client certificate and its key.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: client certificate %s with key %s: %w", backend.ErrMisconfigured, certFile, keyFile, err)
	}
	return &cert, nil
}
