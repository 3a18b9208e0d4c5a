package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// CheckPermissions asks the server whether the user this Store connects as
// may run every command of ACLRules that the Store sends for lock name, on
// that lock's keys and channels: the scripts (EVALSHA, and EVAL after the
// server's script cache was flushed), the commands they run, SUBSCRIBE and
// PUBLISH on its channels, and SCAN for List. Redis answers with
// redis.acl_check_cmd, in one script that runs none of the commands and
// writes nothing.
//
// It returns nil if every command is allowed; an error matching
// backend.ErrForbidden that names each refused command with its keys or
// channels, or the user's missing right to run scripts; an error matching
// backend.ErrMisconfigured that names the commands the server does not
// have (disabled or renamed with rename-command); an error matching
// errors.ErrUnsupported if the server cannot tell (Redis before 7.0 has no
// redis.acl_check_cmd); or the store error of a server that did not
// answer.
//
// Rights are checked on one server: on a Sentinel-managed primary, the
// current primary; on a Redis Cluster, the node that ran the script, whose
// ACL users need not match the other nodes' (ACL SETUSER is per node).
// Which commands a user may run can change at any time; a nil error says
// they were allowed when the server answered.
func (s *Store) CheckPermissions(ctx context.Context, name string) error {
	if err := s.open("check permissions of", name); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	refused, missing, err := s.refusedCommands(ctx, name)
	switch {
	case err != nil:
		return err
	case len(missing) > 0:
		return fmt.Errorf("redisstore: lock %q: %w: %s", name, backend.ErrMisconfigured, missingCommands(missing))
	case len(refused) > 0:
		return fmt.Errorf("redisstore: lock %q: %w: this user may not run %s; give it the rules of redisstore.ACLRules (with the key and channel patterns ~%s* &%s* for the prefix %q)",
			name, backend.ErrForbidden, strings.Join(refused, ", "), s.prefix, s.prefix, s.prefix)
	}
	return nil
}

// missingCommands says that the server lacks the commands missing, which
// baton needs.
func missingCommands(missing []string) string {
	return fmt.Sprintf("the server has no %s command (disabled or renamed with rename-command, as hardened and managed servers do for some), "+
		"and baton needs every command of redisstore.ACLRules under its own name: remove its rename-command line from redis.conf (or ask the provider) and restart the server",
		strings.Join(missing, ", no "))
}

// refusedCommands returns the commands of permissionChecks that the server
// says this Store's user may not run, and those the server does not have
// (renamed or disabled), as showCommand writes them (missing: the name
// only, once each).
func (s *Store) refusedCommands(ctx context.Context, name string) (refused, missing []string, err error) {
	checks := s.permissionChecks(name)
	args := make([]any, 0, 8*len(checks))
	for _, c := range checks {
		args = append(args, len(c))
		for _, a := range c {
			args = append(args, a)
		}
	}
	k := s.keySet(name)
	denied, err := permissionsScript.Run(ctx, s.client, nil, args...).Int64Slice()
	switch {
	case err != nil && strings.HasPrefix(err.Error(), noACLCheckCode):
		return nil, nil, fmt.Errorf("redisstore: lock %q: %w: the server has no redis.acl_check_cmd (Redis before 7.0), so it cannot tell which commands this user may run; compare the user's rules (ACL GETUSER) with redisstore.ACLRules", name, errors.ErrUnsupported)
	case err != nil:
		return nil, nil, s.wrap(name, k.lock, "check permissions for", err)
	}
	for _, i := range denied {
		if i == 0 || max(i, -i) > int64(len(checks)) {
			return nil, nil, fmt.Errorf("redisstore: lock %q: unexpected script reply %v", name, denied)
		}
		if i > 0 {
			refused = append(refused, showCommand(checks[i-1]))
		} else if cmd := strings.ToUpper(checks[-i-1][0]); !slices.Contains(missing, cmd) {
			missing = append(missing, cmd)
		}
	}
	return refused, missing, nil
}

// namePermissions adds to err, a script's refusal by the server's ACL, the
// commands this Store's user may not run on lock name's keys, as far as
// the server can tell (refusedCommands): Redis refuses a command that a
// script runs without naming it.
func (s *Store) namePermissions(ctx context.Context, name string, err error) error {
	if err == nil || !errors.Is(err, backend.ErrForbidden) && !scriptStopped(err) {
		return err
	}
	refused, missing, cerr := s.refusedCommands(ctx, name)
	switch {
	case cerr != nil:
	case len(missing) > 0:
		return fmt.Errorf("%w (%s)", err, missingCommands(missing))
	case len(refused) > 0:
		return fmt.Errorf("%w (this user may not run %s)", err, strings.Join(refused, ", "))
	}
	return err
}

// permissionChecks returns the commands, with their arguments, that
// CheckPermissions asks about for lock name: every command of ACLRules
// (SELECT only for a database other than 0, which is all a client sends
// it for; ASKING and CLUSTER SLOTS only on a Cluster), on the keys of the
// types it is run on.
func (s *Store) permissionChecks(name string) [][]string {
	k := s.keySet(name)
	lock, fence, queue, queued, next := k.all[0], k.all[1], k.all[2], k.all[3], k.all[4]
	script := func(cmd, body string) []string {
		return append([]string{cmd, body, strconv.Itoa(len(k.all))}, k.all...)
	}
	checks := [][]string{
		{"hello", "3"}, {"auth", "user", "password"}, {"ping"},
		script("evalsha", releaseScript.Hash()),
		script("eval", "return 0"),
		{"subscribe", k.channel, k.handoffs, k.handoffsTo("holder")},
		{"unsubscribe", k.channel},
		{"publish", k.channel, "notice"},
		{"publish", k.handoffs, "notice"},
		{"publish", k.handoffsTo("holder"), "notice"},
		{"scan", "0", "MATCH", globEscape(s.prefix) + "*", "COUNT", "1000"},
		{"wait", "1", "0"},
		{"time"},
	}
	for _, key := range []string{lock, fence, queue, queued, next} {
		checks = append(checks, []string{"type", key}, []string{"exists", key}, []string{"del", key},
			[]string{"pttl", key}, []string{"pexpire", key, "1000"})
	}
	for _, key := range []string{lock, next} {
		checks = append(checks, []string{"get", key}, []string{"set", key, "value", "PX", "1000"})
	}
	for _, key := range []string{fence, queued} {
		checks = append(checks, []string{"hset", key, "field", "value"}, []string{"hget", key, "field"},
			[]string{"hmget", key, "field"}, []string{"hdel", key, "field"}, []string{"hexists", key, "field"})
	}
	if db := s.database(); db != 0 {
		checks = append(checks, []string{"select", strconv.Itoa(db)})
	}
	if s.isCluster() {
		checks = append(checks, []string{"asking"}, []string{"cluster", "slots"})
	}
	return append(checks, []string{"rpush", queue, "waiter"}, []string{"rpop", queue}, []string{"llen", queue},
		[]string{"lrange", queue, "0", "0"}, []string{"lrem", queue, "0", "waiter"})
}

// database returns the database number the Store's client selects (0 on
// a Cluster, which has no other).
func (s *Store) database() int {
	if c, ok := s.client.(*redis.Client); ok {
		return c.Options().DB
	}
	return 0
}

// showCommand writes a checked command as a refusal names it: upper case,
// with its keys or channels, and a script's keys without the script.
func showCommand(c []string) string {
	cmd := strings.ToUpper(c[0])
	switch c[0] {
	case "eval", "evalsha":
		return cmd + " (a script) on " + strings.Join(c[3:], " ")
	case "hello", "auth", "select", "ping", "asking", "time", "scan", "wait":
		return cmd
	case "cluster":
		return cmd + " " + strings.ToUpper(c[1])
	case "subscribe", "unsubscribe", "rpop", "llen", "type", "exists", "del", "pttl", "get":
		return cmd + " " + strings.Join(c[1:], " ")
	}
	return cmd + " " + c[1] // the key or channel; the rest are values
}

// noACLCheckCode starts the error permissionsScript returns on a server
// without redis.acl_check_cmd.
const noACLCheckCode = "BATON_NOACLCHECK"

// permissionsScript checks the commands in ARGV, each given as the number
// of its words and then the words, with redis.acl_check_cmd, and returns
// the 1-based positions of those the user may not run, and the negated
// positions of those the server does not have (acl_check_cmd raises an
// error for a command disabled or renamed with rename-command).
var permissionsScript = redis.NewScript(`
if not redis.acl_check_cmd then
  return redis.error_reply('` + noACLCheckCode + ` redis.acl_check_cmd is missing')
end
local denied, i, n = {}, 1, 0
while i <= #ARGV do
  local c = tonumber(ARGV[i])
  n = n + 1
  local known, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + c))
  if not known then denied[#denied + 1] = -n elseif not allowed then denied[#denied + 1] = n end
  i = i + c + 1
end
return denied
`)
