package redisstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// TestPermissionChecksCoverACLRules: CheckPermissions asks about every
// command of ACLRules (on a Cluster: the plain server's Store leaves out
// ASKING and CLUSTER SLOTS; SELECT for a database other than 0), and
// about no other.
func TestPermissionChecksCoverACLRules(t *testing.T) {
	var asked []string
	for _, url := range []string{"redis://127.0.0.1:1/1", "redis+cluster://127.0.0.1:1,127.0.0.1:2"} {
		s, err := redisstore.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		asked = append(asked, redisstore.PermissionCommands(s)...)
	}
	rules := strings.Fields(redisstore.ACLRules)
	for _, r := range rules {
		if cmd, ok := strings.CutPrefix(r, "+"); ok && !slices.Contains(asked, cmd) {
			t.Errorf("ACLRules has %s, which CheckPermissions does not ask about", r)
		}
	}
	for _, cmd := range asked {
		if !slices.Contains(rules, "+"+cmd) {
			t.Errorf("CheckPermissions asks about %s, which ACLRules does not allow", cmd)
		}
	}
}

// TestACLRulesLeastPrivilege: a user with ACLRules may run none of the
// commands that act on other clients or on the server (the category
// @connection, which ACLRules once granted whole, has CLIENT KILL and
// CLIENT PAUSE), and takes locks on a Redis Cluster (which needs CLUSTER
// SLOTS, outside @connection), and CheckPermissions passes there.
func TestACLRulesLeastPrivilege(t *testing.T) {
	locker := testenv.RedisArgs(append([]string{"--user", "locker", "on", ">pw"}, strings.Fields(redisstore.ACLRules)...)...)
	cluster := testenv.StartRedisCluster(t, 3, locker)
	ctx := testCtx(t, 30*time.Second)
	admin := newClient(t, cluster.Addrs()[0])
	for _, cmd := range [][]string{{"client", "kill", "type", "normal"}, {"client", "pause", "1"}, {"client", "list"},
		{"client", "no-evict", "on"}, {"client", "unblock", "1"}, {"config", "get", "*"}, {"flushall"}, {"keys", "*"}} {
		args := []any{"ACL", "DRYRUN", "locker"}
		for _, a := range cmd {
			args = append(args, a)
		}
		if reply, err := admin.Do(ctx, args...).Text(); err != nil || reply == "OK" {
			t.Errorf("ACL DRYRUN locker %s: %q, %v; want a refusal", strings.Join(cmd, " "), reply, err)
		}
	}
	s := openURL(t, "redis+cluster://locker:pw@"+strings.Join(cluster.Addrs(), ","), redisstore.DefaultPrefix)
	if err := s.CheckPermissions(ctx, "job"); err != nil {
		t.Errorf("CheckPermissions on a Cluster: %v", err)
	}
	cycle(t, ctx, s, "job", 2)
}

// TestCheckPermissions: on a real server, a user with ACLRules passes; a
// user without one of the rules, without the channel pattern, with
// read-only keys or without scripting gets ErrForbidden naming what it
// may not run.
func TestCheckPermissions(t *testing.T) {
	rules := strings.Fields(redisstore.ACLRules)
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return slices.Contains(drop, r) })
	}
	user := func(name string, rules ...string) testenv.RedisOption {
		return testenv.RedisArgs(append([]string{"--user", name, "on", ">pw"}, rules...)...)
	}
	srv := testenv.StartRedis(t,
		user("locker", rules...),
		user("older", without("+rpop")...),
		user("nochannels", without("&baton:*")...),
		user("readonly", append(without("~baton:*"), "%R~baton:*")...),
		user("noscripts", "~baton:*", "&baton:*", "+@all", "-@scripting"),
	)
	ctx := testCtx(t, 20*time.Second)
	check := func(user string) error {
		s, err := redisstore.Open(fmt.Sprintf("redis://%s:pw@%s", user, srv.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.CheckPermissions(ctx, "job")
	}
	if err := check("locker"); err != nil {
		t.Errorf("a user with ACLRules: %v, want nil", err)
	}
	for _, tc := range []struct {
		user string
		want []string // in the error, in this order
		not  []string // not in the error
	}{
		{"older", []string{"may not run RPOP baton:{job}:queue;", "redisstore.ACLRules"}, []string{"PUBLISH", "SET"}},
		{"nochannels", []string{"may not run SUBSCRIBE baton:{job}:notify baton:{job}:handoffs baton:{job}:handoffs:holder, PUBLISH baton:{job}:notify, PUBLISH baton:{job}:handoffs, PUBLISH baton:{job}:handoffs:holder;"}, []string{"RPOP", "SET"}},
		{"readonly", []string{"EVALSHA (a script) on baton:{job}:lock", "SET baton:{job}:lock", "HSET baton:{job}:fence", "RPUSH baton:{job}:queue"}, []string{"GET", "HGET", "PUBLISH"}},
		{"noscripts", []string{"NOPERM", "evalsha", "redisstore.ACLRules"}, nil},
	} {
		err := check(tc.user)
		t.Logf("%s: %v", tc.user, err)
		if !errors.Is(err, backend.ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", tc.user, err)
			continue
		}
		msg, at := err.Error(), 0
		for _, w := range tc.want {
			i := strings.Index(msg[at:], w)
			if i < 0 {
				t.Errorf("%s: %q does not name %q (after the position of the one before)", tc.user, msg, w)
				break
			}
			at += i + len(w)
		}
		for _, n := range tc.not {
			if strings.Contains(msg, n+" ") {
				t.Errorf("%s: %q names %s, which the user may run", tc.user, msg, n)
			}
		}
	}
}

// TestCheckPermissionsSelect: SELECT is asked about only for a database
// other than 0, the only case a client sends it: a user without +select
// passes on database 0 (baton doctor failed it there, naming SELECT) and
// fails on database 1, where its connections would be refused.
func TestCheckPermissionsSelect(t *testing.T) {
	rules := slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "+select" })
	srv := testenv.StartRedis(t, testenv.RedisArgs(append([]string{"--user", "noselect", "on", ">pw"}, rules...)...))
	ctx := testCtx(t, 20*time.Second)
	for db, want := range map[int]error{0: nil, 1: backend.ErrForbidden} {
		s := openURL(t, fmt.Sprintf("redis://noselect:pw@%s/%d", srv.Addr(), db), redisstore.DefaultPrefix)
		if err := s.CheckPermissions(ctx, "job"); (want == nil) != (err == nil) || !errors.Is(err, want) {
			t.Errorf("database %d: %v; want %v", db, err, want)
		}
	}
}
