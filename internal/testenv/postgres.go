package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgresInstallHint is the command that installs PostgreSQL (initdb and
// postgres under /usr/lib/postgresql/<version>/bin) on Debian and Ubuntu, as
// CI does.
const PostgresInstallHint = "apt-get update && apt-get install -y postgresql"

// postgresStartTimeout bounds how long a fresh cluster may take to accept
// connections (tests run under -race on small machines).
const postgresStartTimeout = 30 * time.Second

// postgresStopTimeout bounds a fast shutdown; after it the postmaster is
// killed.
const postgresStopTimeout = 15 * time.Second

// PostgresOption configures StartPostgres.
type PostgresOption func(*Postgres)

// PostgresArgs adds command-line arguments to postgres, e.g. "-c",
// "track_commit_timestamp=on".
func PostgresArgs(args ...string) PostgresOption {
	return func(p *Postgres) { p.args = append(p.args, args...) }
}

// PostgresUser is the superuser of a cluster started by StartPostgres. It
// authenticates with trust on loopback and on the Unix socket: no password.
const PostgresUser = "postgres"

// Postgres is a PostgreSQL server (one postmaster and its cluster) on a free
// loopback port, with its data directory in t.TempDir(). Authentication is
// trust, for loopback TCP and for the Unix socket in Dir, and fsync is off:
// it is for tests only. It is stopped in t.Cleanup. Methods are safe for
// concurrent use.
type Postgres struct {
	server        // Start, Stop (SIGINT: fast shutdown), Kill, Restart, Log
	bin    string // directory holding initdb and postgres
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir is the server's own directory (owned by the server's user): it
	// holds the cluster in Dir/data and the Unix socket.
	Dir string

	runAs *pgUser // nil unless the tests run as root
	args  []string
}

type pgUser struct{ uid, gid uint32 }

// FindPostgres returns the directory that holds the PostgreSQL server
// binaries initdb and postgres: $BATON_POSTGRES_BIN if set, else the newest
// /usr/lib/postgresql/<version>/bin (where Debian's packages put them, off
// PATH), else the directory of initdb on PATH.
func FindPostgres() (string, error) {
	if d := os.Getenv("BATON_POSTGRES_BIN"); d != "" {
		if err := checkPostgresDir(d); err != nil {
			return "", fmt.Errorf("BATON_POSTGRES_BIN=%s: %w", d, err)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if checkPostgresDir(d) == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if checkPostgresDir(d) == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found in $BATON_POSTGRES_BIN, /usr/lib/postgresql/*/bin or on PATH; install them with: %s", PostgresInstallHint)
}

// pgVersion reads the major version from /usr/lib/postgresql/<version>/bin,
// or -1.
func pgVersion(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

func checkPostgresDir(d string) error {
	for _, name := range []string{"initdb", "postgres"} {
		p := filepath.Join(d, name)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", p)
		}
	}
	return nil
}

// StartPostgres initializes a new cluster in t.TempDir() and starts a
// postgres on a free loopback port, and returns once the server accepts
// connections. If the binaries are missing or the server does not start,
// the test fails when CI=true and is skipped otherwise.
//
// PostgreSQL refuses to run as root. When the test runs as root (as CI
// does), initdb and postgres run as the user "nobody" (or
// $BATON_POSTGRES_USER), the directory is chowned to that user, and the
// directory that the testing package made for t.TempDir() is made
// traversable (mode 0711) so that the user can reach it.
func StartPostgres(t testing.TB, opts ...PostgresOption) *Postgres {
	t.Helper()
	bin, err := FindPostgres()
	if err != nil {
		unavailable(t, "%v", err)
	}
	p := &Postgres{bin: bin, Dir: t.TempDir()}
	// Stop is a fast shutdown (SIGINT: open transactions roll back,
	// connections close), killed after postgresStopTimeout.
	p.server = server{t: t, kind: "postgres", addr: p.Addr, launch: p.launch, stopSig: syscall.SIGINT, stopTimeout: postgresStopTimeout}
	for _, o := range opts {
		o(p)
	}
	if err := p.prepareDir(); err != nil {
		unavailable(t, "prepare %s for postgres: %v", p.Dir, err)
	}
	if out, err := p.initdb(); err != nil {
		unavailable(t, "initdb (%s) failed: %v: %s (install it with: %s)", bin, err, lastLines(out, 12), PostgresInstallHint)
	}
	t.Cleanup(p.Stop)
	// A port picked free can be taken before postgres binds it.
	err = startOnFreePorts(1, func(ports []int) error {
		p.Port = ports[0]
		return p.start()
	})
	if err != nil {
		unavailable(t, "cannot start %s: %v (install it with: %s)", filepath.Join(bin, "postgres"), err, PostgresInstallHint)
	}
	return p
}

// prepareDir arranges for the server's user to own Dir when the tests run
// as root.
func (p *Postgres) prepareDir() error {
	if os.Geteuid() != 0 {
		return nil
	}
	name := os.Getenv("BATON_POSTGRES_USER")
	if name == "" {
		name = "nobody"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("running as root, and postgres refuses to: need an unprivileged user to run it as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("user %s: %w", name, err)
	}
	p.runAs = &pgUser{uid: uint32(uid), gid: uint32(gid)}
	if err := os.Chown(p.Dir, int(uid), int(gid)); err != nil {
		return err
	}
	// os.MkdirTemp made the per-test parent directory 0700 for root.
	if err := os.Chmod(filepath.Dir(p.Dir), 0o711); err != nil {
		return err
	}
	// Every other ancestor must already let others through.
	for d := filepath.Dir(filepath.Dir(p.Dir)); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("user %s cannot traverse %s (mode %v); set TMPDIR to a directory every user can reach, such as /tmp", name, d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// command returns a command for one of the server binaries, run as the
// server's user.
func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.Dir
	// English messages (the readiness line is matched) and a C locale that
	// every system has.
	env := []string{"LC_ALL=C", "LANG=C", "HOME=" + p.Dir, "TZ=UTC"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" || k == "TMPDIR" {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	setPdeathsig(cmd)
	if p.runAs != nil {
		setCredential(cmd, p.runAs.uid, p.runAs.gid)
	}
	return cmd
}

func (p *Postgres) dataDir() string { return filepath.Join(p.Dir, "data") }

func (p *Postgres) initdb() (string, error) {
	cmd := p.command("initdb",
		"-D", p.dataDir(),
		"-U", PostgresUser,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync",
		"--no-instructions",
	)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// DSN returns a URL that connects to the database "postgres" as the
// superuser over loopback TCP, without TLS:
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (p *Postgres) DSN() string { return p.DSNFor("postgres") }

// DSNFor is DSN for another database of the cluster.
func (p *Postgres) DSNFor(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(PostgresUser),
		Host:     p.Addr(),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr returns "127.0.0.1:port".
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// launch starts the postmaster and returns it once it accepts TCP
// connections.
func (p *Postgres) launch() (*proc, error) {
	args := append([]string{
		"-D", p.dataDir(),
		"-k", p.Dir,
		"-p", strconv.Itoa(p.Port),
		"-F", // fsync off: nothing here must survive a machine crash
		"-c", "listen_addresses=127.0.0.1",
		"-c", "logging_collector=off",
		"-c", "log_destination=stderr",
		"-c", "shared_buffers=16MB",
		"-c", "max_connections=100",
	}, p.args...)
	cmd := p.command("postgres", args...)
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = nil // postgres logs to stderr
	pr, ready, err := startProc(cmd, out, "ready to accept connections")
	if err != nil {
		return nil, err
	}
	if err := pr.awaitReady("postgres", ready, postgresStartTimeout); err != nil {
		return pr, err
	}
	// The log line comes once the postmaster accepts connections; check the
	// TCP listener as well, so that a caller never races it.
	deadline := time.Now().Add(postgresStartTimeout)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			pr.kill()
			return pr, fmt.Errorf("postgres said it was ready but %s does not accept connections: %v", p.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pr, nil
}
