package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PgBouncerInstallHint is the command that installs PgBouncer on Debian and
// Ubuntu.
const PgBouncerInstallHint = "apt-get update && apt-get install -y pgbouncer"

// PoolModes are PgBouncer's pooling modes. A PgBouncer started by
// StartPgBouncer serves one database of each name, all of them the
// database "postgres" of its PostgreSQL, pooled in that mode.
var PoolModes = []string{"session", "transaction", "statement"}

// PgBouncerOption configures StartPgBouncer.
type PgBouncerOption func(*PgBouncer)

// PgBouncerSetting sets a setting of the [pgbouncer] section, e.g.
// PgBouncerSetting("default_pool_size", "1"). It overrides the defaults
// StartPgBouncer writes.
func PgBouncerSetting(key, value string) PgBouncerOption {
	return func(b *PgBouncer) { b.settings[key] = value }
}

// PgBouncer is a PgBouncer process in front of a Postgres, on a free
// loopback port, with trust authentication and the PostgreSQL superuser as
// its admin user (the console is the database "pgbouncer"). Stop is a
// safe shutdown (SIGINT in PgBouncer 1.18: it waits for the server
// connections to be released), killed after pgbouncerStopTimeout; Kill is
// a crash. It is stopped in t.Cleanup.
type PgBouncer struct {
	server
	// Port is the TCP port on 127.0.0.1.
	Port     int
	dir      string
	pg       *Postgres
	settings map[string]string
}

const (
	pgbouncerStartTimeout = 15 * time.Second
	pgbouncerStopTimeout  = 10 * time.Second
)

// StartPgBouncer starts a PgBouncer in front of pg and returns once it
// accepts connections. If PgBouncer is missing or does not start, the
// test fails when CI=true and is skipped otherwise. Like postgres, it runs
// as pg's unprivileged user when the tests run as root.
func StartPgBouncer(t testing.TB, pg *Postgres, opts ...PgBouncerOption) *PgBouncer {
	t.Helper()
	bin, err := findPgBouncer()
	if err != nil {
		unavailable(t, "%v", err)
	}
	b := &PgBouncer{pg: pg, settings: map[string]string{
		"listen_addr": "127.0.0.1", "unix_socket_dir": "", "auth_type": "trust",
		"admin_users": PostgresUser, "default_pool_size": "5", "max_client_conn": "100",
	}}
	b.server = server{t: t, kind: "pgbouncer", addr: b.Addr, launch: func() (*proc, error) { return b.launch(bin) },
		stopSig: syscall.SIGINT, stopTimeout: pgbouncerStopTimeout}
	for _, o := range opts {
		o(b)
	}
	if b.dir, err = pg.ownDir("pgbouncer"); err != nil {
		unavailable(t, "prepare a directory for pgbouncer: %v", err)
	}
	t.Cleanup(b.Stop)
	err = startOnFreePorts(1, func(ports []int) error {
		b.Port = ports[0]
		if err := b.writeConfig(); err != nil {
			return err
		}
		return b.start()
	})
	if err != nil {
		unavailable(t, "cannot start %s: %v (install it with: %s)", bin, err, PgBouncerInstallHint)
	}
	return b
}

// findPgBouncer returns the pgbouncer binary: on PATH, or in /usr/sbin
// where Debian puts it (off a non-root user's PATH).
func findPgBouncer() (string, error) {
	if p, ok := findBinary("", "pgbouncer", "/usr/sbin"); ok {
		return p, nil
	}
	return "", fmt.Errorf("pgbouncer not found on PATH or in /usr/sbin; install it with: %s", PgBouncerInstallHint)
}

// writeConfig writes pgbouncer.ini and its auth file into b.dir.
func (b *PgBouncer) writeConfig() error {
	var ini strings.Builder
	ini.WriteString("[databases]\n")
	for _, mode := range PoolModes {
		fmt.Fprintf(&ini, "%s = host=127.0.0.1 port=%d dbname=postgres pool_mode=%s\n", mode, b.pg.Port, mode)
	}
	ini.WriteString("\n[pgbouncer]\n")
	settings := map[string]string{"listen_port": strconv.Itoa(b.Port), "auth_file": filepath.Join(b.dir, "userlist.txt")}
	for k, v := range b.settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	users := fmt.Sprintf("%q \"\"\n", PostgresUser)
	if err := b.pg.writeOwned(filepath.Join(b.dir, "userlist.txt"), users); err != nil {
		return err
	}
	return b.pg.writeOwned(b.configPath(), ini.String())
}

func (b *PgBouncer) configPath() string { return filepath.Join(b.dir, "pgbouncer.ini") }

// launch starts pgbouncer in the foreground, logging to stderr, and
// returns it once it accepts TCP connections.
func (b *PgBouncer) launch(bin string) (*proc, error) {
	cmd := b.pg.command("pgbouncer", b.configPath())
	cmd.Path, cmd.Args[0] = bin, bin // not in PostgreSQL's directory
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	pr, ready, err := startProc(cmd, out, "process up")
	if err != nil {
		return nil, err
	}
	if err := pr.awaitReady("pgbouncer", ready, pgbouncerStartTimeout); err != nil {
		return pr, err
	}
	c, err := net.DialTimeout("tcp", b.Addr(), pgbouncerStartTimeout)
	if err != nil {
		pr.kill()
		return pr, fmt.Errorf("pgbouncer said it was up but %s does not accept connections: %v", b.Addr(), err)
	}
	_ = c.Close()
	return pr, nil
}

// Addr returns "127.0.0.1:port".
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)) }

// DSN returns a URL that connects, as PostgreSQL's superuser, to the
// database pooled in mode (one of PoolModes), with params (e.g.
// "default_query_exec_mode=exec") added to its query.
func (b *PgBouncer) DSN(mode string, params ...string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(PostgresUser),
		Host:     b.Addr(),
		Path:     "/" + mode,
		RawQuery: strings.Join(append([]string{"sslmode=disable"}, params...), "&"),
	}
	return u.String()
}

// Admin runs command (PAUSE, RESUME, RECONNECT, KILL, SHOW ...) on the
// admin console with PostgreSQL's psql, and fails the test if it fails.
// (Through psql, not a Go driver: every module whose tests use testenv
// would have to require the driver.)
func (b *PgBouncer) Admin(ctx context.Context, command string) {
	b.t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(b.pg.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-d", b.DSN("pgbouncer"), "-c", command)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGCONNECT_TIMEOUT=10")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.t.Fatalf("testenv: pgbouncer %s on %s's admin console: %v: %s", command, b.Addr(), err, strings.TrimSpace(string(out)))
	}
}

// ownDir makes the directory name in p.Dir, owned by the server's user.
func (p *Postgres) ownDir(name string) (string, error) {
	d := filepath.Join(p.Dir, name)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	return d, p.chown(d)
}

// writeOwned writes a file that only the server's user can read.
func (p *Postgres) writeOwned(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return p.chown(path)
}

func (p *Postgres) chown(path string) error {
	if p.runAs == nil {
		return nil
	}
	return os.Chown(path, int(p.runAs.uid), int(p.runAs.gid))
}
