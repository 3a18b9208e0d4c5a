package cli_test

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Every invalid command line exits 2 with a message that names the bad
// value, before any store is touched.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/never-created"
	tests := []struct {
		args []string
		want string // substring of stderr
	}{
		{[]string{"run", "--name", "x", "--ttl", "abc", "--", "true"},
			`invalid argument "abc" for "--ttl" flag: time: invalid duration "abc"`},
		{[]string{"run", "--name", "x", "--retry-period", "2", "--", "true"},
			`invalid argument "2" for "--retry-period" flag`},
		{[]string{"run", "--name", "x", "--ttl", "10s", "--renew-deadline", "12s", "--", "true"},
			`lock "x": invalid options: renew deadline 12s must be shorter than TTL 10s`},
		{[]string{"run", "--name", "x", "--ttl", "10s", "--renew-deadline", "10s", "--", "true"},
			`renew deadline 10s must be shorter than TTL 10s`},
		{[]string{"lock", "--name", "x", "--ttl", "500ms", "--", "true"},
			`TTL 500ms is shorter than the minimum 1s`},
		{[]string{"run", "--name", "x", "--retry-period", "10s", "--", "true"},
			`retry period 10s must be shorter than renew deadline 10s`},
		{[]string{"run", "--name", "x", "--renew-deadline", "0s", "--", "true"},
			`renew deadline 0s must be positive`},
		{[]string{"run", "--name", "x", "--identity", "a b", "--", "true"},
			`identity "a b" contains the character ' '`},
		{[]string{"run", "--", "true"},
			`--name is required`},
		{[]string{"run", "--name", "", "--", "true"},
			`--name is required`},
		{[]string{"lock", "--name", "Nightly_Report", "--", "true"},
			`--name: invalid lock name: "Nightly_Report" has the character 'N' at byte 0`},
		{[]string{"run", "--name", "-x", "--", "true"},
			`"-x" must start and end with a lower-case letter or digit`},
		{[]string{"run", "--name", "x"},
			`missing CMD: give the command to run after "--", as in: baton run --name NAME -- CMD [ARGS...]`},
		{[]string{"lock", "--name", "x", "--"},
			`missing CMD: give the command to run after "--", as in: baton lock --name NAME -- CMD [ARGS...]`},
		{[]string{"run", "--name", "x", "--backend", "nope", "--", "true"},
			`unknown backend "nope" (available: file, lease, configmap, crd, etcd, redis, redlock)`},
		{[]string{"run", "--name", "x", "--backend", "etcd", "--", "true"},
			`--backend etcd needs --endpoints`},
		{[]string{"status", "--backend", "etcd", "--endpoints", "127.0.0.1:2379", "--cert", "c.pem"},
			`--cert and --key go together (mutual TLS), got cert "c.pem" and key ""`},
		{[]string{"status", "--backend", "x"},
			`unknown backend "x" (available: file, lease, configmap, crd, etcd, redis, redlock)`},
		{[]string{"run", "--name", "x", "--backend", "lease", "--app", "-bad-", "--", "true"},
			`--app "-bad-" is not a valid application name`},
		{[]string{"status", "--backend", "configmap", "-n", "Team_A"},
			`--namespace "Team_A" is not a valid namespace name`},
		{[]string{"status", "--backend", "redis"},
			`--backend redis needs exactly one --redis-url, got 0`},
		{[]string{"run", "--name", "x", "--backend", "redlock", "--redis-url", "redis://a:1", "--redis-url", "redis://b:1", "--", "true"},
			`--backend redlock needs an odd number of --redis-url, at least 3 (independent servers), got 2`},
		// A flag that the backend in use would ignore: without --backend,
		// --redis-url would lock on this machine only.
		{[]string{"lock", "--name", "x", "--redis-url", "redis://127.0.0.1:1", "--", "true"},
			`--redis-url is read only by the redis and redlock backends, and no --backend was given, so the backend is file (this machine only): add --backend redis (or redlock), or drop --redis-url`},
		{[]string{"doctor", "--endpoints", "http://127.0.0.1:1"},
			`--endpoints is read only by the etcd backend, and no --backend was given`},
		{[]string{"release", "x", "--force", "-n", "jobs"},
			`--namespace is read only by the lease, configmap and crd backends, and no --backend was given, so the backend is file (this machine only): add --backend lease (or configmap, crd), or drop --namespace`},
		{[]string{"status", "--backend", "etcd", "--endpoints", "127.0.0.1:1", "--dir", dir},
			`--dir is read only by the file backend, and --backend is etcd: drop --dir, or use --backend file`},
		// (With --leader-label, run reads the Kubernetes flags whatever
		// the backend: a usage error then comes from elsewhere.)
		{[]string{"run", "--name", "x", "--backend", "redis", "--redis-url", "redis://a:1", "--leader-label", "role=leader", "-n", "jobs", "--retry-period", "1h", "--", "true"},
			`retry period 1h0m0s must be shorter than renew deadline`},
		// --app is no Kubernetes connection flag: the file backend ignores
		// it even with --leader-label.
		{[]string{"run", "--name", "x", "--leader-label", "role=leader", "--app", "reports", "--", "true"},
			`--app is read only by the lease, configmap, crd, etcd, redis and redlock backends, and no --backend was given`},
		// --adopt takes over client-go's Leases: no other kind, even with
		// --leader-label.
		{[]string{"run", "--name", "x", "--backend", "configmap", "--leader-label", "role=leader", "--adopt", "--", "true"},
			`--adopt is read only by the lease backend, and --backend is configmap: drop --adopt, or use --backend lease`},
		{[]string{"run", "--name", "x", "--backend", "redis", "--redis-url", "redis://a:1", "--fair=false", "--", "true"},
			`--fair is read only by the etcd backend, and --backend is redis: drop --fair, or use --backend etcd`},
		// A relative --dir names another directory in each working
		// directory: two processes would not share the lock.
		{[]string{"lock", "--name", "x", "--dir", "locks", "--", "true"},
			`--dir "locks" is a relative path: processes share a lock only if they use the same directory`},
		{[]string{"run", "--name", "x", "--http", "8080", "--", "true"},
			`--http "8080": want HOST:PORT or :PORT`},
		{[]string{"run", "--name", "x", "--http", ":99999", "--", "true"},
			`--http ":99999": the port "99999" is not a number from 0 to 65535`},
		{[]string{"status", "-o", "xml"},
			`invalid --output "xml" (want wide, json or yaml; default: a table)`},
		{[]string{"status", "a", "b"},
			`status takes at most one lock NAME, got 2 arguments: ["a" "b"]`},
		{[]string{"status", "No"},
			`NAME: invalid lock name: "No" has the character 'N' at byte 0`},
		{[]string{"lock", "--name", "x", "--wait", "-1s", "--", "true"},
			`invalid argument "-1s" for "--wait" flag: must not be negative (0 tries once)`},
		{[]string{"lock", "--name", "x", "--wait", "soon", "--", "true"},
			`invalid argument "soon" for "--wait" flag: want a duration such as 30s, 0 to try once, or "forever"`},
		{[]string{"--log-level", "loud", "status"},
			`invalid --log-level "loud" (want debug, info, warn or error)`},
		{[]string{"run", "--name", "x", "--bogus", "--", "true"},
			`unknown flag: --bogus`},
		{[]string{"bogus"},
			`unknown command "bogus" for "baton"`},
		{[]string{"demo", "now"},
			`unknown command "now" for "baton demo"`},
		{[]string{"completion", "tcsh"},
			`no completion script for the shell "tcsh": baton completion writes one for bash, fish, powershell, zsh`},
	}
	for _, tt := range tests {
		args := tt.args
		if !slices.Contains([]string{"--log-level", "bogus", "demo", "completion"}, args[0]) && !selectsStore(args) {
			args = append([]string{args[0], "--dir", dir}, args[1:]...)
		}
		code, stdout, stderr := runCLI(t, args...)
		if code != 2 {
			t.Errorf("baton %s: exit code %d, want 2; stderr: %s", strings.Join(args, " "), code, stderr)
			continue
		}
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("baton %s: stderr\n%s\nwant it to contain\n%s", strings.Join(args, " "), stderr, tt.want)
		}
		if !strings.HasPrefix(stderr, "baton: ") || !strings.Contains(stderr, "--help' for usage.") {
			t.Errorf("baton %s: stderr %q: want \"baton: \" prefix and a usage hint", strings.Join(args, " "), stderr)
		}
		if stdout != "" {
			t.Errorf("baton %s: stdout %q, want nothing", strings.Join(args, " "), stdout)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a rejected command line touched the store: %s exists (%v)", dir, err)
	}
}

// selectsStore reports whether args choose a backend other than file,
// which refuses --dir.
func selectsStore(args []string) bool {
	i := slices.Index(args, "--backend")
	return i >= 0 && i+1 < len(args) && slices.Contains([]string{"lease", "configmap", "crd", "etcd", "redis", "redlock"}, args[i+1])
}

func TestHelpDocumentsExitCodesAndDefaults(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"--help"}, {"run", "--help"}, {"lock", "--help"}} {
		code, out, _ := runCLI(t, cmd...)
		if code != 0 {
			t.Fatalf("baton %v: exit code %d", cmd, code)
		}
		for _, want := range []string{"Exit codes:", "75 ", "128+N"} {
			if !strings.Contains(out, want) {
				t.Errorf("baton %v: help lacks %q", cmd, want)
			}
		}
	}
	_, out, _ := runCLI(t, "run", "--help")
	for _, want := range []string{
		"exits with CMD's exit code",
		"SIGKILL",
		"BATON_TOKEN",
		"$BATON_DIR",
		"(default 15s)", "(default 2/3 of --ttl: 10s)", "(default 2/15 of --ttl: 2s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	_, out, _ = runCLI(t, "lock", "--help")
	if !strings.Contains(out, "(default forever)") || !strings.Contains(out, "exits with code 75") {
		t.Errorf("lock --help does not document --wait's default and exit code 75:\n%s", out)
	}
}

// Timings not given scale with --ttl, so --ttl alone is always valid.
func TestTTLAloneScalesTheOtherTimings(t *testing.T) {
	t.Parallel()
	for _, ttl := range []string{"1s", "60s", "24h"} {
		code, _, stderr := runCLI(t, "lock", "--dir", t.TempDir(), "--name", "x", "--ttl", ttl, "--", "true")
		if code != 0 {
			t.Errorf("baton lock --ttl %s: exit code %d, want 0; stderr: %s", ttl, code, stderr)
		}
	}
}

// Shell completion offers the backends and output formats.
func TestCompletionValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "lock", "--backend", ""}, "file\nlease\nconfigmap\ncrd\netcd\nredis\nredlock\n:4\n"},
		{[]string{"__complete", "status", "-o", ""}, "wide\njson\nyaml\n:4\n"},
		{[]string{"__complete", "run", "--log-format", ""}, "text\njson\n:4\n"},
	} {
		code, out, stderr := runCLI(t, tc.args...)
		if code != 0 || out != tc.want {
			t.Errorf("%v: exit %d, stdout %q (want %q), stderr %q", tc.args, code, out, tc.want, stderr)
		}
	}
}
