package fence_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/baton-go/baton/fence"
)

func TestRegisterWrite(t *testing.T) {
	var r fence.Register
	if _, ok := r.Token("a"); ok {
		t.Fatal("zero Register has a token")
	}
	for _, tok := range []uint64{3, 3, 5} {
		if err := r.Write("a", tok); err != nil {
			t.Fatalf("Write(a, %d) = %v", tok, err)
		}
	}
	err := r.Write("a", 4)
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Write(a, 4) after 5 = %v; want ErrStaleToken", err)
	}
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Name != "a" || stale.Token != 4 || stale.Stored != 5 || !stale.Known {
		t.Fatalf("error = %#v", stale)
	}
	if got, want := err.Error(), `fence: stale fencing token for "a": 4 rejected, 5 already accepted`; got != want {
		t.Fatalf("Error() = %q; want %q", got, want)
	}
	if tok, _ := r.Token("a"); tok != 5 {
		t.Fatalf("Token(a) = %d; want 5", tok)
	}
	// Names are independent.
	if err := r.Write("b", 1); err != nil {
		t.Fatalf("Write(b, 1) = %v", err)
	}
}

func TestRegisterDo(t *testing.T) {
	var r fence.Register
	data := ""
	write := func(s string) func() error { return func() error { data = s; return nil } }
	if err := r.Do("f", 2, write("two")); err != nil {
		t.Fatal(err)
	}
	if err := r.Do("f", 1, write("one")); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Do(f, 1) = %v; want ErrStaleToken", err)
	}
	if data != "two" {
		t.Fatalf("data = %q; the stale write ran", data)
	}
	// A failed write does not record its token.
	boom := errors.New("boom")
	if err := r.Do("f", 9, func() error { return boom }); err != boom {
		t.Fatalf("Do = %v; want boom", err)
	}
	if tok, _ := r.Token("f"); tok != 2 {
		t.Fatalf("Token after failed write = %d; want 2", tok)
	}
	if err := r.Do("f", 3, write("three")); err != nil || data != "three" {
		t.Fatalf("Do(f, 3) = %v, data %q", err, data)
	}
}

// Concurrent writers with random tokens: the effects applied happen in
// non-decreasing token order, and the last one is the largest accepted.
func TestRegisterConcurrent(t *testing.T) {
	var r fence.Register
	var applied []uint64 // guarded by r's lock through Do
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tok := rand.Uint64N(1000) + 1
				err := r.Do("c", tok, func() error { applied = append(applied, tok); return nil })
				if err != nil && !errors.Is(err, fence.ErrStaleToken) {
					t.Errorf("Do: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("write %d with token %d applied after token %d", i, applied[i], applied[i-1])
		}
	}
	top, _ := r.Token("c")
	if len(applied) == 0 || applied[len(applied)-1] != top {
		t.Fatalf("last applied %v, register %d", applied[len(applied)-1:], top)
	}
}
