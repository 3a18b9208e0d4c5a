package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// openURL opens a Store on url with prefix, closed at the end of t.
func openURL(t testing.TB, url, prefix string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(url, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The conformance suite on a Sentinel-managed primary (one replica, three
// sentinels) reached through a redis+sentinel:// URL.
func TestConformanceSentinel(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			prefix := uniquePrefix()
			return func(t *testing.T) backend.Backend { return openURL(t, topo.URL(), prefix) }
		},
	})
}

// The conformance suite on a Redis Cluster of three primaries reached
// through a redis+cluster:// URL: each lock's keys share a hash slot.
func TestConformanceCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			prefix := uniquePrefix()
			return func(t *testing.T) backend.Backend { return openURL(t, c.URL(), prefix) }
		},
	})
}

// After the primary is killed and the sentinels promote the replica, the
// same Store (its client follows the sentinels) acquires again. Tokens
// are logged, not asserted: replication is asynchronous, so the replica
// may have missed the last writes (see "Topologies").
func TestSentinelFailover(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	s := openURL(t, topo.URL(), uniquePrefix())
	ctx := t.Context()
	g, err := s.TryAcquire(ctx, "job", request("a", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	old := topo.Primary()
	old.Kill()
	topo.AwaitFailover(t, old, 60*time.Second)
	var g2 backend.Grant
	deadline := time.Now().Add(30 * time.Second)
	for {
		g2, err = s.TryAcquire(ctx, "job", request("b", 2*time.Second))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the client reconnects to the new primary on its own schedule
	}
	if err != nil {
		t.Fatalf("TryAcquire after the failover: %v", err)
	}
	t.Logf("token %d before the failover, %d after", g.Token, g2.Token)
	if err := s.Release(ctx, g2); err != nil {
		t.Errorf("Release after the failover: %v", err)
	}
}

// An operator swaps the roles of a Sentinel-managed primary and its replica
// by hand (REPLICAOF NO ONE on the replica, REPLICAOF on the primary): the
// Store's connections still reach the old primary, now a read-only
// replica, until the sentinels fail over to the new one. That is a store
// unavailable for a while, not a misconfiguration: a waiting Lock goes on
// trying and takes the lock once the sentinels name the new primary. (It
// was ErrMisconfigured, which the engine does not retry: the waiter gave up
// at once, and `baton run` exited 78 telling the user to give a
// redis+sentinel:// URL, which it had.)
func TestSentinelPrimaryDemotedByHand(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	s := openURL(t, topo.URL(), uniquePrefix())
	ctx := testCtx(t, 90*time.Second)
	g, err := s.TryAcquire(ctx, "job", request("a", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	primary, replica := topo.Servers[0], topo.Servers[1]
	if err := newClient(t, replica.Addr()).Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := newClient(t, primary.Addr()).Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(replica.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, "job", request("b", 2*time.Second))
	if !errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "read-only replica") {
		t.Fatalf("TryAcquire on the demoted primary: %v; want ErrUnavailable (retried), naming the read-only replica", err)
	}
	mu, err := baton.NewMutex(s, "job", baton.WithTTL(2*time.Second), baton.WithIdentity("b"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock while the sentinels fail over to the new primary: %v; want the lock once they do", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	// Which server the sentinels end with is theirs to choose: they may
	// turn the server promoted by hand back into a replica (convert-to-
	// slave) and then fail over to either.
	got, err := topo.PrimaryAddr()
	t.Logf("the sentinels name %q (%v) as the primary; %s was promoted by hand", got, err, replica.Addr())
}

// Bad topology input gives an error naming the problem, and a replica
// given as the primary, or a sentinel given as a server, is refused as
// misconfigured, not retried.
func TestTopologyBadInput(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis+sentinel://127.0.0.1:26379", "names no primary"},
		{"redis+sentinel://127.0.0.1:26379/", "names no primary"},
		{"redis+cluster://127.0.0.1:7000", "gives one node"},
		{"redis+cluster://127.0.0.1", `address "127.0.0.1": want HOST:PORT`},
		{"redis+sentinel://127.0.0.1:26379/p?sentinel_pasword=pw", `unknown parameter "sentinel_pasword"`},
		{"redis+cluster://127.0.0.1:7000,127.0.0.1:7001?dial_timeout=1", "takes no parameters"},
	} {
		if _, err := redisstore.Open(tc.url); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v; want ErrInvalidOptions saying %q", tc.url, err, tc.want)
		}
	}
	topo := testenv.StartRedisSentinel(t)
	// Sentinels that monitor no primary by the URL's name answer with no
	// address: a misconfiguration naming the fix, not "unreachable".
	url := topo.URL()
	wrongName := openURL(t, url[:strings.LastIndex(url, "/")+1]+"no-such-primary", uniquePrefix())
	if _, err := wrongName.Get(context.Background(), "job"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "none monitors a primary by the name the URL gives") {
		t.Errorf("Get through sentinels with a wrong primary name: %v; want ErrMisconfigured naming the name", err)
	}
	replica := openURL(t, "redis://"+topo.Servers[1].Addr(), uniquePrefix())
	_, err := replica.TryAcquire(context.Background(), "job", request("a", time.Minute))
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "read-only replica") {
		t.Errorf("TryAcquire on a replica: %v; want ErrMisconfigured naming the replica", err)
	}
	// A sentinel given as a plain server knows no EVALSHA.
	sentinel := openURL(t, "redis://"+topo.SentinelAddrs()[0], uniquePrefix())
	if _, err := sentinel.Get(context.Background(), "job"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "redis+sentinel://S1:26379") {
		t.Errorf("Get on a sentinel's address as redis://: %v; want ErrMisconfigured naming redis+sentinel://", err)
	}
}

// A cluster URL to a server without cluster support, and a plain URL to a
// cluster node, are misconfigurations that name the URL form to use.
func TestTopologyMismatch(t *testing.T) {
	ctx := t.Context()
	single := testenv.StartRedis(t)
	s := openURL(t, "redis+cluster://"+single.Addr()+","+single.Addr(), uniquePrefix())
	if _, err := s.Get(ctx, "job"); !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "not a Redis Cluster node") {
		t.Errorf("a cluster URL to a single server: %v; want ErrMisconfigured naming redis://", err)
	}
	cluster := testenv.StartRedisCluster(t, 3)
	node := openURL(t, "redis://"+cluster.Nodes[0].Addr(), uniquePrefix())
	moved := 0
	for i := range 20 { // about two thirds of the names hash to the other two nodes
		_, err := node.Get(ctx, fmt.Sprintf("job%d", i))
		switch {
		case err == nil, errors.Is(err, backend.ErrNotFound):
		case errors.Is(err, backend.ErrMisconfigured) && strings.Contains(err.Error(), "redis+cluster://"):
			moved++
		default:
			t.Errorf("a plain URL to a cluster node, lock job%d: %v; want ErrMisconfigured naming redis+cluster://", i, err)
		}
	}
	if moved == 0 {
		t.Error("no name of 20 hashed to another node")
	}
}

// Passwords never show in messages: the userinfo's, and every query
// parameter's but sentinel_username (a misspelt sentinel_password too).
func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:pw@h:1/0": "redis://u:xxxxx@h:1/0",
		"redis+sentinel://:pw@h:1,h:2/p?sentinel_password=spw&sentinel_username=su": "redis+sentinel://:xxxxx@h:1,h:2/p?sentinel_password=xxxxx&sentinel_username=su",
		"redis+sentinel://h:1/p?sentinel_pasword=spw":                               "redis+sentinel://h:1/p?sentinel_pasword=xxxxx",
		"::": "(unparsable URL)",
	} {
		if got := redisstore.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// An invalid URL is refused without its passwords in the message: one
// that does not parse (url.Error quotes the whole URL, and its own words
// can quote a password that is not percent-encoded), and the topologies'
// own refusals, whose query may hold sentinel_password.
func TestInvalidURLHidesPasswords(t *testing.T) {
	for _, raw := range []string{
		"redis://u:pw-secret@h:port/0",
		"rediss://:pw-secret@[::1/0",
		"redis+sentinel://:pw-secret@h:bad/p?sentinel_password=spw-secret",
		"redis+sentinel://:pw-secret@h:1/?sentinel_password=spw-secret",
		"redis+sentinel://:pw-secret@h:1/p/x?sentinel_password=spw-secret",
		"redis+sentinel://:pw-secret@h:1,h2/p?sentinel_password=spw-secret",
		"redis+cluster://:pw-secret@h:1,h:bad",
		"redis+cluster://:pw-secret@h:1?sentinel_password=spw-secret",
		"redis+cluster://:pw-secret@h:1,h:2/0?sentinel_password=spw-secret",
		// A '#', '?' or '/' in a password, not percent-encoded, ends
		// the host early: the parser then quotes the password as a port.
		"redis://:secret#1@h:1/0",
		"redis://u:secret?1@h:1/0",
		"redis+sentinel://:secret/1@h:1/p",
		"redis://:2024/secret@h:1",
		"redis://:2024#secret@h:1",
		"redis+cluster://:1#secret@h:1,h:2",
		"redis://:2024?secret@h:1",
	} {
		err := redisstore.CheckURL(raw)
		if !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("CheckURL(%q): %v, want ErrInvalidOptions", raw, err)
		}
		_, openErr := redisstore.Open(raw)
		for _, e := range []error{err, openErr} {
			if e == nil || strings.Contains(e.Error(), "secret") {
				t.Errorf("%q: the error shows a password, or there is none: %v", raw, e)
			}
		}
	}
}

// Sentinels and cluster nodes written as IPv6 literals, in brackets, are
// reached: url.Parse refuses a host list of several bracketed addresses
// ("invalid IP-literal"), so such a URL could not be written at all, and
// without brackets it is refused as not HOST:PORT. Passwords are still
// hidden in messages, the addresses kept.
func TestTopologyIPv6(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	l.Close()
	for raw, want := range map[string]string{
		"redis+sentinel://:pw@[::1]:1,[fd00::2]:2/p?sentinel_password=spw": "redis+sentinel://:xxxxx@[::1]:1,[fd00::2]:2/p?sentinel_password=xxxxx",
		"rediss+cluster://u:pw@[::1]:1,[::1]:2":                            "rediss+cluster://u:xxxxx@[::1]:1,[::1]:2",
	} {
		if err := redisstore.CheckURL(raw); err != nil {
			t.Errorf("CheckURL(%q): %v", raw, err)
		}
		if got := redisstore.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
	c := testenv.StartRedisCluster(t, 3, testenv.RedisArgs("--bind", "127.0.0.1", "::1"))
	var nodes []string
	for _, n := range c.Nodes {
		nodes = append(nodes, net.JoinHostPort("::1", strconv.Itoa(n.Port)))
	}
	s := openURL(t, "redis+cluster://"+strings.Join(nodes, ","), uniquePrefix())
	for i := range 6 { // locks on every node's slots, most likely
		name := fmt.Sprintf("job%d", i)
		g, err := s.TryAcquire(t.Context(), name, request("a", time.Minute))
		if err != nil {
			t.Fatalf("TryAcquire %s through IPv6 seed addresses: %v", name, err)
		}
		if err := s.Release(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
}

// A port that is not a number from 1 to 65535 is an invalid URL, not a
// server that does not answer (which the CLI retried, then exited 69 with
// "invalid port" and "check that the server runs").
func TestURLPortOutOfRange(t *testing.T) {
	for _, raw := range []string{
		"redis://127.0.0.1:0",
		"rediss://u:pw@[::1]:70000/0",
		"redis+cluster://127.0.0.1:7000,127.0.0.1:0",
		"redis+sentinel://127.0.0.1:99999/p",
	} {
		if err := redisstore.CheckURL(raw); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "not a number from 1 to 65535") {
			t.Errorf("CheckURL(%q): %v; want ErrInvalidOptions naming the port", raw, err)
		}
		if _, err := redisstore.Open(raw); err == nil {
			t.Errorf("Open(%q) succeeded", raw)
		}
	}
}

// An '@' in a query parameter's value (a sentinel password that is not
// percent-encoded) is no sign of a misparsed password: such URLs open.
func TestAtInParameterValue(t *testing.T) {
	for _, raw := range []string{"redis+sentinel://h:1/p?sentinel_password=p@ss", "redis+sentinel://:pw@h:1/p?sentinel_username=u@x&sentinel_password=s"} {
		if err := redisstore.CheckURL(raw); err != nil {
			t.Errorf("CheckURL(%q): %v", raw, err)
		}
	}
}

// Sentinels that require a password (requirepass, or an ACL user) take it
// from sentinel_password; without it the sentinels' refusal is a refused
// credential that names the parameter, not "unreachable".
func TestSentinelAuth(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	ctx := testCtx(t, 30*time.Second)
	for _, addr := range topo.SentinelAddrs() {
		if err := newClient(t, addr).Do(ctx, "ACL", "SETUSER", "default", "resetpass", ">spw").Err(); err != nil {
			t.Fatal(err)
		}
	}
	base := topo.URL()
	without := openURL(t, base, uniquePrefix())
	if _, err := without.Get(ctx, "job"); !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "sentinel_password") {
		t.Errorf("Get through sentinels that want a password, without it: %v; want ErrForbidden naming sentinel_password", err)
	}
	with := openURL(t, base+"?sentinel_password=spw", uniquePrefix())
	if _, err := with.Get(ctx, "job"); err != nil && !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get through sentinels with sentinel_password: %v", err)
	}
}

// A Cluster moving a held lock's hash slot to another primary, step by
// step as resharding does: while the lock's keys are split between the two
// nodes, renewals are refused as unavailable (retried by the engine); a
// contender is refused throughout, as unavailable while the slot moves,
// and so is the holder's release (the claim stays); the holder renews
// before and after the keys move, and after the new owner is announced.
func TestClusterSlotMigration(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	ctx := testCtx(t, time.Minute)
	s := openURL(t, c.URL(), uniquePrefix())
	other := openURL(t, c.URL(), s.Prefix())
	g, err := s.TryAcquire(ctx, "job", request("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lock, _, _ := s.Keys("job")
	m := c.StartSlotMove(t, lock, (c.SlotServer(t, lock)+1)%len(c.Nodes))
	renew := func(step string) {
		t.Helper()
		if g2, err := s.Renew(ctx, g); err != nil {
			t.Errorf("%s: Renew: %v", step, err)
		} else {
			g = g2
		}
	}
	// While the slot moves, an acquisition names keys the source (or the
	// target) does not have, the lock's queue among them: Redis cannot
	// tell them from keys moved away, and refuses with TRYAGAIN.
	refused := func(step string, moving bool) {
		t.Helper()
		_, err := other.TryAcquire(ctx, "job", request("b", time.Minute))
		if !errors.Is(err, backend.ErrHeld) && !(moving && errors.Is(err, backend.ErrUnavailable)) {
			t.Errorf("%s: a contender's TryAcquire: %v; want ErrHeld (or ErrUnavailable while the slot moves)", step, err)
		}
	}

	renew("slot marked migrating")
	refused("slot marked migrating", true)
	// A release names the waiters' keys too: refused, the claim stays.
	if err := s.Release(ctx, g); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("slot marked migrating: Release: %v; want ErrUnavailable", err)
	}
	renew("after the refused release")
	if m.MoveKeys(t, 1) != 1 {
		t.Fatal("no key moved")
	}
	if _, err := s.Renew(ctx, g); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "moving the lock's hash slot") {
		t.Errorf("keys split: Renew: %v; want ErrUnavailable saying the slot is moving", err)
	}
	refused("keys split", true)
	for m.MoveKeys(t, 100) > 0 {
	}
	renew("every key moved, slot still migrating")
	refused("every key moved, slot still migrating", true)
	m.Finish(t)
	renew("new owner announced")
	refused("new owner announced", false)
	if err := s.Release(ctx, g); err != nil {
		t.Errorf("Release after the move: %v", err)
	}
}
