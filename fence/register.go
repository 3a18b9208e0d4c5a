package fence

import "sync"

// Register is an in-memory fence for resources that one process alone
// writes: a local file, a cache, a test double of a remote service. It
// remembers the largest token accepted per name and rejects smaller ones.
//
// It is single-process: its memory is the only record of the tokens, so it
// fences only writers inside this process (goroutines holding leases of
// a shared lock, or a process that acts for paused remote holders, as a
// proxy in front of a resource does), and it forgets everything when the
// process exits. A resource that outlives the process, or that other
// processes write, needs the token stored next to the data (SQLGuard).
//
// The zero value is ready to use. Methods are safe for concurrent use.
type Register struct {
	mu  sync.Mutex
	top map[string]uint64
}

// Write records token for name if it is at least the largest token
// accepted for name so far (an equal token is the same holder writing
// again), and otherwise returns an error matching ErrStaleToken.
func (r *Register) Write(name string, token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accept(name, token)
}

// Do runs write if token is not stale for name, holding the Register's
// lock while write runs (for every name: keep write short), so that no
// write with a smaller token can run beside it or start after it. The token is recorded
// only if write returns nil. A stale token returns an error matching
// ErrStaleToken without calling write. write must not call r's methods
// (a Do of another name included): they wait for the lock that Do holds,
// for ever. Fence two resources with two Registers, or one Do whose write
// updates both.
func (r *Register) Do(name string, token uint64, write func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if top, ok := r.top[name]; ok && token < top {
		return &StaleTokenError{Name: name, Token: token, Stored: top, Known: true}
	}
	if err := write(); err != nil {
		return err
	}
	return r.accept(name, token)
}

// Token returns the largest token accepted for name, and whether any was.
func (r *Register) Token(name string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.top[name]
	return t, ok
}

func (r *Register) accept(name string, token uint64) error {
	if top, ok := r.top[name]; ok && token < top {
		return &StaleTokenError{Name: name, Token: token, Stored: top, Known: true}
	}
	if r.top == nil {
		r.top = make(map[string]uint64)
	}
	r.top[name] = token
	return nil
}
