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
)

// explainClosed explains a connection that a server closed at once, err,
// on a Store whose client dials one server (Get calls it: the first
// request of the CLI and of doctor). A closed connection says nothing of
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
//
// Otherwise it returns err.
func (s *Store) explainClosed(ctx context.Context, err error) error {
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		return err
	}
	c, ok := oneServer(s.client)
	if !ok {
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
	// Only whether the server speaks TLS is asked: no data is sent over
	// the connection, so its certificate need not be verified.
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second}, Config: &tls.Config{InsecureSkipVerify: true}}
	conn, herr := d.DialContext(ctx, "tcp", addr)
	if herr != nil {
		return err
	}
	_ = conn.Close()
	return fmt.Errorf("%w: %w (the server at %s speaks TLS on this port: use a rediss:// URL, with the CA that signed its certificate)",
		backend.ErrMisconfigured, err, addr)
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
