package gocronlock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/baton-go/baton/adapter/gocronlock"
)

// An Elector over a nil *baton.Elector (baton.NewElector failed and its
// error was not checked, as in a shortened snippet) answers with an error
// that says so instead of panicking in gocron's goroutine.
func TestElectorNil(t *testing.T) {
	e := gocronlock.NewElector(nil)
	if err := e.IsLeader(context.Background()); err == nil || !strings.Contains(err.Error(), "baton.NewElector") {
		t.Errorf("IsLeader = %v, want an error naming baton.NewElector", err)
	}
	if err := e.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "baton.NewElector") {
		t.Errorf("Run = %v, want an error naming baton.NewElector", err)
	}
	if term := e.Term(); term != nil {
		t.Errorf("Term = %v, want nil", term)
	}
}
