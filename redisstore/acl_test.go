package redisstore_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/baton-go/baton/redisstore"
)

// TestACLRulesCoverScripts: every command the scripts call is in ACLRules.
// Redis checks a script's commands against the user's rules as it runs
// them, so a command left out fails only on the path that calls it
// (TestACLUser runs the common paths on a real server).
func TestACLRulesCoverScripts(t *testing.T) {
	src, err := os.ReadFile("scripts.go")
	if err != nil {
		t.Fatal(err)
	}
	rules := strings.Fields(redisstore.ACLRules)
	calls := regexp.MustCompile(`redis\.call\('([A-Z]+)'`).FindAllStringSubmatch(string(src), -1)
	if len(calls) == 0 {
		t.Fatal("found no redis.call in scripts.go")
	}
	for _, c := range calls {
		if rule := "+" + strings.ToLower(c[1]); !slices.Contains(rules, rule) {
			t.Errorf("the scripts call %s, but ACLRules has no %s", c[1], rule)
		}
	}
}
