package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
)

func init() { timensHelper = timensHelperMain }

// timensShift is how far the child's time namespace moves CLOCK_MONOTONIC
// ahead of this process's: far more than any TTL here.
const timensShift = 1_000_000 // seconds

// TestTimeNamespace: a process in a time namespace of its own (unshare
// --time, as a container restored by CRIU has), whose CLOCK_MONOTONIC reads
// far ahead of this process's, shares the lock directory. It must find this
// process's claim held, not expired, and its own claim must end here after
// its TTL, not after the namespace's offset. It needs the unshare(1)
// command and the privilege to make a time namespace (CAP_SYS_ADMIN, or a
// user namespace).
func TestTimeNamespace(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		// util-linux, essential on Debian, so on every CI machine; only
		// the privilege below is a property of the machine.
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("unshare(1) (util-linux) is needed to start a process in a time namespace: %v", err)
		}
		t.Skip("no unshare(1) (util-linux) to start a process in a time namespace")
	}
	args := []string{"--time", fmt.Sprintf("--monotonic=%d", timensShift), "--fork", "--"}
	if out, err := exec.Command(unshare, append(args, "true")...).CombinedOutput(); err != nil {
		t.Skipf("cannot make a time namespace here (it needs CAP_SYS_ADMIN and a kernel with time namespaces): %v %s", err, out)
	}
	dir := t.TempDir()
	s := newStore(t, dir, nil)
	mustAcquire(t, s, "here", req("here", "n1", time.Minute))

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), unshare, append(args, exe, "-test.run=^$")...)
	cmd.Env = append(os.Environ(), timensHelperEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	t.Logf("child in a time namespace %d s ahead:\n%s", timensShift, out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !strings.Contains(string(out), "here: held") {
		t.Errorf("the child did not find this process's live claim held: two holders")
	}
	rec := mustGet(t, s, "there")
	if !rec.Held() || rec.Remaining > time.Minute {
		t.Errorf("the child's claim with TTL 1m reads here as held %v for %v more, want held for at most 1m", rec.Held(), rec.Remaining)
	}
}

// timensHelperMain is the child of TestTimeNamespace: it tries the lock
// the parent holds ("here: held" or "here: acquired") and takes another,
// "there", for a minute, which it leaves held.
func timensHelperMain(dir string) int {
	s, err := New(dir)
	if err != nil {
		fmt.Println("New:", err)
		return 1
	}
	ctx := context.Background()
	_, err = s.TryAcquire(ctx, "here", backend.Request{Holder: "child", Nonce: "n2", TTL: time.Minute})
	switch {
	case errors.Is(err, backend.ErrHeld):
		fmt.Println("here: held:", err)
	case err == nil:
		fmt.Println("here: acquired")
	default:
		fmt.Println("here:", err)
		return 1
	}
	if _, err := s.TryAcquire(ctx, "there", backend.Request{Holder: "child", Nonce: "n3", TTL: time.Minute}); err != nil {
		fmt.Println("there:", err)
		return 1
	}
	return 0
}

func TestParseMonotonicOffset(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, true},
		{"monotonic     1000000         0\nboottime          -5         0\n", 1e15, true},
		{"boottime 7 0\nmonotonic -30000 500\n", -30000*1e9 + 500, true},
		{"", 0, false},
		{"monotonic x 0\n", 0, false},
		{"monotonic 1 1000000000\n", 0, false},
		{"monotonic 9223372036854775807 0\n", 0, false},
	} {
		got, err := parseMonotonicOffset(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseMonotonicOffset(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
