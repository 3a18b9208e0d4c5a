package testenv

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// ConnectProxy is an HTTP proxy for tunnels (CONNECT), as a company's
// egress proxy is to client-go and gRPC, that asks for authentication:
// it answers 407 Proxy Authentication Required to a CONNECT without its
// user and password (Basic), and opens the tunnel otherwise.
type ConnectProxy struct {
	srv        *httptest.Server
	user, pass string
	// routes maps the addresses that CONNECT names to those the proxy
	// dials, as a proxy's own DNS reaches names its clients cannot.
	routes     sync.Map
	authorized atomic.Int64 // tunnels opened
	refused    atomic.Int64 // 407 answers
	wg         sync.WaitGroup
}

// StartConnectProxy starts a ConnectProxy on 127.0.0.1 for the rest of t,
// whose credentials are user and pass.
func StartConnectProxy(t testing.TB, user, pass string) *ConnectProxy {
	t.Helper()
	p := &ConnectProxy{user: user, pass: pass}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.srv.CloseClientConnections()
		p.srv.Close()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's URL without credentials, as HTTPS_PROXY names it.
func (p *ConnectProxy) URL() string { return p.srv.URL }

// URLWithCredentials is the proxy's URL with its user and password.
func (p *ConnectProxy) URLWithCredentials() string {
	u, _ := url.Parse(p.srv.URL)
	u.User = url.UserPassword(p.user, p.pass)
	return u.String()
}

// Route makes the proxy dial to for a CONNECT that names from: a name
// only the proxy can resolve, as on a network whose clients reach the
// store only through it.
func (p *ConnectProxy) Route(from, to string) { p.routes.Store(from, to) }

// Tunnels is how many tunnels the proxy opened; Refused how many CONNECTs
// it answered 407.
func (p *ConnectProxy) Tunnels() int64 { return p.authorized.Load() }

// Refused is how many CONNECTs the proxy answered 407.
func (p *ConnectProxy) Refused() int64 { return p.refused.Load() }

func (p *ConnectProxy) serve(w http.ResponseWriter, r *http.Request) {
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass))
	if r.Header.Get("Proxy-Authorization") != want {
		p.refused.Add(1)
		w.Header().Set("Proxy-Authenticate", `Basic realm="testenv"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	target := r.Host
	if to, ok := p.routes.Load(r.Host); ok {
		target = to.(string)
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		up.Close()
		return
	}
	p.authorized.Add(1)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		up.Close()
		return
	}
	p.wg.Go(func() {
		defer up.Close()
		_, _ = io.Copy(up, c)
	})
	defer c.Close()
	_, _ = io.Copy(c, up)
}
