package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/baton-go/baton/etcdstore"
)

// etcdFlags are etcdctl's connection flags, for the etcd backend.
type etcdFlags struct {
	endpoints string
	cacert    string
	cert      string
	key       string
	user      string
	password  string
	fair      bool

	log *slog.Logger // receives the etcd client's and Store's logs, if set
	// dialTimeout bounds each connection attempt (0: etcdstore's default),
	// so that --connect-timeout and --wait shorter than it are kept.
	dialTimeout time.Duration
}

func (f *etcdFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoints, "endpoints", "", "etcd backend: comma-separated member URLs, such as https://10.0.0.1:2379, https://[fd00::1]:2379 or unix:///run/etcd.sock")
	// The TLS files serve the Redis backends too (storeFlags.redisTLS).
	fs.StringVar(&f.cacert, "cacert", "", "etcd, and redis or redlock with TLS URLs (rediss://, rediss+sentinel://, rediss+cluster://): PEM file of the CAs that sign the servers' certificates (default: the system's)")
	fs.StringVar(&f.cert, "cert", "", "etcd, and redis or redlock with TLS URLs (rediss://, rediss+sentinel://, rediss+cluster://): PEM client certificate, for mutual TLS (with --key)")
	fs.StringVar(&f.key, "key", "", "etcd, and redis or redlock with TLS URLs (rediss://, rediss+sentinel://, rediss+cluster://): PEM client key, for mutual TLS (with --cert)")
	fs.StringVar(&f.user, "user", "", "etcd backend: USER or USER:PASSWORD for etcd authentication")
	fs.StringVar(&f.password, "password", "", "etcd backend: the password, if --user has none (default $BATON_ETCD_PASSWORD, which ps does not show)")
	fs.BoolVar(&f.fair, "fair", true, "etcd backend: waiters acquire in the order they started waiting (--fair=false: plain mode; every client of a lock must use the same mode)")
}

func (f *etcdFlags) config() etcdstore.Config {
	user, password := f.user, f.password
	if u, p, ok := strings.Cut(user, ":"); ok && password == "" {
		user, password = u, p
	}
	var logger *zap.Logger
	if f.log != nil {
		logger = zapLogger(f.log)
	}
	return etcdstore.Config{
		Logger:    logger,
		Endpoints: etcdstore.ParseEndpoints(f.endpoints),
		CAFile:    f.cacert, CertFile: f.cert, KeyFile: f.key,
		Username: user, Password: password,
		DialTimeout: f.dialTimeout,
	}
}

func (f *etcdFlags) validate() error {
	if len(etcdstore.ParseEndpoints(f.endpoints)) == 0 {
		return usageErrorf("--backend etcd needs --endpoints, such as --endpoints https://10.0.0.1:2379")
	}
	if (f.cert == "") != (f.key == "") {
		return usageErrorf("--cert and --key go together (mutual TLS), got cert %q and key %q", f.cert, f.key)
	}
	return nil
}

// open opens the store for application app (see --app).
func (f *etcdFlags) open(app string) (store, string, error) {
	opts := []etcdstore.Option{etcdstore.WithFair(f.fair), etcdstore.WithPrefix(etcdAppPrefix(app))}
	if f.log != nil {
		opts = append(opts, etcdstore.WithLogger(f.log)) // --log-format and --log-level apply
	}
	s, err := etcdstore.OpenStore(context.Background(), f.config(), opts...)
	if err != nil {
		return nil, "", err
	}
	return s, fmt.Sprintf("etcd at %s", f.endpoints) + appWhere(app, etcdAppPrefix(app)), nil
}
