package cli

import (
	"os"
	"slices"
	"strings"
)

// Environment variables that give the store's passwords without putting
// them on the command line, which every user of the machine may read (ps,
// /proc/PID/cmdline), as redis-cli's REDISCLI_AUTH and etcdctl's
// ETCDCTL_PASSWORD do.
const (
	// EnvRedisURL gives --redis-url when the flag is not given: one URL,
	// or several separated by white space (redlock).
	EnvRedisURL = "BATON_REDIS_URL"
	// EnvEtcdPassword gives the password of --user when neither --user
	// nor --password gives it.
	EnvEtcdPassword = "BATON_ETCD_PASSWORD"
)

// secretsFromEnv fills --redis-url from $BATON_REDIS_URL and the etcd
// password from $BATON_ETCD_PASSWORD where the command line gives none.
// $BATON_REDIS_URL without --backend is a usage error, as --redis-url is
// (see checkForeignFlags): the default backend, file, would lock on this
// machine only. Beside another --backend it is not read.
func (f *storeFlags) secretsFromEnv() error {
	if v := strings.Fields(os.Getenv(EnvRedisURL)); len(v) > 0 && len(f.redisURLs) == 0 {
		switch {
		case f.backend == "redis" || f.backend == "redlock":
			f.redisURLs, f.redisFromEnv = v, true
		case f.fs != nil && !f.fs.Changed("backend"):
			return usageErrorf("$%s is set, but no --backend was given, so the backend is file (this machine only): add --backend redis (or redlock), or unset $%s",
				EnvRedisURL, EnvRedisURL)
		}
	}
	e := &f.etcd
	if v := os.Getenv(EnvEtcdPassword); v != "" && e.user != "" && e.password == "" && !strings.Contains(e.user, ":") {
		e.password = v
	}
	return nil
}

// withoutSecrets returns env without the variables above: CMD needs none
// of baton's store passwords.
func withoutSecrets(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == EnvRedisURL || k == EnvEtcdPassword
	})
}
