package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/tlsfiles"
	"github.com/redis/go-redis/v9"
)

// WithTLSFiles (Open, OpenRedlock, OpenURLs) sets the PEM files of every
// TLS connection of a rediss://, rediss+sentinel:// or rediss+cluster://
// URL: to the server, to each node of a Cluster, and, for a Sentinel URL,
// to the sentinels (go-redis speaks TLS to the sentinels and to the
// servers alike, with one configuration), their failover watch included.
//
// caFile is a bundle of the CAs that sign the servers' certificates,
// instead of the system's roots; it is read again at a new connection
// once it changed on disk, so a CA rotated by cert-manager or Vault is
// trusted without a restart. certFile and keyFile, which go together, are
// a client certificate for servers with tls-auth-clients, read again at
// every handshake. An empty name leaves that part as it was. Open fails,
// naming the file, if one cannot be loaded (backend.ErrMisconfigured),
// and refuses a URL without TLS (backend.ErrInvalidOptions). A server
// whose certificate no CA in caFile signed fails its connections with an
// error that names caFile and matches backend.ErrMisconfigured.
//
// With caFile, the client dials through a Dialer of its own: a Dialer set
// with WithClientOptions is replaced.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) { o.tlsFiles = &tlsFileNames{ca: caFile, cert: certFile, key: keyFile} }
}

// tlsFileNames are WithTLSFiles's arguments.
type tlsFileNames struct{ ca, cert, key string }

// dialer is what a client's Dialer becomes.
type dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// apply loads the files into tc, which url's client uses, and with a CA
// file sets *dial to a dialer that trusts the CAs in the file at each
// dial.
func (f *tlsFileNames) apply(url string, tc *tls.Config, timeout time.Duration, dial *dialer) error {
	if f == nil {
		return nil
	}
	if tc == nil {
		return fmt.Errorf("redisstore: %w: WithTLSFiles needs a TLS URL, and %s is not one: write rediss://, rediss+sentinel:// or rediss+cluster://",
			backend.ErrInvalidOptions, RedactURL(url))
	}
	ca, err := tlsfiles.Apply(tc, f.ca, f.cert, f.key)
	if err != nil {
		return fmt.Errorf("redisstore: TLS files: %w", err)
	}
	if ca == nil {
		return nil
	}
	if timeout <= 0 {
		timeout = 5 * time.Second // go-redis's default
	}
	*dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: ca.Config(tc)}
		conn, err := d.DialContext(ctx, network, addr)
		return conn, ca.Explain(err)
	}
	return nil
}

// applyTLSFiles applies WithTLSFiles to the options of a single server.
func (o options) applyTLSFiles(url string, opt *redis.Options) error {
	return o.tlsFiles.apply(url, opt.TLSConfig, opt.DialTimeout, &opt.Dialer)
}

// applyTLSFiles applies WithTLSFiles to a topology's options.
func (t *topology) applyTLSFiles(url string, f *tlsFileNames) error {
	if t.failover != nil {
		return f.apply(url, t.failover.TLSConfig, t.failover.DialTimeout, &t.failover.Dialer)
	}
	return f.apply(url, t.cluster.TLSConfig, t.cluster.DialTimeout, &t.cluster.Dialer)
}
