package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/internal/tlsfiles"
	"github.com/baton-go/baton/redisstore"
)

// Backends the CLI can open. Others (etcd, redis) join as they land.
var backends = []string{"file", "lease", "configmap", "crd", "etcd", "redis", "redlock"}

// EnvDir names the environment variable that overrides the default --dir.
const EnvDir = "BATON_DIR"

const dirHelp = "directory of the file backend's lock records, an absolute path (default: $BATON_DIR, else /var/lib/baton for root, ~/.local/state/baton for others)"

// dirDoc explains the default --dir in command help.
const dirDoc = `The file backend keeps one record per lock in --dir. Processes share a lock
only if they use the same directory. Default: $BATON_DIR if set; else
/var/lib/baton for root, and $XDG_STATE_HOME/baton (~/.local/state/baton) for
other users: directories that survive reboots, so that fencing tokens keep
increasing across them; else <temp dir>/baton-<uid> if there is no home,
which must then be this user's own and private (one that another user made
first, or may write, is refused with exit 78).`

// DefaultDir returns the default --dir: $BATON_DIR if set; otherwise a
// directory that survives reboots, so that fencing tokens keep increasing
// across them: /var/lib/baton for root, $XDG_STATE_HOME/baton (or
// ~/.local/state/baton) for other users; and os.TempDir()/baton-<uid> only
// if no home directory is known (checked with checkOwnDir when the store
// is opened).
func DefaultDir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	uid := os.Getuid()
	if uid == 0 {
		return "/var/lib/baton"
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "baton")
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) && isDir(home) {
		return filepath.Join(home, ".local", "state", "baton")
	}
	return tempDefaultDir()
}

// tempDefaultDir is DefaultDir's last resort, in the temporary directory
// that every user may write.
func tempDefaultDir() string {
	return filepath.Join(os.TempDir(), "baton-"+strconv.Itoa(os.Getuid()))
}

// isDir reports whether path is an existing directory: a home such as
// /nonexistent (the home of system users) is none.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// storeFlags select a backend.
type storeFlags struct {
	backend   string
	dir       string
	app       string
	kube      kubeFlags
	etcd      etcdFlags
	redisURLs []string
	// redisFromEnv: redisURLs came from $BATON_REDIS_URL, which messages
	// then name instead of --redis-url.
	redisFromEnv bool
	// readOnly opens the file backend for reading only (status).
	readOnly bool
	// inTemp is set when dir is tempDefaultDir, which another user may
	// have made first (see checkOwnDir).
	inTemp bool
	// log receives a Redlock's warnings (a server failing renewals), if
	// set.
	log *slog.Logger
	fs  *pflag.FlagSet // to tell flags given from defaults; nil in tests that fill the fields
}

func (f *storeFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.backend, "backend", "file", "coordination store: file (one machine); lease, configmap or crd (Kubernetes; crd is the DistributedLock resource); etcd; redis or redlock")
	fs.StringVar(&f.dir, "dir", "", dirHelp)
	fs.StringVar(&f.app, "app", "", appHelp)
	f.kube.register(fs)
	f.etcd.register(fs)
	fs.StringArrayVar(&f.redisURLs, "redis-url", nil, "redis and redlock backends: redis[s]://[user:password@]host:port[/db] (an IPv6 address in brackets: [fd00::1]:6379; a socket: unix:///PATH/redis.sock[?db=N]), or redis+sentinel://S1:26379,.../PRIMARY[?sentinel_password=P] (a Sentinel-managed primary) or redis+cluster://N1:7000,N2:7000,... (a Redis Cluster); give it once for redis, three or more times (an odd number of independent servers) for redlock; default $BATON_REDIS_URL (URLs separated by spaces), which ps does not show")
}

func (f *storeFlags) validate() error {
	if !slices.Contains(backends, f.backend) {
		return usageErrorf("unknown backend %q (available: %s)", f.backend, strings.Join(backends, ", "))
	}
	if err := f.checkForeignFlags(); err != nil {
		return err
	}
	if err := f.secretsFromEnv(); err != nil {
		return err
	}
	if err := checkApp(f.app); err != nil {
		return err
	}
	switch f.backend {
	case "file":
		return f.checkDir()
	case "lease", "configmap", "crd":
		return f.kube.validate()
	case "etcd":
		return f.etcd.validate()
	case "redis":
		if len(f.redisURLs) != 1 {
			return usageErrorf("--backend redis needs exactly one --redis-url, got %d%s", len(f.redisURLs), f.redisEnvNote())
		}
		return f.checkRedisURLs()
	case "redlock":
		if n := len(f.redisURLs); n < 3 || n%2 == 0 {
			return usageErrorf("--backend redlock needs an odd number of --redis-url, at least 3 (independent servers), got %d%s", n, f.redisEnvNote())
		}
		return f.checkRedisURLs()
	}
	return nil
}

// redisURLSource names where the Redis URLs came from, for messages.
func (f *storeFlags) redisURLSource() string {
	if f.redisFromEnv {
		return "$" + EnvRedisURL
	}
	return "--redis-url"
}

// redisEnvNote says, after a count of URLs, that they came from
// $BATON_REDIS_URL; "" if they came from --redis-url.
func (f *storeFlags) redisEnvNote() string {
	if f.redisFromEnv {
		return " in $" + EnvRedisURL + " (URLs separated by white space)"
	}
	return ""
}

// checkRedisURLs reports the first --redis-url that does not parse, or
// that the TLS flags cannot serve.
func (f *storeFlags) checkRedisURLs() error {
	for _, u := range f.redisURLs {
		if err := redisstore.CheckURL(u); err != nil {
			return usageErrorf("%s %q: %w; write it as redis://host:port (rediss:// for TLS, unix:///PATH/redis.sock for a socket), redis+sentinel://S1:26379,.../PRIMARY or redis+cluster://N1:7000,N2:7000,...", f.redisURLSource(), redactURL(u), err)
		}
	}
	e := &f.etcd
	if e.cacert == "" && e.cert == "" && e.key == "" {
		return nil
	}
	if (e.cert == "") != (e.key == "") {
		return usageErrorf("--cert and --key go together (mutual TLS), got cert %q and key %q", e.cert, e.key)
	}
	for _, u := range f.redisURLs {
		if !strings.HasPrefix(u, "rediss://") && !strings.HasPrefix(u, "rediss+") {
			return usageErrorf("--cacert, --cert and --key configure TLS, and %s %q does not use it: write rediss://, rediss+sentinel:// or rediss+cluster://", f.redisURLSource(), redactURL(u))
		}
	}
	return nil
}

// redisOptions are the options of a Redis store for application app (see
// --app), with redisTLS.
func (f *storeFlags) redisOptions() []redisstore.Option {
	return []redisstore.Option{redisstore.WithPrefix(redisAppPrefix(f.app)), f.redisTLS()}
}

// redisTLS applies --cacert, --cert and --key to every TLS connection of
// a Redis client, to the servers and to the sentinels (see
// redisstore.WithTLSFiles: a CA bundle rotated on disk is trusted from
// the next connection on, a client certificate renewed on disk is
// presented at the next handshake); nil if none of them was given.
func (f *storeFlags) redisTLS() redisstore.Option {
	if e := &f.etcd; e.cacert != "" || e.cert != "" || e.key != "" {
		return redisstore.WithTLSFiles(e.cacert, e.cert, e.key)
	}
	return nil
}

// redisTLSFilesErr reports why --cacert, --cert or --key cannot be
// loaded (the store row says it too), or nil.
func (f *storeFlags) redisTLSFilesErr() error {
	e := &f.etcd
	_, err := tlsfiles.Apply(&tls.Config{}, e.cacert, e.cert, e.key)
	return err
}

// checkDir sets the file backend's directory to its default if --dir was
// not given, and refuses a relative one: processes share a lock only in
// the same directory, and a relative path names a different one for each
// working directory (two cron entries, two shells), so each would take
// the lock alone.
func (f *storeFlags) checkDir() error {
	from := "--dir"
	if f.dir == "" {
		f.dir, from = DefaultDir(), "$"+EnvDir
		f.inTemp = os.Getenv(EnvDir) == "" && f.dir == tempDefaultDir()
	}
	if filepath.IsAbs(f.dir) {
		return nil
	}
	abs, err := filepath.Abs(f.dir)
	if err != nil {
		abs = "/var/lib/baton"
	}
	return usageErrorf("%s %q is a relative path: processes share a lock only if they use the same directory, and a relative path names another one in each working directory; give an absolute path, such as %s",
		from, f.dir, abs)
}

// dirMissing reports whether the backend is the file backend and its lock
// directory does not exist: commands that only look or clean up say so
// rather than create it (opening the store would).
func (f *storeFlags) dirMissing() bool {
	if f.backend != "file" {
		return false
	}
	_, err := os.Stat(f.dir)
	return errors.Is(err, fs.ErrNotExist)
}

// checkForeignFlags refuses a flag given on the command line that the
// selected backend would ignore: --redis-url without --backend redis
// would otherwise lock on this machine only (the file backend, the
// default), where any other machine could take the same lock.
func (f *storeFlags) checkForeignFlags() error {
	if f.fs == nil {
		return nil
	}
	var err error
	f.fs.Visit(func(fl *pflag.Flag) {
		readers := backendsReading(fl.Name)
		if err != nil || readers == nil || slices.Contains(readers, f.backend) {
			return
		}
		if fl.Name != "app" && fl.Name != "adopt" && slices.Contains(readers, "lease") && f.fs.Changed("leader-label") {
			return // run's --leader-label reaches the API server whatever the backend
		}
		choice := readers[0]
		if len(readers) > 1 {
			choice += " (or " + strings.Join(readers[1:], ", ") + ")"
		}
		if f.fs.Changed("backend") {
			err = usageErrorf("--%s is read only by the %s, and --backend is %s: drop --%s, or use --backend %s",
				fl.Name, backendNames(readers), f.backend, fl.Name, choice)
			return
		}
		err = usageErrorf("--%s is read only by the %s, and no --backend was given, so the backend is file (this machine only): add --backend %s, or drop --%s",
			fl.Name, backendNames(readers), choice, fl.Name)
	})
	return err
}

// backendNames names backends in a sentence: "etcd backend", "redis and
// redlock backends".
func backendNames(names []string) string {
	if len(names) == 1 {
		return names[0] + " backend"
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " backends"
}

// backendsReading returns the backends that read flag name, or nil if
// every backend does (or it is not a store flag).
func backendsReading(name string) []string {
	switch name {
	case "dir":
		return []string{"file"}
	case "adopt":
		return []string{"lease"}
	case "kubeconfig", "context", "namespace":
		return []string{"lease", "configmap", "crd"}
	case "app":
		return []string{"lease", "configmap", "crd", "etcd", "redis", "redlock"}
	case "cacert", "cert", "key":
		return []string{"etcd", "redis", "redlock"}
	case "endpoints", "user", "password", "fair":
		return []string{"etcd"}
	case "redis-url":
		return []string{"redis", "redlock"}
	}
	return nil
}

// store is what the commands need from a backend.
type store interface {
	backend.Backend
}

// closeStore closes a store that holds connections (Redis clients).
func closeStore(st store) {
	if c, ok := st.(io.Closer); ok {
		_ = c.Close()
	}
}

// redactURL hides the passwords of a store URL for logs and messages.
func redactURL(raw string) string { return redisstore.RedactURL(raw) }

// open opens the selected backend. Call validate first.
func (f *storeFlags) open() (store, string, error) {
	switch f.backend {
	case "lease", "configmap", "crd":
		return f.kube.open(f.backend, f.app)
	case "etcd":
		return f.etcd.open(f.app)
	case "redis":
		s, err := redisstore.Open(f.redisURLs[0], f.redisOptions()...)
		if err != nil {
			return nil, "", fmt.Errorf("opening the redis store: %w", err)
		}
		return s, "redis " + redactURL(f.redisURLs[0]) + appWhere(f.app, redisAppPrefix(f.app)), nil
	case "redlock":
		opts := f.redisOptions()
		if f.log != nil {
			opts = append(opts, redisstore.WithLogger(f.log)) // --log-format and --log-level apply
		}
		r, err := redisstore.OpenRedlock(f.redisURLs, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("opening the redlock store: %w", err)
		}
		where := make([]string, len(f.redisURLs))
		for i, u := range f.redisURLs {
			where[i] = redactURL(u)
		}
		return r, "redlock over " + strings.Join(where, ", ") + appWhere(f.app, redisAppPrefix(f.app)), nil
	}
	var opts []filestore.Option
	if f.readOnly {
		opts = append(opts, filestore.ReadOnly())
	}
	s, err := filestore.New(f.dir, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("opening the file store: %w", err)
	}
	if f.inTemp {
		if err := checkOwnDir(s.Dir()); err != nil {
			return nil, "", fmt.Errorf("opening the file store: %w", err)
		}
	}
	return s, "file store " + s.Dir(), nil
}

const adoptHelp = "lease backend: take over the Lease of client-go's leader election that has the lock's name, so that replicas move from client-go to baton one at a time: " +
	"both judge a claim by the Lease staying unchanged for its duration and write it only on the version they read, so old and new replicas never lead at once; " +
	"without it such a Lease is refused (exit 77)"

// lockFlags are the flags of the commands that take a lock.
type lockFlags struct {
	storeFlags
	name          string
	identity      string
	ttl           time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	// connectTimeout bounds the retries of an unreachable store at
	// start-up (see openReachable).
	connectTimeout time.Duration
}

func (f *lockFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "lock name (required): lower-case letters, digits, '-' and '.', at most 253 characters")
	f.storeFlags.register(fs)
	fs.BoolVar(&f.kube.adopt, "adopt", false, adoptHelp)
	fs.StringVar(&f.identity, "identity", "", "holder identity shown to others (default: host name plus a random suffix)")
	fs.DurationVar(&f.ttl, "ttl", baton.DefaultTTL, "lease duration: how long a claim lasts after each renewal (1s to a year; at least 10 round trips to the store: baton doctor measures it)")
	fs.DurationVar(&f.renewDeadline, "renew-deadline", 0, "step down (and stop CMD) when renewals have failed for this long; shorter than --ttl (default 2/3 of --ttl: 10s)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", DefaultConnectTimeout, "at start-up, how long to keep trying a store that cannot be reached before exiting with code 69")
	fs.DurationVar(&f.retryPeriod, "retry-period", 0, "how often to retry acquiring or a failed renewal; shorter than --renew-deadline (default 2/15 of --ttl: 2s)")
}

// validate checks every flag without touching the store, so that a bad
// command line changes nothing. Timing rules are baton's own: its message
// names the values involved.
func (f *lockFlags) validate(log *slog.Logger) error {
	if f.name == "" {
		return usageErrorf("--name is required: the name of the lock, such as \"nightly-report\"")
	}
	if err := checkName("--name", f.name); err != nil {
		return err
	}
	if err := f.storeFlags.validate(); err != nil {
		return err
	}
	if f.connectTimeout <= 0 {
		return usageErrorf("--connect-timeout must be positive, got %v", f.connectTimeout)
	}
	if err := baton.CheckOptions(false, f.options(log)...); err != nil {
		return &exitError{code: ExitUsage, err: fmt.Errorf("lock %q: %w", f.name, err)}
	}
	return nil
}

func (f *lockFlags) options(log *slog.Logger) []baton.Option {
	opts := []baton.Option{baton.WithTTL(f.ttl), baton.WithLogger(log)}
	// Timings not given scale with --ttl (baton's defaults do).
	if f.fs == nil || f.fs.Changed("renew-deadline") {
		opts = append(opts, baton.WithRenewDeadline(f.renewDeadline))
	}
	if f.fs == nil || f.fs.Changed("retry-period") {
		opts = append(opts, baton.WithRetryPeriod(f.retryPeriod))
	}
	if f.identity != "" {
		opts = append(opts, baton.WithIdentity(f.identity))
	}
	return opts
}

// timings returns the renew deadline, retry period and renew interval
// that baton uses with these flags: the ones given, and baton's defaults,
// in proportion to --ttl, for the others.
func (f *lockFlags) timings() (deadline, retry, interval time.Duration) {
	deadline = f.ttl * 2 / 3
	if f.fs != nil && f.fs.Changed("renew-deadline") {
		deadline = f.renewDeadline
	}
	retry = min(f.ttl*2/15, deadline/5)
	if f.fs != nil && f.fs.Changed("retry-period") {
		retry = f.retryPeriod
	}
	return deadline, retry, min(f.ttl/3, deadline/2)
}

// killLead is how long before the validity end a command still running
// after a loss gets SIGKILL: the default safety margin, at least 100ms, so
// that it is dead before anyone else can acquire the lock.
func (f *lockFlags) killLead() time.Duration {
	return max(baton.DefaultSafetyMargin(f.ttl), 100*time.Millisecond)
}

// waitValue is the --wait flag: a non-negative duration, or "forever".
type waitValue struct {
	d       time.Duration
	forever bool
}

func (w *waitValue) String() string {
	if w.forever {
		return "forever"
	}
	return w.d.String()
}

func (w *waitValue) Set(s string) error {
	if s == "forever" || s == "inf" {
		w.forever, w.d = true, 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, 0 to try once, or \"forever\"")
	}
	if d < 0 {
		return fmt.Errorf("must not be negative (0 tries once)")
	}
	w.forever, w.d = false, d
	return nil
}

func (w *waitValue) Type() string { return "duration" }
