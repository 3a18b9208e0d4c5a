package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// NewClient returns redis.NewClient(opt) with the hook that Open's
// clients have: a server that closes a new connection at go-redis's first
// command, HELLO, without a word, and answers PING, as twemproxy
// (nutcracker) does, fails every command with an error that matches
// backend.ErrMisconfigured and names twemproxy, not with an EOF.
//
// go-redis v9 opens every connection with HELLO, whatever the protocol
// asked for, and takes any answer (an error too) as the server's.
// twemproxy closes a client's connection at any command it does not
// support, HELLO among them, so no go-redis v9 client can use it (go-redis
// issue 2616), and the EOF left looks like a restart, which callers
// retry until they give up. When a connection is closed at HELLO before
// any answer, the hook asks the server again on a connection of its own
// (for at most a second): if it answers PING and closes at HELLO again,
// the command fails as above; otherwise (a server restarting) with the
// EOF, as without the hook. Once a connection's first answer has arrived,
// the hook passes its reads and writes through.
func NewClient(opt *redis.Options) *redis.Client {
	c := redis.NewClient(opt)
	c.AddHook(helloHook{})
	return c
}

// helloHook is NewClient's hook.
type helloHook struct{}

func (helloHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		redial := func(ctx context.Context) (net.Conn, error) { return next(ctx, network, addr) }
		hc := &helloConn{Conn: c, addr: addr, redial: redial}
		if sc, ok := c.(syscall.Conn); ok {
			return helloSyscallConn{hc, sc}, nil
		}
		return hc, nil
	}
}

// helloSyscallConn is a helloConn over a connection that gives its file
// descriptor (TCP, unix sockets; TLS does not). The go-redis pool checks
// an idle connection before it hands it out by peeking at its socket
// through syscall.Conn, which it does not look for beneath a wrapper: a
// helloConn alone would hide the socket, and a connection the server had
// closed meanwhile (a restart, CLIENT KILL, a proxy's idle timeout) would
// go to the next command, which would fail with an EOF, not be redialled.
type helloSyscallConn struct {
	*helloConn
	sc syscall.Conn
}

func (c helloSyscallConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

func (helloHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (helloHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The phases of a helloConn.
const (
	helloUnsent   = iota // nothing written yet
	helloAwaiting        // HELLO written, nothing read yet
	helloPast            // an answer read, or the first command was not HELLO
	helloRefused         // closed at HELLO by a server that closes at it (refused)
)

// helloConn is a connection that watches its first command and the
// answer to it (see helloHook); past them, it only passes reads and
// writes on.
type helloConn struct {
	net.Conn
	addr   string
	redial func(context.Context) (net.Conn, error)
	phase  atomic.Int32
	// refused is the *noHelloError every read returns from helloRefused
	// on: go-redis peeks for push notifications before it reads a reply,
	// and bufio hands a read error to one call only.
	refused error
}

// NetConn returns the connection beneath, as crypto/tls.Conn's does: the
// go-redis pool finds the socket through it to check idle connections.
func (c *helloConn) NetConn() net.Conn { return c.Conn }

func (c *helloConn) Write(p []byte) (int, error) {
	if c.phase.Load() == helloUnsent {
		next := int32(helloPast)
		if isHello(p) {
			next = helloAwaiting
		}
		c.phase.CompareAndSwap(helloUnsent, next)
	}
	return c.Conn.Write(p)
}

func (c *helloConn) Read(p []byte) (int, error) {
	switch c.phase.Load() {
	case helloPast, helloUnsent:
		return c.Conn.Read(p)
	case helloRefused:
		return 0, c.refused
	}
	n, err := c.Conn.Read(p)
	if n > 0 || err == nil || !closedConn(err) || !closesAtHello(c.redial) {
		c.phase.Store(helloPast)
		return n, err
	}
	c.refused = &noHelloError{addr: c.addr, err: err}
	c.phase.Store(helloRefused)
	return 0, c.refused
}

// isHello reports whether p, a command in RESP, is HELLO.
func isHello(p []byte) bool {
	_, rest, ok := bytes.Cut(p, []byte("\r\n"))
	if !ok || len(p) == 0 || p[0] != '*' {
		return false
	}
	name, ok := bytes.CutPrefix(rest, []byte("$5\r\n"))
	return ok && len(name) >= 5 && bytes.EqualFold(name[:5], []byte("hello"))
}

// closedConn reports whether err is the peer closing the connection.
func closedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// helloProbeTimeout bounds closesAtHello.
const helloProbeTimeout = time.Second

// closesAtHello reports whether the server that dial reaches answers PING
// in RESP (PONG, or NOAUTH from a twemproxy with redis_auth) and then
// closes the connection at HELLO, sending nothing.
func closesAtHello(dial func(context.Context) (net.Conn, error)) bool {
	ctx, cancel := context.WithTimeout(context.Background(), helloProbeTimeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		return false
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(helloProbeTimeout)); err != nil {
		return false
	}
	r := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return false
	}
	if line, err := r.ReadString('\n'); err != nil || !simpleReply(line) {
		return false
	}
	if _, err := io.WriteString(conn, "*1\r\n$5\r\nHELLO\r\n"); err != nil {
		return false
	}
	n, err := r.Read(make([]byte, 1))
	return n == 0 && err != nil && closedConn(err)
}

// noHelloError is a connection that the server at addr closed at HELLO,
// having answered PING: twemproxy does so (see NewClient). It matches
// backend.ErrMisconfigured, and does not unwrap to the EOF it was, so that
// go-redis does not retry the command.
type noHelloError struct {
	addr string
	err  error
}

func (e *noHelloError) Error() string {
	return fmt.Sprintf("%s answers PING but closes the connection at HELLO (%v), which go-redis sends first on every connection: "+
		"twemproxy (nutcracker) does so, and cannot serve locks: it supports neither HELLO nor the pub/sub, SCAN and INFO that baton uses, "+
		"and with auto_eject_hosts it moves a lock's keys to a server that never saw them; "+
		"give baton the Redis server's own address (several servers: Redlock over three or more independent servers, redis+sentinel:// or redis+cluster://; "+
		"see docs/backends.md, \"Redis behind twemproxy\")", e.addr, e.err)
}

func (e *noHelloError) Is(target error) bool { return target == backend.ErrMisconfigured }

// simpleReply reports whether line, read up to its '\n', is a RESP simple
// string or error: what a server that speaks RESP answers PING with
// (+PONG, or -NOAUTH before AUTH).
func simpleReply(line string) bool {
	return len(line) > 2 && (line[0] == '+' || line[0] == '-') && strings.HasSuffix(line, "\r\n")
}
