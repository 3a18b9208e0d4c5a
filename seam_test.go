package baton_test

import (
	"errors"
	"testing"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
)

// TestSeamErrorsAreOneValue: the errors the root re-exports are the seam's
// values, so a user matching baton.ErrX catches what a store returned as
// backend.ErrX.
func TestSeamErrorsAreOneValue(t *testing.T) {
	for _, tc := range []struct{ root, seam error }{
		{baton.ErrHeld, backend.ErrHeld},
		{baton.ErrLost, backend.ErrLost},
		{baton.ErrNotFound, backend.ErrNotFound},
		{baton.ErrInvalidName, backend.ErrInvalidName},
		{baton.ErrInvalidOptions, backend.ErrInvalidOptions},
		{baton.ErrCorruptRecord, backend.ErrCorruptRecord},
		{baton.ErrForbidden, backend.ErrForbidden},
		{baton.ErrUnavailable, backend.ErrUnavailable},
		{baton.ErrMisconfigured, backend.ErrMisconfigured},
	} {
		if tc.root != tc.seam || !errors.Is(tc.seam, tc.root) {
			t.Errorf("baton's %q is not backend's", tc.root)
		}
	}
	var held *baton.HeldError = &backend.HeldError{Key: "k"}
	if !errors.Is(held, baton.ErrHeld) {
		t.Errorf("a backend.HeldError does not match baton.ErrHeld")
	}
}
