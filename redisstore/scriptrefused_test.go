package redisstore_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// TestScriptRefusedByACL: a user that may run the scripts but not publish
// on baton's channels (ACLRules without &baton:*; users made on Redis 7
// have no channels unless given some) is refused at its first acquire,
// with ErrForbidden naming PUBLISH: a Lock returns, it does not retry for
// ever. The claim the script wrote before Redis refused its PUBLISH is
// released, so another contender takes the lock at once, not after the
// claim's TTL.
func TestScriptRefusedByACL(t *testing.T) {
	rules := slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "&baton:*" })
	srv := testenv.StartRedis(t, testenv.RedisArgs(append([]string{"--user", "nochannels", "on", ">pw"}, rules...)...))
	ctx := testCtx(t, 30*time.Second)
	s, err := redisstore.Open(fmt.Sprintf("redis://nochannels:pw@%s", srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := baton.NewMutex(s, "job", baton.WithTTL(time.Minute), baton.WithIdentity("refused"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if l != nil {
		l.Unlock(ctx)
	}
	if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "PUBLISH baton:{job}:notify") {
		t.Errorf("Lock by a user without channels: %v; want ErrForbidden naming PUBLISH baton:{job}:notify", err)
	}
	if err := s.Close(); err != nil { // waits for the claim's release
		t.Fatal(err)
	}
	admin := newStore(t, srv.Addr(), redisstore.DefaultPrefix)
	if _, err := admin.TryAcquire(ctx, "job", request("other", time.Minute)); err != nil {
		t.Errorf("another contender after the refused Lock: %v; want the lock free", err)
	}
}

// TestScriptCommandRenamed: on a server whose PUBLISH an operator disabled
// (rename-command PUBLISH ""), an acquire is a misconfiguration naming
// PUBLISH and rename-command, and its claim, written before the script
// reached PUBLISH, is released; CheckPermissions names PUBLISH as missing
// (it failed with 'Invalid command passed to redis.acl_check_cmd()'), and
// SUBSCRIBE as well on a server that lacks both.
func TestScriptCommandRenamed(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisArgs("--rename-command", "PUBLISH", "", "--rename-command", "SUBSCRIBE", ""))
	ctx := testCtx(t, 30*time.Second)
	s, err := redisstore.Open("redis://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, "job", request("renamed", time.Minute))
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "no PUBLISH") || !strings.Contains(err.Error(), "no SUBSCRIBE") {
		t.Errorf("TryAcquire without PUBLISH: %v; want ErrMisconfigured naming PUBLISH and SUBSCRIBE", err)
	}
	err = s.CheckPermissions(ctx, "job")
	if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), "rename-command") {
		t.Errorf("CheckPermissions without PUBLISH: %v; want ErrMisconfigured naming rename-command", err)
	}
	if err := s.Close(); err != nil { // waits for the claim's release
		t.Fatal(err)
	}
	rec, err := newStore(t, srv.Addr(), redisstore.DefaultPrefix).Get(ctx, "job")
	if err != nil || rec.Holder != "" {
		t.Errorf("the lock after the refused acquire: %+v, %v; want it free", rec, err)
	}
}

// TestGetNamesRefusedCommand: a Get whose script the ACL stops at a
// command (a user without +type) names that command, as an acquire does;
// it said only 'The user executing the script can't run this command or
// subcommand', which baton status and the first read of baton lock showed.
func TestGetNamesRefusedCommand(t *testing.T) {
	rules := slices.DeleteFunc(strings.Fields(redisstore.ACLRules), func(r string) bool { return r == "+type" })
	srv := testenv.StartRedis(t, testenv.RedisArgs(append([]string{"--user", "notype", "on", ">pw"}, rules...)...))
	ctx := testCtx(t, 20*time.Second)
	s := openURL(t, fmt.Sprintf("redis://notype:pw@%s", srv.Addr()), redisstore.DefaultPrefix)
	_, err := s.Get(ctx, "job")
	if !errors.Is(err, backend.ErrForbidden) || !strings.Contains(err.Error(), "may not run TYPE baton:{job}:lock") {
		t.Errorf("Get by a user without +type: %v; want ErrForbidden naming TYPE baton:{job}:lock", err)
	}
}
