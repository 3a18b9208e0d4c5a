package redisstore

// QueueKeys returns the keys of name's FIFO of waiters: queue, queued, next.
func QueueKeys(s *Store, name string) []string { return s.queueKeys(name) }
