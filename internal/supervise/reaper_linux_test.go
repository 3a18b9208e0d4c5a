package supervise_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/supervise"
)

// childrenOf lists the children of this process in group pgid, with their
// state letters ("123:Z").
func childrenOf(pgid int) []string {
	var out []string
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[1] == self && (pgid == 0 || f[2] == strconv.Itoa(pgid)) {
			out = append(out, e.Name()+":"+f[0])
		}
	}
	return out
}

// TestReapOrphans: as a subreaper, the orphans of a shell's background job
// come to this process; ReapOrphans leaves none a zombie, never touches
// CMD, and KillOrphans at the end of the term kills one that escaped into
// a session of its own.
func TestReapOrphans(t *testing.T) {
	if err := supervise.BecomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Fatal("setsid(1) (util-linux) is needed:", err)
	}
	// "(sleep 0.2 &)" orphans a sleep at once; "setsid sleep 1000" leaves
	// the group; the shell itself lives on.
	cmd := exec.Command("sh", "-c", `(sleep 0.2 &); (setsid sleep 1000 &); echo started; exec sleep 1000`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := supervise.StartGroup(cmd, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.End()
	if _, err := out.Read(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	// Wait for the orphaned sleep to end and be reaped (an event that only
	// polling shows).
	deadline := time.Now().Add(30 * time.Second)
	reaped := 0
	for reaped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no orphan reaped; children: %v", childrenOf(0))
		}
		time.Sleep(20 * time.Millisecond)
		reaped += supervise.ReapOrphans()
	}
	for _, p := range childrenOf(c.Pgid()) {
		if strings.HasSuffix(p, ":Z") {
			t.Errorf("zombie left in CMD's group: %s", p)
		}
	}
	if c.Exited() {
		t.Fatal("ReapOrphans took CMD")
	}
	c.Kill()
	if code, _ := c.Wait(); code != 137 {
		t.Errorf("CMD's exit code %d, want 137 (its status must reach its Wait)", code)
	}
	c.End()
	if n := supervise.KillOrphans(10 * time.Second); n < 1 {
		t.Errorf("KillOrphans killed %d, want the setsid sleep", n)
	}
	if left := childrenOf(0); len(left) > 0 {
		for _, p := range left {
			if pid, _ := strconv.Atoi(strings.Split(p, ":")[0]); pid != 0 {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				if strings.Contains(string(b), "sleep") {
					t.Errorf("left behind: %s %q", p, b)
				}
			}
		}
	}
}
