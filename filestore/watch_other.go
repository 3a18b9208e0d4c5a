//go:build !linux

package filestore

import (
	"context"
	"fmt"
	"runtime"

	"github.com/baton-go/baton/backend"
)

// Watch implements backend.Watcher. Change notification is implemented only
// on Linux (inotify); elsewhere Watch returns an error and the engine polls.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := backend.ValidateName(key); err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	return nil, fmt.Errorf("file: watching is not supported on %s; poll instead", runtime.GOOS)
}
