package storeerr_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
)

// Real failures, made on the loopback interface, not built by hand.

func TestRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = net.Dial("tcp", addr)
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "is the server running") {
		t.Errorf("Classify(%v) = %v; want ErrUnavailable with a hint", err, got)
	}
}

// A request that goes through an HTTP proxy (HTTPS_PROXY, a kubeconfig's
// proxy-url) that cannot be reached names the proxy as the cause; a
// refused proxy was reported as "nothing listens at that address: is the
// server running", of the store's address.
func TestProxyFailed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, proxy := range []string{"http://" + closed} {
		u, _ := url.Parse(proxy)
		tr := &http.Transport{Proxy: http.ProxyURL(u)}
		_, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://store.invalid:6443/")
		tr.CloseIdleConnections()
		got := storeerr.Classify(err)
		if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "HTTPS_PROXY") || strings.Contains(got.Error(), "is the server running") {
			t.Errorf("through the proxy %s: Classify(%v) = %v; want ErrUnavailable naming the proxy", proxy, err, got)
		}
	}
}

// A server that accepts and closes the connection at once (a restart, a
// connection limit): the read's EOF means the store is unavailable for now.
func TestClosedByServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = conn.Read(make([]byte, 1))
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "the server closed the connection") {
		t.Errorf("Classify(%v) = %v; want ErrUnavailable saying the server closed the connection", err, got)
	}
}

// A server that accepts and never answers (stopped with SIGSTOP): the
// client's read deadline is a store that cannot be reached now, which the
// engine and the CLI retry; the caller's own context deadline is not.
func TestSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Read(make([]byte, 1))
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "did not answer in time") {
		t.Errorf("Classify(%v) = %v; want ErrUnavailable saying the server did not answer", err, got)
	}
	if got := storeerr.Classify(context.DeadlineExceeded); got != context.DeadlineExceeded {
		t.Errorf("Classify(context.DeadlineExceeded) = %v; want it unchanged", got)
	}
}

// A TLS client at the port of a service that waits for more input (Redis
// reads the ClientHello as an unfinished command): net/http's handshake
// times out, and the store counts as unavailable, with the likely cause.
func TestTLSHandshakeTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		if c, err := l.Accept(); err == nil {
			<-done // read nothing, answer nothing
			c.Close()
		}
	}()
	client := &http.Client{Transport: &http.Transport{TLSHandshakeTimeout: 50 * time.Millisecond}}
	_, err = client.Get("https://" + l.Addr().String())
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "does not speak TLS") {
		t.Errorf("Classify(%v) = %v; want ErrUnavailable naming a port that does not speak TLS", err, got)
	}
	client.CloseIdleConnections()
}

func TestUnknownHost(t *testing.T) {
	_, err := net.DefaultResolver.LookupHost(context.Background(), "no-such-host.invalid")
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrUnavailable) || !strings.Contains(got.Error(), "does not resolve") {
		t.Errorf("Classify(%v) = %v; want ErrUnavailable naming the host", err, got)
	}
}

func TestTLS(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	for _, tc := range []struct {
		name, url, hint string
	}{
		{"unknown authority", tlsSrv.URL, "authority"},
		{"TLS to a plain server", "https://" + strings.TrimPrefix(plain.URL, "http://"), "did not answer in TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
			_, err := c.Get(tc.url)
			got := storeerr.Classify(err)
			if !errors.Is(got, backend.ErrMisconfigured) || !strings.Contains(got.Error(), tc.hint) {
				t.Errorf("Classify(%v) = %v; want ErrMisconfigured, hint %q", err, got, tc.hint)
			}
		})
	}
}

// A server that requires a client certificate refuses a client without
// one with a TLS alert, which crypto/tls reports as a "remote error".
func TestTLSClientCertificateRequired(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client() // trusts the server, has no certificate of its own
	_, err := c.Get(srv.URL)
	got := storeerr.Classify(err)
	if !errors.Is(got, backend.ErrMisconfigured) || !strings.Contains(got.Error(), "requires a client certificate") {
		t.Errorf("Classify(%v) = %v; want ErrMisconfigured saying a client certificate is required", err, got)
	}
}

func TestOthersUnchanged(t *testing.T) {
	for _, err := range []error{nil, errors.New("something else"), backend.ErrForbidden, context.Canceled} {
		if got := storeerr.Classify(err); got != err {
			t.Errorf("Classify(%v) = %v; want it unchanged", err, got)
		}
	}
}
