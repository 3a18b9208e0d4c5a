package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/memstore"
)

// Two workers of one process share a lock through a memory Store. The
// second finds it held, and gets it with a larger fencing token once the
// first unlocks.
func Example() {
	ctx := context.Background()
	store := memstore.New()

	first, err := baton.NewMutex(store, "nightly-report", baton.WithIdentity("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := first.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked by", lease.Holder(), "with token", lease.Token())

	second, err := baton.NewMutex(store, "nightly-report", baton.WithIdentity("worker-2"))
	if err != nil {
		log.Fatal(err)
	}
	var held *backend.HeldError
	if _, err := second.TryLock(ctx); errors.As(err, &held) {
		fmt.Println("held by", held.Holder)
	}

	// Work under lease.Context(), which ends if the lock is lost, and pass
	// lease.Token() to the resource being written.
	if err := lease.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("first lease ended:", context.Cause(lease.Context()))

	next, err := second.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Unlock(ctx)
	fmt.Println("locked by", next.Holder(), "with token", next.Token())
	// Output:
	// locked by worker-1 with token 1
	// held by worker-1
	// first lease ended: lock released
	// locked by worker-2 with token 2
}

// The fencing counter of a key survives release: Get shows the last token
// issued, and the next holder gets a larger one.
func ExampleStore_Get() {
	ctx := context.Background()
	store := memstore.New()
	g, err := store.TryAcquire(ctx, "migrate", backend.Request{Holder: "job-1", Nonce: baton.NewNonce(), TTL: baton.DefaultTTL})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Release(ctx, g); err != nil {
		log.Fatal(err)
	}
	rec, err := store.Get(ctx, "migrate")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held=%v holder=%q token=%d\n", rec.Held(), rec.Holder, rec.Token)

	_, err = store.Get(ctx, "unknown")
	fmt.Println(errors.Is(err, backend.ErrNotFound))
	// Output:
	// held=false holder="" token=1
	// true
}
