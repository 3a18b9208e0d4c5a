package baton

// KeeperTimerArmed reports, for tests, whether m's shared keeper-start
// timer is armed (see keeperStarts): tests wait for it to fire instead of
// sleeping.
func KeeperTimerArmed(m *Mutex) bool {
	m.starts.mu.Lock()
	defer m.starts.mu.Unlock()
	return !m.starts.at.IsZero()
}
