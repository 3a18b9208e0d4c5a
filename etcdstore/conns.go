package etcdstore

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/internal/tlsfiles"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// connTracker records the connections an etcd client built from
// Config.ClientConfig made, and when each last received a byte, so that
// a Store over that client can close the ones that went silent (see
// closeSilent). It reaches the Store through the client's context (see
// trackerOf): a client the user built with a configuration of their own
// has none, and is left to gRPC's keepalive.
type connTracker struct {
	base time.Time // monotonic origin of trackedConn.lastRead

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// handshakeErr is why the last TLS handshake failed, nil once one
	// succeeds: gRPC reports a request without a connection by its
	// deadline alone.
	handshakeErr error
}

// noteHandshake records the outcome of a TLS handshake.
func (t *connTracker) noteHandshake(err error) {
	t.mu.Lock()
	t.handshakeErr = err
	t.mu.Unlock()
}

// lastHandshakeErr returns why the last TLS handshake failed, or nil if it
// succeeded or none was made. A nil tracker has none.
func (t *connTracker) lastHandshakeErr() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handshakeErr
}

// connTrackerKey is the client context's key of its connTracker.
type connTrackerKey struct{}

// trackConns returns cc with every connection of the client it configures
// tracked: its transport credentials (TLS config tc, or none) wrapped so
// that they see each new connection, and its context carrying the tracker.
// Each new connection trusts the CAs in ca now (ca.Config), if ca is not
// nil.
func trackConns(cc clientv3.Config, tc *tls.Config, ca *tlsfiles.CAFile) clientv3.Config {
	t := &connTracker{base: time.Now(), conns: make(map[*trackedConn]struct{})}
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	// The etcd client appends Config.DialOptions after its own transport
	// credentials, which are these (credentials.NewTLS over Config.TLS,
	// or none): the last ones given win.
	cc.DialOptions = append(cc.DialOptions, grpc.WithTransportCredentials(trackingCreds{creds, t, tc, ca}))
	cc.Context = context.WithValue(context.Background(), connTrackerKey{}, t)
	return cc
}

// trackerOf returns the tracker of client's connections, or nil if the
// client was not configured by ClientConfig.
func trackerOf(client *clientv3.Client) *connTracker {
	t, _ := client.Ctx().Value(connTrackerKey{}).(*connTracker)
	return t
}

// closeSilent closes every tracked connection that has received nothing
// since since, and returns how many it closed. gRPC then dials again at
// once: its own keepalive would notice a connection dropped silently (a
// NAT or a firewall that forgot the flow) only after 10s + 5s, longer
// than a holder's renew deadline. A nil tracker closes nothing.
func (t *connTracker) closeSilent(since time.Time) int {
	if t == nil {
		return 0
	}
	limit := since.Sub(t.base)
	var silent []*trackedConn
	t.mu.Lock()
	for c := range t.conns {
		if time.Duration(c.lastRead.Load()) < limit {
			silent = append(silent, c)
		}
	}
	t.mu.Unlock()
	for _, c := range silent {
		_ = c.Close()
	}
	return len(silent)
}

// trackedConn is a raw connection of the client (under TLS, if any) that
// notes when it last received bytes, and leaves its tracker when closed.
type trackedConn struct {
	net.Conn
	t        *connTracker
	lastRead atomic.Int64 // since t.base
	once     sync.Once
}

func (t *connTracker) track(raw net.Conn) *trackedConn {
	c := &trackedConn{Conn: raw, t: t}
	c.lastRead.Store(int64(time.Since(t.base)))
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	return c
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(int64(time.Since(c.t.base)))
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// trackingCreds are transport credentials that track every connection
// they secure (or, insecure, pass through). With a CA file, a connection
// made after the file changed trusts the CAs now in it.
type trackingCreds struct {
	credentials.TransportCredentials
	t   *connTracker
	tls *tls.Config      // what TransportCredentials were made from
	ca  *tlsfiles.CAFile // nil without a CA file
}

func (tc trackingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c := tc.t.track(raw)
	creds := tc.TransportCredentials
	if cfg := tc.ca.Config(tc.tls); cfg != tc.tls {
		creds = credentials.NewTLS(cfg)
	}
	conn, info, err := creds.ClientHandshake(ctx, authority, c)
	if err != nil {
		_ = c.Close() // gRPC closes raw, not c
	}
	err = tc.ca.Explain(err)
	tc.t.noteHandshake(err)
	return conn, info, err
}

func (tc trackingCreds) Clone() credentials.TransportCredentials {
	return trackingCreds{tc.TransportCredentials.Clone(), tc.t, tc.tls, tc.ca}
}
