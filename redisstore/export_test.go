package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxWaiters is the number of places the FIFO of waiters holds.
var MaxWaiters, _ = strconv.Atoi(maxWaitersLua)

// QueueKeys returns the keys of name's FIFO of waiters: queue, queued, next.
func QueueKeys(s *Store, name string) []string { return s.queueKeys(name) }

// HoldRenewals makes s send its pending renewals only when FlushRenewals
// is called (the window is an hour, and starts now), and calls enqueued
// with the number of pending renewals after each one joins. Tests use it
// to know which renewals share a batch without depending on timing.
func HoldRenewals(s *Store, enqueued func(pending int)) {
	b := s.renews
	b.mu.Lock()
	defer b.mu.Unlock()
	b.window, b.last, b.enqueued = time.Hour, time.Now(), enqueued
}

// FlushRenewals sends s's pending renewals now.
func FlushRenewals(s *Store) {
	b := s.renews
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
	b.sendLocked()
}

// SlotOf is the Cluster hash slot of lock name's keys.
func SlotOf(name string) uint16 { return slotOf(name) }

// MaxRenewsPerScript is how many locks one renewal script renews at most.
const MaxRenewsPerScript = maxRenewsPerScript

// PermissionCommands returns the commands CheckPermissions asks about.
func PermissionCommands(s *Store) []string {
	var cmds []string
	for _, c := range s.permissionChecks("x") {
		if c[0] == "cluster" {
			c[0] += "|" + c[1] // a subcommand, as ACL rules name it
		}
		cmds = append(cmds, c[0])
	}
	return cmds
}

// RaiseScriptHash is the SHA1 of the script a Redlock runs to raise a
// server's fencing counter to the token of its quorum.
var RaiseScriptHash = raiseScript.Hash()

// AcquireScriptHash is the SHA1 of the script a Store runs to acquire.
var AcquireScriptHash = acquireScript.Hash()

// ScriptOf names the baton script a command runs ("acquire", "release"),
// or "" for another command.
func ScriptOf(args []any) string {
	if len(args) < 2 {
		return ""
	}
	name, _ := args[0].(string)
	body, _ := args[1].(string)
	for s, what := range map[*redis.Script]string{acquireScript: "acquire", releaseScript: "release"} {
		switch {
		case strings.EqualFold(name, "evalsha") && body == s.Hash():
			return what
		case strings.EqualFold(name, "eval") && sha1hex(body) == s.Hash():
			return what
		}
	}
	return ""
}

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}
