// Package storeerr classifies the transport errors that every network
// backend meets (a refused connection, a failed TLS handshake), so that
// each store reports them with the same sentinel: backend.ErrUnavailable
// for a store that cannot be reached, backend.ErrMisconfigured for a
// connection that cannot work as configured. Store-specific answers
// (permission, missing resources) are the backends' own to classify;
// this package knows only the standard library's errors.
package storeerr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/baton-go/baton/backend"
)

// Classify returns err wrapped with backend.ErrUnavailable or
// backend.ErrMisconfigured and a hint naming the fix, if err is a transport
// failure it recognises and is not classified yet; otherwise err itself.
func Classify(err error) error {
	return ClassifyVia(err, nil)
}

// ClassifyVia is Classify for a client whose requests go through the
// proxy that proxy chooses for them (a rest.Config's Proxy, which
// client-go uses instead of the environment's), or the environment's if
// proxy is nil: a 407 Proxy Authentication Required names that proxy,
// its password left out.
func ClassifyVia(err error, proxy func(*http.Request) (*url.URL, error)) error {
	if err == nil || errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrMisconfigured) || errors.Is(err, backend.ErrForbidden) {
		return err
	}
	if proxyAuthRequired(err) {
		return fmt.Errorf("%w: %w (%s)", backend.ErrMisconfigured, err, proxyAuthHint(err, proxy))
	}
	if hint, ok := tlsProblem(err); ok {
		return fmt.Errorf("%w: %w (%s)", backend.ErrMisconfigured, err, hint)
	}
	if hint, ok := unreachable(err); ok {
		return fmt.Errorf("%w: %w (%s)", backend.ErrUnavailable, err, hint)
	}
	return err
}

// tlsProblem recognises a TLS handshake that cannot succeed as configured.
func tlsProblem(err error) (hint string, ok bool) {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
	)
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is signed by an authority the client does not trust: give the CA file that signed it", true
	case errors.As(err, &hostname):
		return "the server's certificate does not name the host dialled: use a host name the certificate lists", true
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, or not for server use): renew it", true
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		// net/http reports the record header error of an HTTP answer
		// with that text alone.
		return "the server did not answer in TLS: use a plain URL (http://, redis://), or enable TLS on the server", true
	case errors.As(err, &verify):
		return "the server's certificate could not be verified: check the CA file and the host name", true
	case errors.As(err, &alert), isRemoteTLSAlert(err):
		return alertHint(err.Error()), true
	}
	return "", false
}

// alertHint is the hint for a TLS alert the server sent, as msg reports it.
func alertHint(msg string) string {
	switch {
	case strings.Contains(msg, "certificate required"):
		return "the server requires a client certificate (mutual TLS): give one that its CA signed, with its key"
	case strings.Contains(msg, "unknown certificate authority"), strings.Contains(msg, "bad certificate"):
		// OpenSSL (Redis) and Go (etcd) servers send these for a client
		// certificate they cannot verify.
		return "the server does not accept the client certificate (--cert): it must trust the CA that issued it (Redis tls-ca-cert-file, etcd --trusted-ca-file: when a CA rotates, add the new CA there before clients present certificates it issued), and the certificate must be valid now"
	case strings.Contains(msg, "expired certificate"):
		return "the server found the client certificate (--cert) expired: renew it"
	}
	return "the server refused the TLS connection: does it require a client certificate (and accept this one)?"
}

// isRemoteTLSAlert reports an alert the server sent during the handshake,
// which crypto/tls returns as a *net.OpError "remote error" around an
// unexported alert type (tls.AlertError is for QUIC).
func isRemoteTLSAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error" && strings.HasPrefix(op.Err.Error(), "tls: ")
}

// unreachable recognises a store that could not be reached.
func unreachable(err error) (hint string, ok bool) {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "proxyconnect":
		// net/http's failure to reach, or go through, the proxy: the
		// causes below would be the proxy's, not the store's.
		return "the connection goes through a proxy, which failed: fix the proxy, or reach the store directly: list its host in NO_PROXY if the proxy comes from HTTPS_PROXY or https_proxy in the environment, or remove the kubeconfig cluster's proxy-url if it comes from there", true
	case errors.As(err, &dns) && dns.IsNotFound:
		return fmt.Sprintf("the host name %q does not resolve: check the address", dns.Name), true
	case errors.As(err, &dns):
		return "the host name could not be resolved now: check DNS", true
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at that address: is the server running, and are the host and port right?", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the host: check the address and the network", true
	case errors.Is(err, syscall.EMFILE):
		// The client's own limit, not the server: the dial's socket(2)
		// failed before any packet left.
		return "this process has as many files open as its limit allows (RLIMIT_NOFILE, ulimit -n), so it cannot open a connection; the server is not at fault: raise the limit (ulimit -n, LimitNOFILE= in systemd), or hold fewer locks and connections", true
	case errors.Is(err, syscall.ENFILE):
		return "the system has no file descriptor left (the fs.file-max sysctl), so no connection can be opened; the server is not at fault: close files elsewhere, or raise fs.file-max", true
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no local port is free for a new connection (the ephemeral range, net.ipv4.ip_local_port_range, is used up, often by connections in TIME_WAIT), or the local address is not this host's: reuse connections, or widen the range", true
	case errors.Is(err, syscall.ETIMEDOUT):
		return "the connection timed out: check the address, the network and firewalls", true
	case strings.Contains(err.Error(), "TLS handshake timeout"):
		// net/http's error has no exported type.
		return "the server did not complete a TLS handshake in time: it is overloaded, or the port is another service's that does not speak TLS and waits for more input (such as Redis): check the URL's port and scheme", true
	case errors.Is(err, os.ErrDeadlineExceeded):
		// A read or write deadline of the client (go-redis's read timeout):
		// connected, but no answer in time. Not the caller's own
		// context.DeadlineExceeded, which is another value.
		return "connected, but the server did not answer in time: it is stopped (SIGSTOP, a debugger), overloaded, or a firewall drops its packets; or the port is another service's, or a TLS URL was given for a server without TLS", true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "the server closed the connection: a restart, a proxy, a limit on connections such as Redis maxclients, or a service of another protocol at that port", true
	}
	if errors.As(err, &op) && op.Op == "dial" {
		return "the connection could not be made: check the address and that the server runs", true
	}
	return "", false
}
