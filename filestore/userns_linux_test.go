package filestore

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUserNamespacePermission: root in a user namespace of its own (uid 0
// there is uid 12345 outside, as in a rootless container) is refused a
// lock directory of the machine's root, whom that namespace shows as uid
// 65534. The error says that this uid 0 is not root, who it is outside,
// and that the directory's owner is not mapped; it said only "this process
// (uid 0) may not read or write", which root cannot make sense of. It
// needs root, to map a user namespace onto another user.
func TestUserNamespacePermission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a user namespace of another user")
	}
	root, err := os.MkdirTemp("", "baton-userns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(root, "filestore.test")
	if err := copyFile(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), usernsHelperEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 12345, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 12345, Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("cannot start a process in a user namespace here: %v %s", err, out)
	}
	t.Logf("New as root of a user namespace: %s", out)
	for _, want := range []string{"uid 0 in a user namespace, uid 12345 outside it", dir + " belongs to a user not mapped into this process's user namespace"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error lacks %q", want)
		}
	}
}

func TestParseUIDMap(t *testing.T) {
	for _, tc := range []struct {
		m        string
		uid, out int
		ok       bool
	}{
		{"         0          0 4294967295\n", 0, 0, false},
		{"         0       1000          1\n", 0, 1000, true},
		{"         0       1000          1\n         1     100000      65536\n", 33, 100032, true},
		{"         0       1000          1\n", 5, 0, false},
		{"", 0, 0, false},
	} {
		out, ok := parseUIDMap(tc.m, tc.uid)
		if out != tc.out || ok != tc.ok {
			t.Errorf("parseUIDMap(%q, %d) = %d, %v; want %d, %v", tc.m, tc.uid, out, ok, tc.out, tc.ok)
		}
	}
}
