package batonlock_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/baton-go/baton/adapter/batonlock"
	"github.com/baton-go/baton/memstore"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
)

// client-go's LeaderElector on a baton backend (here the in-process memory
// store; in production etcdstore, redisstore or kube).
func Example() {
	store := memstore.New()
	lock, err := batonlock.New(store, "my-controller", "replica-a",
		batonlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				token, _ := lock.Token()
				fmt.Println("leading with fencing token", token)
				cancel() // stop: RunOrDie releases the lock and returns
			},
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
		},
	})
	_, held := lock.Token()
	fmt.Println("still holding:", held)
	// Output:
	// leading with fencing token 1
	// stopped leading
	// still holding: false
}

// A controller-runtime manager electing its leader on a baton backend.
func Example_controllerRuntime() {
	store := memstore.New() // etcdstore.New(...), redisstore.New(...), kubestore.NewLeaseForConfig(...)
	id := "replica-a"       // unique per replica: e.g. the pod name plus a random suffix
	lock, err := batonlock.New(store, "my-operator", id)
	if err != nil {
		log.Fatal(err)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       true,
	})
	if err != nil {
		log.Fatal(err)
	}
	// Register controllers, then:
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Fatal(err)
	}
}
