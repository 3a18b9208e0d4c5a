// Package faultproxy is a small TCP proxy for partition tests: it forwards
// connections from a loopback listener to a target and can stall them (a
// network partition), reset them, and add latency.
//
// A Proxy serves only the loopback address it listens on; it is meant for
// tests against store processes on the same machine.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection accepted on Addr to the target address.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln net.Listener

	mu      sync.Mutex
	target  string
	links   map[*link]struct{}
	cut     bool
	latency time.Duration
	// loseEvery > 0 closes the connection of every loseEvery-th chunk of
	// replies instead of forwarding it (LoseReplies); replies counts them.
	loseEvery, replies int
	changed            chan struct{} // closed and replaced whenever cut or latency change
	closed             bool

	wg sync.WaitGroup
}

// link is one proxied connection: the client side and the target side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
	dropped        bool // guarded by Proxy.mu: see Drop
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// New starts a proxy on 127.0.0.1 (a free port) that forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut partitions the proxy: from now on no byte is forwarded in either
// direction, on existing or new connections, until Restore. Nothing is
// closed: like a real partition, both sides just stop hearing from each
// other, and only their own timeouts tell them. Bytes read while cut are
// held and delivered, in order, after Restore.
func (p *Proxy) Cut() { p.set(func() { p.cut = true }) }

// Restore ends a Cut.
func (p *Proxy) Restore() { p.set(func() { p.cut = false }) }

// SetLatency delays every chunk of bytes by d (one way) before it is
// forwarded. 0 removes the delay.
func (p *Proxy) SetLatency(d time.Duration) { p.set(func() { p.latency = d }) }

// LoseReplies makes every n-th chunk of bytes that a target sends back,
// counted over all connections, never arrive: the proxy closes that
// connection instead of forwarding it, as a connection reset after the
// store ran a request and before its reply arrived (a CLIENT KILL, a load
// balancer's reset, a crashed proxy). 0 ends it.
func (p *Proxy) LoseReplies(n int) { p.set(func() { p.loseEvery, p.replies = n, 0 }) }

// loseReply counts one chunk of replies and reports whether LoseReplies
// has it lost.
func (p *Proxy) loseReply() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loseEvery <= 0 {
		return false
	}
	p.replies++
	return p.replies%p.loseEvery == 0
}

// Retarget forwards the connections accepted from now on to target, as a
// host name pointed at another server does for the connections opened
// after the change: the current connections stay with the old target.
func (p *Proxy) Retarget(target string) { p.set(func() { p.target = target }) }

// Drop silently kills every current connection, as a NAT or a stateful
// firewall does when it forgets a flow (an idle timeout, a restart): from
// now on no byte of those connections is forwarded in either direction,
// and nothing is closed, so only the two ends' own timeouts (TCP or
// application keepalives, request deadlines) tell them. New connections
// are forwarded as usual.
func (p *Proxy) Drop() {
	p.set(func() {
		for l := range p.links {
			l.dropped = true
		}
	})
}

// Reset closes every current connection (both sides see it at once); new
// connections are still accepted.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Close stops the listener, closes every connection, and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(l, l.server, l.client)
		go p.pump(l, l.client, l.server)
	}
}

// pump copies src to dst chunk by chunk, holding each chunk while the proxy
// is cut and until its latency has passed. It closes the link when either
// side fails.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold(l, time.Now()) {
				return
			}
			if src == l.server && p.loseReply() {
				return // the deferred close resets both sides
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold waits until a chunk read at 'read' may be forwarded. It returns false
// if the link was closed meanwhile.
func (p *Proxy) hold(l *link, read time.Time) bool {
	for {
		p.mu.Lock()
		cut, latency, changed := p.cut || l.dropped, p.latency, p.changed
		p.mu.Unlock()
		var t *time.Timer
		var wait <-chan time.Time
		if !cut {
			d := latency - time.Since(read)
			if d <= 0 {
				return true
			}
			t = time.NewTimer(d)
			wait = t.C
		}
		select {
		case <-l.done:
			return false
		case <-changed:
			if t != nil {
				t.Stop()
			}
		case <-wait:
			return true
		}
	}
}
