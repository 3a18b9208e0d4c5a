//go:build linux

package safety

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// annotating starts another writer that annotates the lock's object every
// tenth of the TTL, as a controller or a GitOps tool re-applying its
// labels would: writes that change no claim, so they renew nothing. A
// Kubernetes contender judges a claim expired once it has seen it
// unchanged for its lease duration; when any write to the object counted
// as a change, a crashed holder's lock went to nobody for as long as the
// writing went on (kubestore's TestOtherWriterKeepsNoDeadClaim). The row
// kills holders meanwhile: its liveness bound is the check. It returns
// the function that stops the writer; the row fails if a write fails.
func (h *harness) annotating() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		writes int
	)
	wg.Go(func() {
		t := time.NewTicker(h.be.ttl / 10)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := h.be.annotate(ctx, h.sc.lock, i)
			mu.Lock()
			switch {
			case err == nil:
				writes++
			case ctx.Err() == nil && !apierrors.IsNotFound(err):
				errs = append(errs, fmt.Errorf("annotation %d: %w", i, err))
			}
			mu.Unlock()
		}
	})
	return func() {
		cancel()
		wg.Wait()
		h.t.Logf("another writer annotated the lock's object %d times", writes)
		if err := errors.Join(errs...); err != nil {
			h.t.Errorf("annotating the lock's object: %v", err)
		}
	}
}
