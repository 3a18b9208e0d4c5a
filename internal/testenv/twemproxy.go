package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TwemproxyInstallHint is the command that installs twemproxy
// (nutcracker) on Debian and Ubuntu.
const TwemproxyInstallHint = "apt-get update && apt-get install -y nutcracker"

// twemproxyStartTimeout bounds how long nutcracker may take to listen.
const twemproxyStartTimeout = 10 * time.Second

// TwemproxyConfig is the pool a Twemproxy serves.
type TwemproxyConfig struct {
	// Servers are the Redis servers' "host:port" addresses behind the
	// proxy, in the pool's order.
	Servers []string
	// AutoEject sets auto_eject_hosts: a server that fails
	// server_failure_limit times in a row leaves the ring for
	// server_retry_timeout, and its keys go to the other servers.
	AutoEject bool
	// RedisAuth, if not empty, sets redis_auth: the proxy requires this
	// password from its clients (AUTH) and gives it to the servers.
	RedisAuth string
}

// Twemproxy is a nutcracker (twemproxy) process on a free loopback port,
// serving one Redis pool (hash fnv1a_64, distribution ketama). It is
// killed in t.Cleanup.
type Twemproxy struct {
	server // Start, Stop (SIGTERM), Kill, Restart, Log, Pause, Resume
	bin    string
	conf   string
	// Port is the proxy's TCP port on 127.0.0.1; it stays the same across
	// restarts. StatsPort is its stats port.
	Port, StatsPort int
}

// FindTwemproxy returns the path of nutcracker: $BATON_NUTCRACKER if set,
// else the first found on PATH, in /usr/sbin or in /usr/bin.
func FindTwemproxy() (string, error) {
	if p, ok := findBinary("BATON_NUTCRACKER", "nutcracker", "/usr/sbin", "/usr/bin"); ok {
		return p, nil
	}
	return "", fmt.Errorf("nutcracker not found on PATH, in /usr/sbin or in /usr/bin; install it with: %s", TwemproxyInstallHint)
}

// StartTwemproxy starts nutcracker in front of cfg.Servers and returns
// once it accepts connections. If nutcracker is missing or does not start,
// the test fails when CI=true and is skipped otherwise.
func StartTwemproxy(t testing.TB, cfg TwemproxyConfig) *Twemproxy {
	t.Helper()
	bin, err := FindTwemproxy()
	if err != nil {
		unavailable(t, "%v", err)
	}
	p := &Twemproxy{bin: bin, conf: filepath.Join(t.TempDir(), "nutcracker.yml")}
	p.server = server{t: t, kind: "nutcracker", addr: p.Addr, launch: p.launch, stopSig: syscall.SIGTERM}
	t.Cleanup(p.Kill)
	err = startOnFreePorts(2, func(ports []int) error {
		p.Port, p.StatsPort = ports[0], ports[1]
		if err := os.WriteFile(p.conf, []byte(twemproxyConf(p.Port, cfg)), 0o600); err != nil {
			return err
		}
		return p.start()
	})
	if err != nil {
		unavailable(t, "cannot start %s: %v (install it with: %s)", bin, err, TwemproxyInstallHint)
	}
	return p
}

// twemproxyConf is the configuration of one pool named baton.
func twemproxyConf(port int, cfg TwemproxyConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "baton:\n  listen: 127.0.0.1:%d\n  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n", port)
	fmt.Fprintf(&b, "  timeout: 2000\n  server_failure_limit: 1\n  server_retry_timeout: 2000\n  auto_eject_hosts: %t\n", cfg.AutoEject)
	if cfg.RedisAuth != "" {
		fmt.Fprintf(&b, "  redis_auth: %s\n", cfg.RedisAuth)
	}
	b.WriteString("  servers:\n")
	for _, s := range cfg.Servers {
		fmt.Fprintf(&b, "   - %s:1\n", s)
	}
	return b.String()
}

// Addr returns "127.0.0.1:port".
func (p *Twemproxy) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// URL returns a redis:// URL for the proxy.
func (p *Twemproxy) URL() string { return "redis://" + p.Addr() }

// launch starts nutcracker and returns it once it accepts connections
// (it says nothing when it starts listening).
func (p *Twemproxy) launch() (*proc, error) {
	cmd := exec.Command(p.bin, "-c", p.conf, "-s", strconv.Itoa(p.StatsPort), "-a", "127.0.0.1")
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	setPdeathsig(cmd)
	pr, _, err := startProc(cmd, out, "")
	if err != nil {
		return nil, err
	}
	return pr, awaitListening(pr, "nutcracker", p.Addr(), twemproxyStartTimeout)
}

// awaitListening waits until addr accepts connections. If pr exits first,
// or after timeout (pr is then killed), it returns an error that quotes the
// end of pr's log.
func awaitListening(pr *proc, name, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if pr.hasExited() {
			return fmt.Errorf("%s exited before it listened: %s", name, lastLines(pr.log.String(), 8))
		}
		if time.Now().After(deadline) {
			pr.kill()
			return fmt.Errorf("%s not listening on %s after %v: %w: %s", name, addr, timeout, err, lastLines(pr.log.String(), 8))
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s on %s: %w", name, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
