package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/memstore"
)

func ExampleMutex() {
	store := memstore.New() // one process; use package filestore, or a network store, across processes
	mu, err := baton.NewMutex(store, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.Lock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	// Work under lease.Context(): it ends before the lease can expire.
	fmt.Println("holding", lease.Name(), "with token", lease.Token())
	// Output: holding nightly-report with token 1
}

func ExampleMutex_TryLock() {
	store := memstore.New()
	a, _ := baton.NewMutex(store, "migrate", baton.WithIdentity("replica-a"))
	b, _ := baton.NewMutex(store, "migrate", baton.WithIdentity("replica-b"))

	lease, err := a.TryLock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	_, err = b.TryLock(context.Background())
	var held *baton.HeldError
	if errors.As(err, &held) {
		fmt.Printf("held by %s (token %d)\n", held.Holder, held.Token)
	}
	// Output: held by replica-a (token 1)
}

// A fencing token lets the protected resource reject a writer whose lease
// ended while it was paused: it accepts a write only with a token at least
// as large as the largest it has seen.
func ExampleLease_Token() {
	var (
		mu      sync.Mutex
		highest uint64
	)
	write := func(token uint64, v string) error {
		mu.Lock()
		defer mu.Unlock()
		if token < highest {
			return fmt.Errorf("stale token %d < %d: write %q rejected", token, highest, v)
		}
		highest = token
		return nil
	}

	store := memstore.New()
	m, _ := baton.NewMutex(store, "ledger")
	old, _ := m.TryLock(context.Background())
	_ = old.Unlock(context.Background()) // imagine: old's process paused past its TTL instead
	next, _ := m.TryLock(context.Background())
	defer next.Unlock(context.Background())

	fmt.Println(write(next.Token(), "new holder"))
	fmt.Println(write(old.Token(), "late write"))
	// Output:
	// <nil>
	// stale token 1 < 2: write "late write" rejected
}

func ExampleElector() {
	store := memstore.New()
	el, err := baton.NewElector(store, "scheduler",
		baton.WithIdentity("replica-a"),
		baton.WithLogger(slog.New(slog.DiscardHandler)),
		baton.OnNewLeader(func(id string) { fmt.Println("leader:", id) }),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	err = el.Run(ctx, func(ctx context.Context, term *baton.Lease) error {
		fmt.Println("leading with token", term.Token())
		stop() // a real worker runs until ctx ends: shutdown, or loss of the term
		<-ctx.Done()
		return nil
	})
	fmt.Println("Run:", err)
	// Output:
	// leader: replica-a
	// leading with token 1
	// Run: context canceled
}

// A Semaphore lets a few holders work at once. Each lease is of one slot,
// and its token fences writes per slot (Lease.Name).
func ExampleSemaphore() {
	store := memstore.New()
	exporters, err := baton.NewSemaphore(store, "exporters", 2)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a, _ := exporters.TryAcquire(ctx)
	b, _ := exporters.TryAcquire(ctx)
	_, err = exporters.TryAcquire(ctx)
	fmt.Println("third holder refused:", errors.Is(err, baton.ErrHeld))
	fmt.Println("two slots:", a.Name() != b.Name())

	a.Unlock(ctx)
	c, _ := exporters.Acquire(ctx) // gets the slot a freed
	fmt.Println("same slot, larger token:", c.Name() == a.Name() && c.Token() > a.Token())
	b.Unlock(ctx)
	c.Unlock(ctx)
	// Output:
	// third holder refused: true
	// two slots: true
	// same slot, larger token: true
}
