package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RedisInstallHint is the command that installs redis-server on Debian and
// Ubuntu, as CI does.
const RedisInstallHint = "apt-get update && apt-get install -y redis-server"

// redisStartTimeout bounds how long a redis-server may take to say it is
// ready (it loads its append-only file first after a restart).
const redisStartTimeout = 20 * time.Second

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

type redisConfig struct {
	appendOnly bool
	args       []string
	tls        *RedisTLS
	// sentinel, if not empty, runs the server as a sentinel with this
	// configuration (see redisSentinelOf).
	sentinel string
}

// RedisTLS names the PEM files of a TLS listener. With it, the server
// accepts only TLS connections, on Port.
type RedisTLS struct {
	CertFile, KeyFile, CAFile string
	// AuthClients requires clients to present a certificate signed by CA.
	AuthClients bool
}

// AppendOnly makes the server durable: appendonly yes with appendfsync
// always, so every write is on disk before the client sees the reply, and a
// restart (even after SIGKILL) keeps every acknowledged write.
func AppendOnly() RedisOption { return func(c *redisConfig) { c.appendOnly = true } }

// RedisArgs adds command-line arguments, e.g. "--requirepass", "secret".
func RedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}

// WithRedisTLS serves TLS only, with the given files; replication, a
// sentinel's links to the servers it monitors and the cluster bus use TLS
// too. StartRedisSentinel and StartRedisCluster pass it to every server
// and sentinel of the topology.
func WithRedisTLS(t RedisTLS) RedisOption { return func(c *redisConfig) { c.tls = &t } }

// RedisServer is a redis-server process on a free loopback port, with its
// own data directory in t.TempDir(). Without AppendOnly it persists nothing
// (save "" and appendonly no): a restart (Stop, or Kill, then Start) loses
// every key; with it, Start loads the data before it accepts connections.
// It is killed in t.Cleanup. Methods are safe for concurrent use.
type RedisServer struct {
	server // Start, Stop (SIGTERM), Kill, Restart, Log, Pause, Resume
	bin    string
	cfg    redisConfig
	// Port is the TCP port on 127.0.0.1; it stays the same across restarts.
	Port int
	// Dir is the data directory (RDB/AOF files); it survives restarts.
	Dir string
}

// FindRedisServer returns the path of redis-server: $BATON_REDIS_SERVER if
// set, else the first found on PATH, in /usr/bin or in /usr/sbin.
func FindRedisServer() (string, error) {
	if p, ok := findBinary("BATON_REDIS_SERVER", "redis-server", "/usr/bin", "/usr/sbin"); ok {
		return p, nil
	}
	return "", fmt.Errorf("redis-server not found on PATH, in /usr/bin or in /usr/sbin; install it with: %s", RedisInstallHint)
}

// StartRedis starts a redis-server and returns once it accepts connections.
// If redis-server is missing or does not start, the test fails when CI=true
// and is skipped otherwise.
func StartRedis(t testing.TB, opts ...RedisOption) *RedisServer {
	t.Helper()
	bin, err := FindRedisServer()
	if err != nil {
		unavailable(t, "%v", err)
	}
	r := &RedisServer{bin: bin, Dir: t.TempDir()}
	r.server = server{t: t, kind: "redis-server", addr: r.Addr, launch: r.launch, stopSig: syscall.SIGTERM}
	for _, o := range opts {
		o(&r.cfg)
	}
	t.Cleanup(r.Kill)
	// A port picked free can be taken before redis-server binds it.
	err = startOnFreePorts(1, func(ports []int) error {
		r.Port = ports[0]
		return r.start()
	})
	if err != nil {
		unavailable(t, "cannot start %s: %v (install it with: %s)", bin, err, RedisInstallHint)
	}
	return r
}

// Addr returns "127.0.0.1:port".
func (r *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// URL returns a redis:// URL for the server (rediss:// with TLS).
func (r *RedisServer) URL() string {
	if r.cfg.tls != nil {
		return "rediss://" + r.Addr()
	}
	return "redis://" + r.Addr()
}

func (r *RedisServer) args() ([]string, error) {
	if r.cfg.sentinel != "" {
		// A sentinel rewrites its configuration file: it lives in Dir, and
		// a restart keeps what the sentinel learnt.
		conf := filepath.Join(r.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(conf, []byte(r.cfg.sentinel), 0o600); err != nil {
				return nil, err
			}
		}
		a := []string{conf, "--sentinel", "--bind", "127.0.0.1", "--dir", r.Dir, "--logfile", "", "--daemonize", "no"}
		if r.cfg.tls != nil {
			return append(a, r.cfg.tls.tlsArgs(r.Port)...), nil
		}
		return append(a, "--port", strconv.Itoa(r.Port)), nil
	}
	a := []string{
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--logfile", "",
		"--daemonize", "no",
		"--save", "",
	}
	if r.cfg.tls != nil {
		a = append(a, r.cfg.tls.tlsArgs(r.Port)...)
	} else {
		a = append(a, "--port", strconv.Itoa(r.Port))
	}
	if r.cfg.appendOnly {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	return append(a, r.cfg.args...), nil
}

// launch starts redis-server and returns it once it accepts connections
// (a sentinel: once it monitors the primary). With AppendOnly it loads its
// data first.
func (r *RedisServer) launch() (*proc, error) {
	args, err := r.args()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.bin, args...)
	cmd.Dir = r.Dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	setPdeathsig(cmd)
	readyLine := "Ready to accept connections"
	if r.cfg.sentinel != "" {
		readyLine = "+monitor master"
	}
	p, ready, err := startProc(cmd, out, readyLine)
	if err != nil {
		return nil, err
	}
	return p, p.awaitReady("redis-server", ready, redisStartTimeout)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
