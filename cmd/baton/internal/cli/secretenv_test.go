package cli_test

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The store's passwords can come from the environment instead of the
// command line, which every user of the machine may read: baton's own
// command line (ps) then shows none, CMD's environment does not get them,
// and $BATON_REDIS_URL without --backend is refused as --redis-url is,
// since the file backend would lock on this machine only.
func TestPasswordsFromEnvironment(t *testing.T) {
	t.Parallel()
	redis := testenv.StartRedis(t, testenv.RedisArgs("--requirepass", "redis-secret"))
	etcd := testenv.StartEtcd(t)
	enableEtcdUser(t, etcd.Endpoint(), "locker", "etcd-secret")
	env := []string{cli.EnvRedisURL + "=redis://:redis-secret@" + redis.Addr(), cli.EnvEtcdPassword + "=etcd-secret"}
	// Both variables are set: each backend reads its own.
	show := `echo "env:[$` + cli.EnvRedisURL + `][$` + cli.EnvEtcdPassword + `]"; tr '\0' ' ' < /proc/$PPID/cmdline`
	for _, args := range [][]string{
		{"--backend", "redis"},
		{"--backend", "etcd", "--endpoints", etcd.Endpoint(), "--user", "locker"},
	} {
		p := startCLI(t, "lock", env, append(append([]string{"lock"}, args...), "--name", "env", "--", "sh", "-c", show)...)
		code := p.wait(30 * time.Second)
		out := p.stdout.String()
		if code != 0 || !strings.Contains(out, "env:[][]") || strings.Contains(out, "secret") {
			t.Errorf("lock %s with the password in the environment: exit %d, want 0, CMD's environment and baton's command line without it:\n%s\n%s", args, code, out, p.stderr)
		}
	}
	p := startCLI(t, "lock", env, "lock", "--dir", t.TempDir(), "--name", "env", "--", "true")
	if code := p.wait(30 * time.Second); code != 2 || !strings.Contains(p.stderr.String(), "--backend redis") {
		t.Errorf("lock with $%s and no --backend: exit %d, want 2 naming --backend redis:\n%s", cli.EnvRedisURL, code, p.stderr)
	}
}

// enableEtcdUser adds user (password pw, read and write on baton's
// default prefix) to the etcd at endpoint and turns authentication on.
func enableEtcdUser(t *testing.T, endpoint, user, pw string) {
	t.Helper()
	ctx := t.Context()
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	prefix := "/baton/locks/"
	for _, op := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, user); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, user, pw); return err },
		func() error { _, err := root.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
}

// A bad $BATON_REDIS_URL is named as such, not as --redis-url, which the
// command line does not have: a user who set it in a Secret would look for
// a flag in vain.
func TestRedisURLFromEnvNamed(t *testing.T) {
	t.Parallel()
	for env, want := range map[string]string{
		"garbage":                   `$BATON_REDIS_URL "garbage": redisstore: invalid options`,
		"redis://a:1 redis://b:1":   `needs exactly one --redis-url, got 2 in $BATON_REDIS_URL`,
		"redis://a:1 redis://b:1 x": `$BATON_REDIS_URL "x": redisstore: invalid options`,
	} {
		backend := "redis"
		if strings.Count(env, " ") == 2 {
			backend = "redlock"
		}
		p := startCLI(t, "lock", []string{cli.EnvRedisURL + "=" + env}, "lock", "--backend", backend, "--name", "x", "--", "true")
		if code := p.wait(15 * time.Second); code != 2 || !strings.Contains(p.stderr.String(), want) {
			t.Errorf("$%s=%q: exit %d, want 2 with %q; stderr:\n%s", cli.EnvRedisURL, env, code, want, p.stderr)
		}
	}
}

// The password of the etcd user a leader runs as is changed (etcdctl user
// passwd) while it leads: etcd refuses its keepalives from then on. The
// leader stops CMD at its renew deadline, naming etcd's refusal, and
// exits 77 when its next campaign is refused too. Before, the loss said
// only that a renew had no answer, as if etcd were unreachable.
func TestEtcdPasswordChangedWhileLeading(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	enableEtcdUser(t, e.Endpoint(), "locker", "locker-pw")
	leader := startCLI(t, "leader", []string{cli.EnvEtcdPassword + "=locker-pw"}, append([]string{"run", "--backend", "etcd",
		"--endpoints", e.Endpoint(), "--user", "locker", "--name", "job", "--log-level", "debug"}, append(timing, "--", "sleep", "600")...)...)
	leader.stderr.waitFor(t, "started CMD", 15*time.Second)

	root, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, Username: "root", Password: "root-pw", DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.UserChangePassword(t.Context(), "locker", "new-pw"); err != nil {
		t.Fatal(err)
	}
	if code := leader.wait(30 * time.Second); code != cli.ExitNoPermission {
		t.Errorf("leader: exit %d after its password changed, want %d", code, cli.ExitNoPermission)
	}
	var lost string
	for line := range strings.Lines(leader.stderr.String()) {
		if strings.Contains(line, "lock lost; stopping CMD") {
			lost = line
		}
	}
	if !strings.Contains(lost, "authentication failed") || !strings.Contains(lost, "password") {
		t.Errorf("the leader's loss: %q; want etcd's refusal and the fix named:\n%s", lost, leader.stderr)
	}
}
