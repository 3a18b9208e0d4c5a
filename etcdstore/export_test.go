package etcdstore

// NextInLine reports, for tests, what s knows of holder's place in the fair
// queue of name: whether the place is next in line with its claim watch
// established, whether it knows the waiter behind it (for its release to
// hand over to), and whether a claim handed to it arrived on that watch.
// Tests wait for these instead of sleeping.
func NextInLine(s *Store, name, holder string) (watching, knowsNext, handed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[entryKey{name, holder}]
	if e == nil {
		return false, false, false
	}
	f := s.followers[name]
	return e.first && f != nil && f.claimUp, e.next != nil, e.handed != nil
}
