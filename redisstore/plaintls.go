package redisstore

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// explainClosed explains a connection that a server closed at once, err
// (Get calls it: the first request of the CLI and of doctor). A closed
// connection says nothing of
// why, so it asks the server in two probes, each bounded by a second and
// ctx, that send no command:
//
//   - A Redis that refuses a client at once writes why before it closes:
//     "-DENIED" in protected mode (no password for the default user, and a
//     client not on the loopback interface), which is a setup that cannot
//     work (backend.ErrMisconfigured, with the fixes), and "-ERR max number
//     of clients reached", which wrap reports as a busy server.
//   - A TLS server closes a plain connection on its first bytes, which
//     go-redis reports as a bare EOF: if the server completes a TLS
//     handshake, the URL should be rediss:// (backend.ErrMisconfigured).
//     A Sentinel or Cluster client without TLS asks so of the primary the
//     sentinels name, or of its first seed node: the URL should be
//     rediss+sentinel:// or rediss+cluster://.
//
// The first probe is for a client of one server only. Otherwise it
// returns err.
func (s *Store) explainClosed(ctx context.Context, err error) error {
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		return err
	}
	c, ok := oneServer(s.client)
	if !ok {
		for _, addr := range s.plainTopologyAddrs(ctx) {
			if e := speaksTLS(ctx, err, addr, s.tlsScheme()); e != err {
				return e
			}
		}
		return err
	}
	addr := c.Options().Addr
	if c.Options().TLSConfig != nil {
		return err
	}
	if greeting := firstWords(ctx, addr); greeting != "" {
		if strings.HasPrefix(greeting, "-DENIED") {
			return fmt.Errorf("%w: %w (the server at %s refuses this client: it runs in protected mode, which accepts only clients on its loopback interface while its default user has no password: set a password (requirepass, or ACL SETUSER default) and give it in the URL, or turn protected-mode off on a server no one else can reach; it said: %.120s...)",
				backend.ErrMisconfigured, err, addr, strings.TrimPrefix(greeting, "-DENIED "))
		}
		if msg, ok := strings.CutPrefix(greeting, "-"); ok {
			return errors.New(msg) // wrap names it (maxclients: busy)
		}
	}
	return speaksTLS(ctx, err, addr, "rediss://")
}

// speaksTLS returns err, a connection to addr closed at once, as a setup
// that cannot work if addr completes a TLS handshake: the URL should use
// scheme. Otherwise it returns err.
func speaksTLS(ctx context.Context, err error, addr, scheme string) error {
	// Only whether the server speaks TLS is asked: no data is sent over
	// the connection, so its certificate need not be verified.
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{InsecureSkipVerify: true}}
	conn, herr := d.DialContext(ctx, "tcp", addr)
	if herr != nil {
		return err
	}
	_ = conn.Close()
	also := ""
	if scheme == "rediss+sentinel://" {
		also = " (the sentinels must serve TLS too: go-redis speaks TLS to them and to the servers with one configuration)"
	}
	return fmt.Errorf("%w: %w (the server at %s speaks TLS on this port: use a %s URL%s, with the CA that signed its certificate)",
		backend.ErrMisconfigured, err, addr, scheme, also)
}

// plainTopologyAddrs returns, for a Store on a Sentinel or a Cluster
// without TLS, the addresses to ask whether they speak TLS: the first
// sentinel and the primary it names now (dialled within a second), or
// the first seed node; nil for any other Store.
func (s *Store) plainTopologyAddrs(ctx context.Context) []string {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		if o := c.Options(); o.TLSConfig == nil && len(o.Addrs) > 0 {
			return o.Addrs[:1]
		}
	case *redis.Client:
		if c.Options().TLSConfig != nil {
			return nil
		}
		var addrs []string
		for _, o := range s.owned {
			if w, ok := o.(*sentinelWatch); ok && len(w.addrs) > 0 {
				addrs = append(addrs, w.addrs[0])
			}
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if conn, err := c.Options().Dialer(ctx, "tcp", ""); err == nil { // asks the sentinels
			addrs = append(addrs, conn.RemoteAddr().String())
			_ = conn.Close()
		}
		return addrs
	}
	return nil
}

// tlsScheme is the scheme of the URL with TLS of a Store on a Sentinel or
// a Cluster.
func (s *Store) tlsScheme() string {
	if _, ok := s.client.(*redis.ClusterClient); ok {
		return "rediss+cluster://"
	}
	return "rediss+sentinel://"
}

// firstWords dials addr and returns the first line the server writes
// before it is sent anything, within a second or ctx (Redis says nothing
// unless it refuses the client), or "".
func firstWords(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return ""
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	line, _ := bufio.NewReader(io.LimitReader(conn, 4096)).ReadString('\n')
	return strings.TrimSpace(line)
}
