package backend_test

import (
	"errors"
	"fmt"

	"github.com/baton-go/baton/backend"
)

// A store reports a lock held by another owner with a *HeldError, wrapped
// with its own context; callers match it with errors.Is and errors.As.
func ExampleHeldError() {
	err := fmt.Errorf("mystore: acquire %q: %w", "nightly",
		&backend.HeldError{Key: "nightly", Holder: "pod-a", Token: 7})
	var held *backend.HeldError
	fmt.Println(errors.Is(err, backend.ErrHeld), errors.As(err, &held), held.Holder)
	// Output: true true pod-a
}
