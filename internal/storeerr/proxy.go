package storeerr

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/baton-go/baton/backend"
)

// proxyAuthRequired reports a proxy's 407 Proxy Authentication Required
// answer to CONNECT, as net/http reports it (the status's reason phrase
// alone, in a *url.Error) and as gRPC does (the status line, quoted).
func proxyAuthRequired(err error) bool {
	if ue, ok := errors.AsType[*url.Error](err); ok && ue.Err != nil && ue.Err.Error() == http.StatusText(http.StatusProxyAuthRequired) {
		return true
	}
	return strings.Contains(err.Error(), "connect handshake, response: \"HTTP/1.1 407 ")
}

// proxyAuthHint is the hint for a 407 from the proxy that err's request
// went through: the one proxy chooses for its URL (a rest.Config's Proxy,
// which client-go uses instead of the environment's: a kubeconfig's
// proxy-url), or, if proxy is nil, the environment's (HTTPS_PROXY).
func proxyAuthHint(err error, proxy func(*http.Request) (*url.URL, error)) string {
	if u := requestURL(err); u != nil && proxy != nil {
		if pu, perr := proxy(&http.Request{URL: u}); perr == nil && pu != nil {
			return authHint(fmt.Sprintf("the HTTP proxy %s (the kubeconfig cluster's proxy-url; in Go, rest.Config's Proxy)", pu.Redacted()),
				pu.User != nil, "proxy-url: http://USER:PASSWORD@HOST:PORT", "remove proxy-url to reach the API server directly")
		}
	} else if u != nil {
		if pu := envProxyURL(u); pu != nil {
			return authHint(namedProxy(pu, u.Scheme), pu.User != nil, "HTTPS_PROXY=http://USER:PASSWORD@HOST:PORT", envAround)
		}
	}
	return "the HTTP proxy of the kubeconfig cluster's proxy-url asked for authentication (407 Proxy Authentication Required), so no request reached the store: " +
		"put the proxy's user and password in that URL (http://USER:PASSWORD@HOST:PORT), or remove proxy-url to reach the API server directly"
}

// requestURL is the URL of the request that err (net/http's) reports, or
// nil.
func requestURL(err error) *url.URL {
	ue, ok := errors.AsType[*url.Error](err)
	if !ok {
		return nil
	}
	u, perr := url.Parse(ue.URL)
	if perr != nil {
		return nil
	}
	return u
}

// namedProxy names the proxy pu that the environment gives for URLs of
// scheme, its password left out.
func namedProxy(pu *url.URL, scheme string) string {
	return fmt.Sprintf("the HTTP proxy %s (%s_PROXY in the environment)", pu.Redacted(), strings.ToUpper(scheme))
}

// envAround says how to go around a proxy that the environment names.
const envAround = "reach the store directly: list the store's host in NO_PROXY"

// authHint says that proxy asked for authentication, and how to give it
// (setting shows where its URL takes the credentials) or go around it.
func authHint(proxy string, withCredentials bool, setting, around string) string {
	asked := "asked for authentication"
	if withCredentials {
		asked = "refused the credentials in its URL"
	}
	return proxy + " " + asked + " (407 Proxy Authentication Required), so no request reached the store: " +
		"put the proxy's user and password in its URL (" + setting + "), or " + around
}

// envProxyURL returns the proxy that the environment names for u
// (http.ProxyFromEnvironment, which client-go and gRPC follow), or nil.
func envProxyURL(u *url.URL) *url.URL {
	pu, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	if err != nil {
		return nil
	}
	return pu
}

// EnvProxy returns the HTTP proxy, its password left out, that the
// environment (HTTPS_PROXY, NO_PROXY) names for a TCP address, as gRPC
// reads it, or "".
func EnvProxy(address string) string {
	if pu := envProxyURL(&url.URL{Scheme: "https", Host: address}); pu != nil {
		return pu.Redacted()
	}
	return ""
}

// ProxyProblem asks the HTTP proxy that the environment names for the TCP
// address (as gRPC reads it) for a tunnel there, as gRPC does, and returns
// why it cannot have one, classified: the proxy cannot be reached
// (backend.ErrUnavailable), asks for authentication or refuses the tunnel
// (backend.ErrMisconfigured). It returns nil if no proxy is named, or the
// proxy opened the tunnel. It waits at most 2 s.
func ProxyProblem(ctx context.Context, address string) error {
	pu := envProxyURL(&url.URL{Scheme: "https", Host: address})
	if pu == nil || pu.Scheme != "http" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	name := namedProxy(pu, "https")
	resp, err := connect(ctx, pu, address)
	if err != nil {
		return fmt.Errorf("%w: %s could not be reached or did not answer: %w (fix the proxy, or reach the store directly: list its host in NO_PROXY)",
			backend.ErrUnavailable, name, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusProxyAuthRequired:
		return fmt.Errorf("%w: %s", backend.ErrMisconfigured, authHint(name, pu.User != nil, "HTTPS_PROXY=http://USER:PASSWORD@HOST:PORT", envAround))
	}
	return fmt.Errorf("%w: %s refused a tunnel to %s (%s): ask its administrators to allow it, or reach the store directly: list its host in NO_PROXY",
		backend.ErrMisconfigured, name, address, resp.Status)
}

// connect sends CONNECT address to the proxy pu, with its credentials if
// it has any, and returns the answer's status (its body is not read).
func connect(ctx context.Context, pu *url.URL, address string) (*http.Response, error) {
	host := pu.Host
	if pu.Port() == "" {
		host = net.JoinHostPort(pu.Hostname(), "80")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: address}, Host: address, Header: http.Header{}}
	if pu.User != nil {
		pass, _ := pu.User.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(pu.User.Username()+":"+pass)))
	}
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}
