package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/storeerr"
	"github.com/baton-go/baton/internal/tlsfiles"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultDialTimeout is Config.DialTimeout's default.
const DefaultDialTimeout = 5 * time.Second

// Config says how to reach etcd, in fields that map one to one onto
// command-line flags (etcdctl's names in parentheses):
//
//	--endpoints  Endpoints (comma-separated; see ParseEndpoints)
//	--cacert     CAFile
//	--cert       CertFile
//	--key        KeyFile
//	--user       Username and Password ("user:password", see ParseUser)
//	--dial-timeout DialTimeout
//
// TLS is on when any of CAFile, CertFile, KeyFile or ServerName is set, or an
// endpoint is an https:// URL. Without CAFile the system's roots verify the
// server. With CertFile and KeyFile the client presents that certificate
// (mutual TLS, for etcd's --client-cert-auth). etcd can also take the user
// name from the client certificate's common name; then leave Username
// empty.
type Config struct {
	// Endpoints are the members' client URLs ("https://10.0.0.1:2379",
	// "http://[::1]:2379"), host:port pairs, or a member's unix socket
	// ("unix:///run/etcd.sock", "unixs://" with TLS). At least one.
	Endpoints []string
	// DialTimeout bounds connecting, authenticating and Open's first
	// request. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// Username and Password for etcd's authentication: both or neither.
	Username, Password string
	// CAFile is a PEM file of the certificate authorities that sign the
	// members' certificates.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and key for
	// mutual TLS: both or neither. They are read again at every new
	// connection, so a certificate renewed on disk is presented from the
	// next connection on. CAFile is read again at a new connection once
	// it changed (its size, modification time or identity), so a CA
	// rotated on disk is trusted from the next connection on; a CAFile
	// that cannot be read or parsed then leaves the CAs read before
	// trusted.
	CertFile, KeyFile string
	// ServerName, if set, is the name checked against the members'
	// certificates instead of the endpoint's host.
	ServerName string
	// Logger receives the etcd client's own logs (reconnections, retries).
	// Nil discards them: Store reports what matters through its errors
	// and its own logger (WithLogger).
	Logger *zap.Logger
}

// ParseEndpoints splits a comma-separated list of endpoints, as given to a
// --endpoints flag, dropping white space and empty items.
func ParseEndpoints(s string) []string {
	var eps []string
	for _, ep := range strings.Split(s, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// ParseUser splits "user:password", as given to etcdctl's --user flag. A
// value without a colon is a user name with an empty password.
func ParseUser(s string) (username, password string) {
	username, password, _ = strings.Cut(s, ":")
	return username, password
}

// tlsOn reports whether c asks for TLS.
func (c Config) tlsOn() bool {
	if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" {
		return true
	}
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return true
		}
	}
	return false
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("etcdstore: %w: "+format, append([]any{backend.ErrInvalidOptions}, args...)...)
	}
	if len(c.Endpoints) == 0 {
		return bad("no etcd endpoint given")
	}
	tlsOn := c.tlsOn()
	for _, ep := range c.Endpoints {
		if err := checkEndpoint(ep); err != nil {
			return bad("endpoint %q %v", redactEndpoint(ep), err)
		}
		if tlsOn && strings.HasPrefix(ep, "http://") {
			return bad("endpoint %q is plain http:// but TLS is configured; use https://", ep)
		}
	}
	switch {
	case c.DialTimeout < 0:
		return bad("dial timeout %v is negative", c.DialTimeout)
	case c.Username != "" && c.Password == "":
		return bad("user %q has no password", c.Username)
	case c.Username == "" && c.Password != "":
		return bad("a password is given without a user name")
	case (c.CertFile == "") != (c.KeyFile == ""):
		return bad("a client certificate needs both a certificate file (%q) and a key file (%q)", c.CertFile, c.KeyFile)
	}
	return nil
}

// redactEndpoint returns ep with its user information (user:password@)
// replaced by "xxxxx@", for messages.
func redactEndpoint(ep string) string {
	start := 0
	if i := strings.Index(ep, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(ep)
	if i := strings.IndexByte(ep[start:], '/'); i >= 0 {
		end = start + i
	}
	if at := strings.LastIndexByte(ep[start:end], '@'); at >= 0 {
		return ep[:start] + "xxxxx" + ep[start+at:]
	}
	return ep
}

// checkEndpoint reports an endpoint etcd's client cannot dial: a scheme
// other than http, https, unix and unixs (a redis:// or ftp:// URL would be
// dialled as a host name and time out), a user or password in it (the
// client would ignore them, and messages would show them), or a host
// without a valid port.
func checkEndpoint(ep string) error {
	scheme, _, hasScheme := strings.Cut(ep, "://")
	switch {
	case hasScheme && (scheme == "unix" || scheme == "unixs"):
		return nil
	case hasScheme && scheme != "http" && scheme != "https":
		return fmt.Errorf("has the scheme %s://: use http:// or https:// (or unix:// for a socket)", scheme)
	case redactEndpoint(ep) != ep:
		return errors.New("has a user name or password in it, which etcd's client does not send: give them with --user USER:PASSWORD (Config.Username and Password), not in the endpoint")
	}
	if authority, _, _ := strings.Cut(strings.TrimPrefix(ep, scheme+"://"), "/"); strings.Count(authority, ":") > 1 && !strings.HasPrefix(authority, "[") {
		return errors.New("does not give HOST:PORT: write an IPv6 address in brackets, as in http://[::1]:2379")
	}
	hostPort := ep
	if hasScheme {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || strings.TrimSuffix(u.Path, "/") != "" {
			return fmt.Errorf("is not a URL of the form %s://HOST:PORT", scheme)
		}
		hostPort = u.Host
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || host == "" {
		return errors.New("does not give HOST:PORT (etcd's client port is usually 2379)")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("has the port %q, not a number from 1 to 65535", port)
	}
	return nil
}

// TLSConfig returns the client TLS configuration c describes, or nil if c
// does not ask for TLS. A CA, certificate or key file that cannot be read
// or parsed gives an error matching backend.ErrMisconfigured. Its RootCAs
// are the CAs in CAFile now; a client from ClientConfig reads CAFile again
// when it changes.
func (c Config) TLSConfig() (*tls.Config, error) {
	tc, _, err := c.tlsConfig()
	return tc, err
}

// tlsConfig is TLSConfig, and the CA file it loaded (nil without CAFile).
func (c Config) tlsConfig() (*tls.Config, *tlsfiles.CAFile, error) {
	if !c.tlsOn() {
		return nil, nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	ca, err := tlsfiles.Apply(tc, c.CAFile, c.CertFile, c.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("etcdstore: %w", err)
	}
	return tc, ca, nil
}

// ClientConfig returns the clientv3.Config that Open uses: cfg's endpoints,
// TLS and credentials, gRPC keepalive pings every 10s (5s timeout) so that
// a dead connection is noticed, and cfg.Logger as the client's logger
// (one that discards if nil: the Store logs what matters through slog).
// Its DialOptions and Context let a Store over the client close the
// client's connections that went silent when its lease keepalives stall
// (see "Connections" in the package documentation), which gRPC's
// keepalive would notice only after 15s: keep them when you change the
// configuration, and build one client from each configuration returned.
func (c Config) ClientConfig() (clientv3.Config, error) {
	cc, _, err := c.clientConfig()
	return cc, err
}

// clientConfig is ClientConfig, and the CA file it loaded (nil without
// CAFile).
func (c Config) clientConfig() (clientv3.Config, *tlsfiles.CAFile, error) {
	if err := c.validate(); err != nil {
		return clientv3.Config{}, nil, err
	}
	tc, ca, err := c.tlsConfig()
	if err != nil {
		return clientv3.Config{}, nil, err
	}
	dial := c.DialTimeout
	if dial == 0 {
		dial = DefaultDialTimeout
	}
	logger := c.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	return trackConns(clientv3.Config{
		Endpoints:            c.Endpoints,
		DialTimeout:          dial,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tc,
		Username:             c.Username,
		Password:             c.Password,
		Logger:               logger,
	}, tc, ca), ca, nil
}

// Open connects to etcd as cfg says and checks the connection with one
// request (MemberList, which needs no permission on any key), bounded by
// ctx and DialTimeout, so that a wrong endpoint, certificate or password
// fails here with a clear error rather than at the first lock. An etcd
// grpc-proxy answers MemberList itself, so through one Open also asks for
// the status of the member behind it (which the proxy forwards), and fails
// with an error matching backend.ErrUnavailable unless that member answers
// with a raft leader. A refused user name or password matches
// backend.ErrForbidden. The caller owns the client: pass it to New and
// Close it after the Store.
func Open(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	client, _, err := open(ctx, cfg)
	return client, err
}

// open is Open, and reports whether an etcd grpc-proxy answered.
func open(ctx context.Context, cfg Config) (client *clientv3.Client, proxied bool, err error) {
	cc, ca, err := cfg.clientConfig()
	if err != nil {
		return nil, false, err
	}
	where := strings.Join(cfg.Endpoints, ",")
	// gRPC retries a refused connection until the deadline and then
	// reports only the deadline: one plain dial per endpoint first makes
	// an unreachable etcd fail at once, with its cause.
	if err := dialAny(ctx, cfg.Endpoints, min(cc.DialTimeout, 2*time.Second)); err != nil {
		return nil, false, fmt.Errorf("etcdstore: connecting to etcd at %s: %w", where, storeerr.Classify(err))
	}
	client, err = clientv3.New(cc)
	if err != nil {
		return nil, false, fmt.Errorf("etcdstore: connecting to etcd at %s: %w", where, mapErr(err))
	}
	pctx, cancel := context.WithTimeout(ctx, cc.DialTimeout)
	defer cancel()
	members, err := client.MemberList(pctx)
	if err != nil {
		if learnerRefusal(err) {
			err = fmt.Errorf("%w: %w (the endpoints are learners: members added with etcdctl member add --learner and not promoted, which answer no lock request; list the cluster's voting members, which etcdctl member list shows with IS_LEARNER false, or promote the learners first with etcdctl member promote ID)",
				backend.ErrMisconfigured, err)
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			if lost := quorumLost(ctx, client, cfg.Endpoints, min(cc.DialTimeout, time.Second)); lost != nil {
				err = fmt.Errorf("%w: no answer within %v: %w: %w", backend.ErrUnavailable, cc.DialTimeout, lost, err)
			} else {
				err = noAnswer(ctx, cfg.Endpoints[0], cc, ca, err)
			}
		}
		client.Close()
		return nil, false, fmt.Errorf("etcdstore: connecting to etcd at %s: %w", where, mapErr(err))
	}
	proxied = proxyAnswered(members)
	if proxied {
		// A grpc-proxy answers whether or not the cluster behind it does.
		if err := clusterBehindProxy(pctx, cfg, cc.DialTimeout); err != nil {
			client.Close()
			return nil, false, fmt.Errorf("etcdstore: connecting to etcd at %s: %w", where, err)
		}
	}
	if err := sameCluster(pctx, client, cfg.Endpoints, min(cc.DialTimeout, time.Second)); err != nil {
		client.Close()
		return nil, false, fmt.Errorf("etcdstore: connecting to etcd at %s: %w", where, err)
	}
	return client, proxied, nil
}

// sameCluster asks every endpoint, at once, for its cluster ID, and refuses
// endpoints of two clusters: etcd's client spreads requests over them, so
// a lease one grants is unknown to the other ("requested lease not
// found"), and a lock taken in one is free in the other, to a process
// whose request went there. An endpoint that refuses connections, or does
// not answer within wait, is not compared.
func sameCluster(ctx context.Context, client *clientv3.Client, endpoints []string, wait time.Duration) error {
	if len(endpoints) < 2 {
		return nil
	}
	ids := make([]uint64, len(endpoints))
	for i, st := range statuses(ctx, client, endpoints, wait) {
		if st != nil && st.Header != nil {
			ids[i] = st.Header.ClusterId
		}
	}
	first := -1
	for i, id := range ids {
		switch {
		case id == 0:
		case first < 0:
			first = i
		case id != ids[first]:
			return fmt.Errorf("%w: the endpoints %s and %s belong to two etcd clusters (cluster IDs %x and %x): list the members of one cluster only; the client spreads its requests over every endpoint, so a lock would be held in either cluster",
				backend.ErrMisconfigured, redactEndpoint(endpoints[first]), redactEndpoint(endpoints[i]), ids[first], id)
		}
	}
	return nil
}

// learnerRefusal reports whether err is a learner member's refusal of a
// request it does not serve. etcd's client sends such a request again to
// another endpoint, so only a client whose endpoints are all learners
// sees it.
func learnerRefusal(err error) bool {
	return rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCNotSupportedForLearner)
}

// statuses asks every endpoint, at once, for its status, which a member
// serves by itself, without a raft leader. An endpoint that refuses
// connections, or does not answer within wait, has a nil status.
func statuses(ctx context.Context, client *clientv3.Client, endpoints []string, wait time.Duration) []*clientv3.StatusResponse {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sts := make([]*clientv3.StatusResponse, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			// gRPC waits for a member that refuses connections until
			// ctx ends; a plain dial finds out at once.
			if Reach(ctx, ep) != nil {
				return
			}
			if st, err := client.Status(ctx, ep); err == nil {
				sts[i] = st
			}
		})
	}
	wg.Wait()
	return sts
}

// quorumLost returns an error naming the endpoints that answer Status but
// have no raft leader, if at least one answers and none that answers has a
// leader: the cluster has lost its quorum (or those members are cut off
// from it), and etcd answers no lock request until it has one again. It
// returns nil otherwise.
func quorumLost(ctx context.Context, client *clientv3.Client, endpoints []string, wait time.Duration) error {
	return leaderless(endpoints, statuses(ctx, client, endpoints, wait))
}

// leaderless is quorumLost's answer from the endpoints' statuses (nil for
// an endpoint that did not answer).
func leaderless(endpoints []string, sts []*clientv3.StatusResponse) error {
	var names []string
	for i, st := range sts {
		switch {
		case st == nil:
		case st.Leader != 0:
			return nil
		default:
			names = append(names, redactEndpoint(endpoints[i]))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("the members that answer (%s) have no raft leader: the cluster has lost its quorum, and answers no request until a majority of its members run and reach each other again (start the members that are down, or mend the network between them; etcdctl endpoint status --cluster shows each member's leader)",
		strings.Join(names, ", "))
}

// noAnswer is err, the deadline of a first request that got no answer,
// with why: gRPC keeps retrying a connection that fails and reports only
// the deadline, so one connection of our own to endpoint finds out
// (unanswered). If it finds nothing wrong but gRPC goes through an HTTP
// proxy (HTTPS_PROXY in the environment), the proxy is named. A TLS
// failure names the CA file (ca, nil without one).
func noAnswer(ctx context.Context, endpoint string, cc clientv3.Config, ca *tlsfiles.CAFile, err error) error {
	if why := unanswered(ctx, endpoint, ca.Config(cc.TLS), ca); why != nil {
		return fmt.Errorf("no answer within %v (%w): %w", cc.DialTimeout, why, err)
	}
	if proxy := envProxy(endpoint); proxy != "" {
		return fmt.Errorf("%w: no answer within %v through the HTTP proxy %s, which opened a tunnel to the endpoint: %w (etcd's client goes through the proxy that HTTPS_PROXY or https_proxy in the environment names: check that etcd answers at that address behind the proxy, or list its host in NO_PROXY to reach it directly)",
			backend.ErrUnavailable, cc.DialTimeout, proxy, err)
	}
	return fmt.Errorf("%w: no answer within %v: %w", backend.ErrUnavailable, cc.DialTimeout, err)
}

// unanswered returns why a client gets no answer at endpoint, classified,
// or nil if it finds nothing wrong. Through the HTTP proxy that the
// environment names for it, as gRPC goes, that is the proxy's failure
// (unreachable, a 407, a refused tunnel), or else a TLS setup that cannot
// work, if a direct connection reaches the endpoint; otherwise what one
// direct connection finds (diagnose).
func unanswered(ctx context.Context, endpoint string, tc *tls.Config, ca *tlsfiles.CAFile) error {
	if envProxy(endpoint) == "" {
		return storeerr.Classify(diagnose(ctx, endpoint, tc, ca))
	}
	if err := proxyProblem(ctx, endpoint); err != nil {
		return err
	}
	if err := storeerr.Classify(diagnose(ctx, endpoint, tc, ca)); errors.Is(err, backend.ErrMisconfigured) {
		return err
	}
	return nil
}

// Reach connects once to endpoint as etcd's client does, through the HTTP
// proxy that the environment names for it (HTTPS_PROXY, which gRPC
// follows; the proxy's failure comes classified) or directly, and returns
// why it cannot, or nil. A direct dial alone would fail an endpoint that
// this machine reaches only through the proxy.
func Reach(ctx context.Context, endpoint string) error {
	if envProxy(endpoint) != "" {
		return proxyProblem(ctx, endpoint)
	}
	network, address := DialTarget(endpoint)
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return err
	}
	conn.Close()
	return nil
}

// envProxy returns the HTTP proxy, without its password, that the
// environment (HTTPS_PROXY, NO_PROXY) names for a TCP endpoint, as gRPC
// reads it, or "".
func envProxy(endpoint string) string {
	network, address := DialTarget(endpoint)
	if network != "tcp" {
		return ""
	}
	return storeerr.EnvProxy(address)
}

// proxyProblem returns why the HTTP proxy that the environment names for
// a TCP endpoint gives gRPC no tunnel there (it cannot be reached, asks
// for authentication, refuses), classified, or nil (no proxy, or a
// tunnel opened).
func proxyProblem(ctx context.Context, endpoint string) error {
	network, address := DialTarget(endpoint)
	if network != "tcp" {
		return nil
	}
	return storeerr.ProxyProblem(ctx, address)
}

// dialAny returns nil once a connection to one of endpoints succeeds
// (Reach: through the environment's proxy, where gRPC goes through it), and
// the first endpoint's error if none does, each dial bounded by d.
func dialAny(ctx context.Context, endpoints []string, d time.Duration) error {
	var first error
	for _, ep := range endpoints {
		dctx, cancel := context.WithTimeout(ctx, d)
		err := Reach(dctx, ep)
		cancel()
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// DialTarget returns the network and address that etcd's client dials
// for endpoint: "unix" and the socket's path for a unix:// or unixs://
// endpoint, else "tcp" and the endpoint URL's host:port (or the endpoint,
// if it is not a URL). A plain dial to them (net.Dialer.DialContext)
// tells why an endpoint cannot be reached, which gRPC does not.
func DialTarget(endpoint string) (network, address string) {
	for _, scheme := range []string{"unix://", "unixs://"} {
		if path, ok := strings.CutPrefix(endpoint, scheme); ok {
			return "unix", path
		}
	}
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		return "tcp", u.Host
	}
	return "tcp", endpoint
}

// Diagnose dials endpoint once as c says (over TLS with c's files, if c
// asks for TLS) and returns why a client of c gets no answer there,
// matching backend.ErrUnavailable or backend.ErrMisconfigured: nothing
// listens, the TLS handshake fails (naming the CA file the server's
// certificate is not signed by), the port serves another protocol, or
// the HTTP proxy that the environment names for it (HTTPS_PROXY, which
// gRPC follows) asks for authentication, refuses the tunnel or cannot be
// reached. It returns nil if it finds nothing wrong. A request that timed out tells
// only the deadline: gRPC keeps the cause of its failed connections to
// itself.
func (c Config) Diagnose(ctx context.Context, endpoint string) error {
	tc, ca, err := c.tlsConfig()
	if err != nil {
		return err
	}
	return unanswered(ctx, endpoint, tc, ca)
}

// diagnose dials endpoint once (with TLS if tc is not nil) and returns
// what failed, or nil. A failed verification names the CA file ca (nil
// without one).
func diagnose(ctx context.Context, endpoint string, tc *tls.Config, ca *tlsfiles.CAFile) error {
	network, host := DialTarget(endpoint)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, host)
	if err != nil {
		return err
	}
	defer conn.Close()
	if tc == nil {
		return plainProblem(conn, host)
	}
	tc = tc.Clone()
	if tc.ServerName == "" {
		tc.ServerName, _, _ = net.SplitHostPort(host)
	}
	tc.NextProtos = []string{"h2"}
	tconn := tls.Client(conn, tc)
	if err := tconn.HandshakeContext(ctx); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			// etcd without TLS on this port reads the client hello as a
			// malformed HTTP/2 preface and hangs up.
			return fmt.Errorf("%w: TLS handshake with %s: %w (the server closed the connection: it does not serve TLS on this port, so use an http:// endpoint, or it refused this client)",
				backend.ErrMisconfigured, host, err)
		}
		return fmt.Errorf("TLS handshake with %s: %w", host, ca.Explain(err))
	}
	// TLS 1.3 servers report a missing client certificate only on the
	// first read.
	_ = tconn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := tconn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("TLS with %s: %w", host, err)
	}
	return nil
}

// plainProblem sends the HTTP/2 preface a plain gRPC client starts with on
// conn and reads the start of the answer: etcd without TLS answers with a
// SETTINGS frame, a TLS server with an alert or by hanging up, a server of
// another protocol (Redis, HTTP/1) with text. It returns an error naming
// the fix for all but the first, and nil if the answer is a SETTINGS frame
// or does not come within a second.
func plainProblem(conn net.Conn, host string) error {
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		return nil
	}
	// A frame header is 9 bytes; its fourth is the frame's type, 4 for
	// SETTINGS, which an HTTP/2 server sends first.
	b := make([]byte, 32)
	n, err := io.ReadAtLeast(conn, b, 9)
	b = b[:n]
	const fix = "use an https:// endpoint (with the CA file that signed its certificate)"
	switch {
	case n > 0 && b[0] == 0x15: // a TLS alert record
		return fmt.Errorf("%w: %s answered a plain connection with a TLS alert: it serves TLS on this port, so %s", backend.ErrMisconfigured, host, fix)
	case n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("%w: %s hung up on a plain HTTP/2 connection, as a TLS server does: if it serves TLS, %s; if not, it is not an etcd client port", backend.ErrMisconfigured, host, fix)
	case n >= 9 && b[3] == 4, n < 9 && err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return nil // a SETTINGS frame, or no full answer yet: not a refusal
	}
	return fmt.Errorf("%w: %s answered a plain HTTP/2 connection with %q, which is not HTTP/2: it is not an etcd client port (a Redis or HTTP/1 server answers so): give the port etcd serves clients on (2379 by default)",
		backend.ErrMisconfigured, host, b)
}

// OpenStore is Open followed by New: what a command-line tool calls for
// --backend etcd. The Store owns the client: its Close closes it. If an
// etcd grpc-proxy answered, which baton does not support (see "etcd
// grpc-proxy" in the package documentation), it logs a warning that says
// so to the Store's logger.
func OpenStore(ctx context.Context, cfg Config, opts ...Option) (*Store, error) {
	client, proxied, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s, err := New(client, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.ownClient = true
	if proxied {
		s.log.Warn("etcdstore: the endpoints reach etcd through an etcd grpc-proxy, which baton does not support: the proxy answers lease keepalives on its own schedule, so a holder cannot bound when etcd last extended its lease, and a process that holds or waits for a lock logs its keepalive stream as stalled every few seconds; list the cluster's members instead (go doc etcdstore, \"etcd grpc-proxy\")",
			"endpoints", redactEndpoints(cfg.Endpoints))
	}
	return s, nil
}

// redactEndpoints joins endpoints, each with its user information
// redacted, for messages.
func redactEndpoints(endpoints []string) string {
	r := make([]string, len(endpoints))
	for i, ep := range endpoints {
		r[i] = redactEndpoint(ep)
	}
	return strings.Join(r, ",")
}
