package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// plainToTLS explains a connection that a server closed at once, err, on
// a Store whose client does not use TLS: if the server at the client's
// address completes a TLS handshake, it serves TLS there and the URL
// should be rediss://, and the error says so and matches
// backend.ErrMisconfigured. Otherwise it returns err.
//
// A TLS server closes a plain connection on its first bytes, which go-redis
// reports as a bare EOF. Get calls it, as the first request of the CLI
// and of doctor; the probe dials once, sends nothing but a client hello,
// and gives up after a second, or when ctx ends.
func (s *Store) plainToTLS(ctx context.Context, err error) error {
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		return err
	}
	c, ok := s.client.(*redis.Client)
	if !ok || c.Options().TLSConfig != nil {
		return err
	}
	addr := c.Options().Addr
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
