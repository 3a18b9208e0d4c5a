package testenv

import (
	"strings"
	"testing"
	"time"
)

// TestEtcdCluster: three members elect a leader; with the leader killed
// the other two elect another and keep serving writes; the killed member
// rejoins with the data it missed; a paused leader is replaced too, and
// resumed it follows the new one.
func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	c := StartEtcdCluster(t, EtcdNoFsync())
	if len(c.Members) != 3 || len(c.Endpoints()) != 3 {
		t.Fatalf("%d members, endpoints %v", len(c.Members), c.Endpoints())
	}
	lead := c.WaitLeader(10 * time.Second)
	kv := func(i int) *etcdKV { return newEtcdKV(t, c.Members[i], nil) }
	kv((lead+1)%3).put("a", "1")

	c.Members[lead].Kill()
	next := c.WaitLeader(15*time.Second, lead)
	t.Logf("leader %d killed; member %d leads", lead, next)
	other := 3 - lead - next
	kv(other).putAcrossElection("b", "2") // a quorum of two serves writes
	if v := kv(next).mustGet("a"); v != "1" {
		t.Fatalf("a = %q after the leader change, want 1", v)
	}
	c.Members[lead].Start()
	if v := kv(lead).mustGet("b"); v != "2" {
		t.Fatalf("the restarted member reads b = %q, want 2", v)
	}

	lead = c.WaitLeader(10 * time.Second)
	c.Members[lead].Pause()
	if !c.Members[lead].Paused() {
		t.Fatal("Paused() = false after Pause")
	}
	next = c.WaitLeader(15*time.Second, lead)
	t.Logf("leader %d paused; member %d leads", lead, next)
	c.Members[lead].Resume()
	kv(lead).putAcrossElection("c", "3") // the resumed member follows the new leader and forwards the write
	if v := kv(next).mustGet("c"); v != "3" {
		t.Fatalf("c = %q, want 3", v)
	}
	if i := c.WaitLeader(10 * time.Second); i == lead {
		t.Logf("the resumed member %d leads again", i)
	}
	if !strings.Contains(c.Members[0].Log(), "member0") {
		t.Errorf("member 0's log does not name it:\n%s", lastLines(c.Members[0].Log(), 5))
	}
	// A paused member stops at once when killed.
	c.Members[other].Pause()
	c.Members[other].Kill()
	if c.Members[other].Running() {
		t.Fatal("Running() after Kill of a paused member")
	}
}
