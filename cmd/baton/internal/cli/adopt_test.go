package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
)

// baton lock on the Lease of a running client-go leader election (a
// binary that did its own leader election, now run under baton): without
// --adopt it is refused (exit 77) with an error that names --adopt; with
// it, lock waits while client-go's leader renews the Lease, and takes it
// once that leader stops.
func TestLockAdoptsClientGoLease(t *testing.T) {
	t.Parallel()
	kc, ns := kubeconfig(t)
	args := []string{"lock", "--backend", "lease", "--kubeconfig", kc, "--name", "controller", "--ttl", "2s"}
	stop := electClientGo(t, ns, "controller")

	code, _, stderr := runCLI(t, append(args, "--wait", "0", "--", "true")...)
	if code != cli.ExitNoPermission || !strings.Contains(stderr, "--adopt") {
		t.Fatalf("lock without --adopt: exit %d, stderr %s; want %d naming --adopt", code, stderr, cli.ExitNoPermission)
	}
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runCLI(t, append(args, "--adopt", "--wait", "30s", "--", "true")...)
		done <- result{code, stderr}
	}()
	// Longer than client-go's lease duration (2s): lock must see the
	// Lease renewed and keep waiting.
	select {
	case r := <-done:
		t.Fatalf("lock --adopt returned (exit %d) while client-go's leader held the Lease: %s", r.code, r.stderr)
	case <-time.After(3 * time.Second):
	}
	stop()
	if r := <-done; r.code != 0 {
		t.Fatalf("lock --adopt after client-go's leader stopped: exit %d: %s", r.code, r.stderr)
	}
}

// electClientGo runs client-go's leader election with a LeaseLock on the
// Lease ns/name until it leads, and returns a func that stops it (it
// releases the Lease) and waits until it has.
func electClientGo(t *testing.T, ns, name string) (stop func()) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(controlPlane(t))
	if err != nil {
		t.Fatal(err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Client: cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go-0"},
	}
	leading, done := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(leading) },
				OnStoppedLeading: func() {},
			},
		})
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	select {
	case <-leading:
	case <-time.After(20 * time.Second):
		t.Fatal("client-go's leader election did not lead within 20s")
	}
	return stop
}
