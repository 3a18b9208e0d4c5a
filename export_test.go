package baton

import "time"

// KeeperTimerArmed reports, for tests, whether m's shared keeper-start
// timer is armed (see keeperStarts): tests wait for it to fire instead of
// sleeping.
func KeeperTimerArmed(m *Mutex) bool {
	m.starts.mu.Lock()
	defer m.starts.mu.Unlock()
	return !m.starts.at.IsZero()
}

// SetReleaseTimeout sets, for tests, how long e's Run waits for a release
// (5 s otherwise), so that a test of a store that never answers one does
// not wait 5 s of real time.
func SetReleaseTimeout(e *Elector, d time.Duration) { e.mu.cfg.releaseTimeout = d }
