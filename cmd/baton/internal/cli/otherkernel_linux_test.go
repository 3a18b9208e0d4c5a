//go:build linux

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bootIDPath is where Linux gives the boot ID, which the file backend
// tells boots (and machines) apart by.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

func init() {
	// In its own mount namespace (startCLIWith with CLONE_NEWNS; Go makes
	// the namespace's mounts private), a bind mount shows this process
	// another boot ID, and nothing else changes: the file system, flock
	// and the clocks are the machine's.
	enterOtherKernel = func(bootIDFile string) error {
		return syscall.Mount(bootIDFile, bootIDPath, "", syscall.MS_BIND, "")
	}
}

// TestRunOnAnotherKernel runs `baton run` twice on one lock directory, the
// second seeing another boot ID, as a process of another machine that
// shares the directory over NFS would (its own kernel, so its own boot ID
// and monotonic clock). Each counts the other's claims as expired, so the
// second takes the lock at once; the first must find out at its next
// renewal, stop its CMD and exit 78 naming the other boot. (Both share
// this kernel's flock, so their tokens stay in order here, which across
// NFS clients they need not.) It needs CAP_SYS_ADMIN for the mount
// namespace.
func TestRunOnAnotherKernel(t *testing.T) {
	t.Parallel()
	const otherBoot = "0d1e2f3a-0000-4000-8000-0123456789ab"
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(bootFile, []byte(otherBoot+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherEnv := envBootID + "=" + bootFile
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	}
	// A mount namespace and a bind mount need CAP_SYS_ADMIN (root, outside
	// a container that drops it). Without it this test cannot run, and
	// TestLockTakenByAnotherMachine covers the same without privileges.
	probe := exec.Command(exe(), cmdExit, "0")
	probe.Env = append(os.Environ(), roleEnv+"=cli", otherEnv)
	probe.SysProcAttr = attr()
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot show a process another boot ID here (a mount namespace and a bind mount need CAP_SYS_ADMIN): %v %s", err, out)
	}

	dir, f := t.TempDir(), newFence(t)
	here := startCLI(t, "run here", f.env(), runArgs(dir, "shared", "here", worker()...)...)
	f.waitWrite(t, "a write by the first CMD", 15*time.Second, false, func(fenceWrite) bool { return true })
	there := startCLIWith(t, "run there", append(f.env(), otherEnv), attr(), runArgs(dir, "shared", "there", worker()...)...)

	if code := here.wait(30 * time.Second); code != 78 {
		t.Fatalf("the first run exited %d, want 78; stderr:\n%s", code, here.stderr)
	}
	for _, want := range []string{"another machine uses the directory", otherBoot} {
		if !strings.Contains(here.stderr.String(), want) {
			t.Errorf("the first run's stderr lacks %q:\n%s", want, here.stderr)
		}
	}
	select {
	case <-there.done:
		t.Errorf("the second run exited %d; it should lead on; stderr:\n%s", there.code, there.stderr)
	default:
	}
}

// TestDoctorContainerBootID: doctor in a mount namespace whose boot ID is
// a file mounted over the kernel's, as systemd-nspawn and LXC give each
// container, warns that processes outside it sharing the lock directory
// do not exclude it, and passes the row with the kernel's. It needs
// CAP_SYS_ADMIN for the mount namespace, as TestRunOnAnotherKernel.
func TestDoctorContainerBootID(t *testing.T) {
	t.Parallel()
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(bootFile, []byte("5e1f2a3b-0000-4000-8000-0123456789ab\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	attr := &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	probe := exec.Command(exe(), cmdExit, "0")
	probe.Env = append(os.Environ(), roleEnv+"=cli", envBootID+"="+bootFile)
	probe.SysProcAttr = attr
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot show a process another boot ID here (a mount namespace and a bind mount need CAP_SYS_ADMIN): %v %s", err, out)
	}
	dir := t.TempDir()
	if _, out, _ := runCLI(t, "doctor", "--dir", dir); doctorTable(t, out)["boot ID"].result != "PASS" {
		t.Errorf("doctor with the kernel's boot ID: boot ID row %+v, want PASS\n%s", doctorTable(t, out)["boot ID"], out)
	}
	p := startCLIWith(t, "doctor in a container", []string{envBootID + "=" + bootFile}, attr, "doctor", "--dir", dir)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("doctor exited %d, want 0 (a warning); stderr:\n%s", code, p.stderr)
	}
	row := doctorTable(t, p.stdout.String())["boot ID"]
	if row.result != "WARN" || !strings.Contains(row.detail, "systemd-nspawn") || !strings.Contains(row.detail, "do not exclude each other") {
		t.Errorf("doctor with a container's own boot ID: boot ID row %+v, want a warning naming the cause\n%s", row, p.stdout)
	}
	if fix := doctorFix(p.stdout.String(), "boot ID"); !strings.Contains(fix, "--backend") {
		t.Errorf("boot ID fix %q does not name another backend", fix)
	}
}
