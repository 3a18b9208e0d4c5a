package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/memstore"
)

// NameFor's names are a promise across versions: a changed mapping would
// put one entity under two locks while old and new versions run.
func TestNameForIsStable(t *testing.T) {
	for key, want := range map[string]string{
		"Order 8812":        "order-8812-wvdbass7w43gmv3u7jhpqw7t44",
		"order-8812":        "order-8812-s7wqe7qeloviw5gkekalxhdtta",
		"alice@example.com": "alice-example-com-76gzqgp4byjl6djerexelgd6eq",
		"":                  "4oymiquy7qobjgx36tejs35zeq",
		"東京":                "cmabnmsztp36lf4mvz4okkggp4",
	} {
		if got := baton.NameFor(key); got != want {
			t.Errorf("NameFor(%q) = %q, want %q", key, got, want)
		}
	}
}

// Every key, of any bytes and length, maps to a valid name that leaves room
// for a prefix, and keys a hand-made mapping would merge (case, replaced
// characters, a cut at MaxNameLength) keep names of their own.
func TestNameForValidAndDistinct(t *testing.T) {
	long := strings.Repeat("https://example.com/", 20)
	keys := []string{
		"", "-", ".", "a", "Ann@x.io", "ann-x.io", "ann.x.io", "ANN@X.IO",
		long + "a", long + "b", strings.Repeat("x", 10000), "Zürich", "zurich",
		"Zu\u0308rich", "a\x00b", "a b", "a\nb", "-a-", "..a..", strings.Repeat("-", 300),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(300))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		keys = append(keys, string(b))
	}
	prefix := strings.Repeat("p", baton.MaxNameLength-baton.NameForMaxLength-1) + "."
	names := map[string]string{}
	for _, k := range keys {
		n := baton.NameFor(k)
		if err := baton.ValidateName(n); err != nil {
			t.Fatalf("NameFor(%q) = %q: %v", k, n, err)
		}
		if len(n) > baton.NameForMaxLength {
			t.Fatalf("NameFor(%q) = %q: %d characters, NameForMaxLength is %d", k, n, len(n), baton.NameForMaxLength)
		}
		if err := baton.ValidateName(prefix + n); err != nil {
			t.Fatalf("prefix+NameFor(%q): %v", k, err)
		}
		if other, ok := names[n]; ok && other != k {
			t.Fatalf("NameFor(%q) = NameFor(%q) = %q", k, other, n)
		}
		names[n] = k
	}
}

func TestNameForLocksEachKey(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	a, _ := baton.NewMutex(store, "orders."+baton.NameFor("Ann@x.io"))
	b, _ := baton.NewMutex(store, "orders."+baton.NameFor("ann-x.io"))
	la, err := a.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	lb, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("another key's lock: %v", err)
	}
	defer lb.Unlock(ctx)
	again, _ := baton.NewMutex(store, "orders."+baton.NameFor("Ann@x.io"))
	if _, err := again.TryLock(ctx); !errors.Is(err, baton.ErrHeld) {
		t.Fatalf("the same key's lock: %v, want ErrHeld", err)
	}
}

// A lock per entity, named from data that is no valid lock name: NameFor
// maps the key, and a prefix keeps this kind of entity apart from others.
func ExampleNameFor() {
	store := memstore.New()
	customer := "Ann.Lee@Example.com"
	mu, err := baton.NewMutex(store, "customers."+baton.NameFor(customer))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.Lock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	fmt.Println(lease.Name())
	// Output: customers.ann-lee-example-com-rhn7grkoowojq7f5q7qtljjxwu
}

// A name refused for its characters or length, as names made from data
// are, says how to make one from any key.
func TestInvalidNameSaysNameFor(t *testing.T) {
	store := memstore.New()
	for _, name := range []string{"Order-8812", "ann@x.io", strings.Repeat("a", baton.MaxNameLength+1)} {
		_, errM := baton.NewMutex(store, name)
		_, errS := baton.NewSemaphore(store, name, 2)
		_, errE := baton.NewElector(store, name)
		for _, err := range []error{errM, errS, errE} {
			if !errors.Is(err, baton.ErrInvalidName) || !strings.Contains(err.Error(), "baton.NameFor(key)") {
				t.Errorf("%q: %v, want ErrInvalidName naming baton.NameFor(key)", name, err)
			}
		}
	}
}
