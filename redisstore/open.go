package redisstore

import (
	"fmt"
	"io"
	"net"
	neturl "net/url"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// ParseURL parses a redis:// or rediss:// (TLS) URL with redis.ParseURL and
// applies baton's defaults: ContextTimeoutEnabled, so that the deadlines of
// the contexts baton passes bound every call, and DialerRetries 1, so that
// a server that refuses connections is reported as such at once.
//
// The URL carries what go-redis supports, among others:
//
//	redis://[user[:password]@]host[:port][/db]   ACL user and password, DB number
//	rediss://host:port                            TLS with the system's root CAs
//	redis://[fd00::1]:6379                        an IPv6 address, in brackets
//	unix:///run/redis/redis.sock?db=2             a unix socket (unix://user:password@/path)
//	?dial_timeout=1s&read_timeout=2s&protocol=2   query options (see redis.ParseURL)
//
// A password in a URL is visible to anyone who can see the command line;
// prefer a credentials provider (WithClientOptions) for production.
//
// Of opts, WithClientOptions and WithTLSFiles apply, as Open applies
// them; the others are ignored.
func ParseURL(url string, opts ...Option) (*redis.Options, error) {
	return parseURL(url, newOptions(opts))
}

// parseURL is ParseURL with o's client options and TLS files.
func parseURL(url string, o options) (*redis.Options, error) {
	if u, err := neturl.Parse(url); err == nil && strayAt(u) {
		return nil, fmt.Errorf("redisstore: %w: %w", backend.ErrInvalidOptions, errEncoding)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w: %w", backend.ErrInvalidOptions, parseError(url, err))
	}
	if _, port, err := net.SplitHostPort(opt.Addr); err == nil && opt.Network != "unix" {
		if err := checkPort(port); err != nil {
			return nil, fmt.Errorf("redisstore: %w: %s: %w", backend.ErrInvalidOptions, RedactURL(url), err)
		}
	}
	opt.ContextTimeoutEnabled = true
	if opt.DialerRetries == 0 {
		// One dial per command attempt: go-redis's default of five, with
		// pauses, would make a refused connection look like a timeout
		// (the caller's deadline passes first) and hide its cause. The
		// engine retries acquisitions itself.
		opt.DialerRetries = 1
	}
	for _, f := range o.clientOptions {
		f(opt)
	}
	if err := o.applyTLSFiles(url, opt); err != nil {
		return nil, err
	}
	return opt, nil
}

// openClient returns a client for url and what closes it (the client,
// and for a redis+sentinel:// URL the sentinelWatch before it).
func openClient(url string, o options) (redis.UniversalClient, []io.Closer, error) {
	if topo, ok, err := parseTopology(url); ok || err != nil {
		if err != nil {
			return nil, nil, err
		}
		if len(o.clientOptions) > 0 {
			return nil, nil, fmt.Errorf("redisstore: %w: WithClientOptions applies to redis:// URLs; for %s, WithTLSFiles gives a private CA and a client certificate, and for anything else build the client with go-redis and pass it to New",
				backend.ErrInvalidOptions, topo.kind)
		}
		if err := topo.applyTLSFiles(url, o.tlsFiles); err != nil {
			return nil, nil, err
		}
		c := topo.client()
		if fc, ok := c.(*redis.Client); ok && topo.failover != nil {
			return c, []io.Closer{startSentinelWatch(fc, topo.failover), c}, nil
		}
		return c, []io.Closer{c}, nil
	}
	opt, err := parseURL(url, o)
	if err != nil {
		return nil, nil, err
	}
	c := NewClient(opt)
	return c, []io.Closer{c}, nil
}

// Open returns a Store on the Redis server at url (see ParseURL), or on a
// Sentinel-managed primary or a Redis Cluster (see "Topologies" in the
// package documentation), that owns its client: Close closes it. It does not contact the server; the first
// operation does. (With a redis+sentinel:// URL it subscribes to every
// sentinel's +switch-master in the background: see "Topologies".)
func Open(url string, opts ...Option) (*Store, error) {
	o := newOptions(opts)
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	c, closers, err := openClient(url, o)
	if err != nil {
		return nil, err
	}
	s := newStore(c, o)
	s.own(closers)
	return s, nil
}

// own makes s close closers, and moves s's subscriptions to the new
// primary whenever a sentinelWatch among them follows a switch.
func (s *Store) own(closers []io.Closer) {
	s.owned = closers
	move := s.hub.reconnect
	for _, c := range closers {
		if w, ok := c.(*sentinelWatch); ok {
			w.onSwitch.Store(&move)
		}
	}
}

// OpenRedlock returns a Redlock over the independent Redis servers at urls
// (at least 3, an odd number) that owns its clients: Close closes them.
func OpenRedlock(urls []string, opts ...Option) (*Redlock, error) {
	o := newOptions(opts)
	if err := o.validateRedlock(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if err := checkInstances(len(urls)); err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, 0, len(urls))
	owned := make([][]io.Closer, 0, len(urls))
	closeAll := func() {
		for _, cs := range owned {
			for _, c := range cs {
				_ = c.Close()
			}
		}
	}
	seen := map[string]string{} // server address -> the URL that named it
	for _, u := range urls {
		c, closers, err := openClient(u, o)
		if err != nil {
			closeAll()
			return nil, err
		}
		clients, owned = append(clients, c), append(owned, closers)
		if sc, ok := c.(*redis.Client); ok {
			addr := sc.Options().Addr
			if first, dup := seen[addr]; dup {
				closeAll()
				return nil, fmt.Errorf("redisstore: %w: %s and %s name the same server (%s): Redlock needs independent servers, each its own redis-server, or a quorum is one server's answer counted twice",
					backend.ErrInvalidOptions, RedactURL(first), RedactURL(u), addr)
			}
			seen[addr] = u
		}
	}
	r, err := newRedlock(clients, o)
	if err != nil {
		closeAll()
		return nil, err
	}
	r.ownsClients = true
	for i, s := range r.stores {
		s.own(owned[i])
	}
	return r, nil
}

// OpenURLs is what the CLI calls for --redis-url: one URL opens a Store
// (--backend redis), three or more (an odd number) open a Redlock
// (--backend redlock). Closing the returned Closer closes the clients.
func OpenURLs(urls []string, opts ...Option) (backend.Backend, io.Closer, error) {
	switch len(urls) {
	case 0:
		return nil, nil, fmt.Errorf("redisstore: %w: no Redis URL given", backend.ErrInvalidOptions)
	case 1:
		s, err := Open(urls[0], opts...)
		if err != nil {
			return nil, nil, err
		}
		return s, s, nil
	}
	r, err := OpenRedlock(urls, opts...)
	if err != nil {
		return nil, nil, err
	}
	return r, r, nil
}
