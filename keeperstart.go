package baton

import (
	"container/heap"
	"sync"
	"time"
)

// keeperStarts starts the keepers of one Mutex's leases at their first
// renew, on one shared timer of the real clock.
//
// A lease's keeper has nothing to do before its first renew, and most short
// tenures end before then, so a lease never starts a goroutine until that
// time. A timer per lease (time.AfterFunc) would cost every tenure a runtime
// timer insertion that wakes the network poller and another thread: on a
// small machine, about a tenth of an uncontended Lock/Unlock cycle's CPU.
// Leases of one Mutex are mostly acquired one after another, so each new
// lease's start time is later than the armed timer's: adding it only pushes
// it onto a heap, and an Unlock only removes it. The timer is re-armed when
// it fires (at most once per renew interval while leases come and go) or when
// a lease needs an earlier start than the armed one.
//
// A fake clock (tests) keeps one AfterFunc per lease (see newLease), so that
// tests counting the clock's waiters see what they expect.
type keeperStarts struct {
	mu    sync.Mutex
	q     startQueue
	timer *time.Timer // nil until the first lease
	at    time.Time   // when timer fires; zero while it is not armed
}

// add schedules l's keeper to start at l.startAt.
func (s *keeperStarts) add(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heap.Push(&s.q, l)
	switch {
	case s.timer == nil:
		s.timer = time.AfterFunc(time.Until(l.startAt), s.fire)
	case s.at.IsZero() || l.startAt.Before(s.at):
		s.timer.Reset(time.Until(l.startAt))
	default:
		return // the armed timer fires first and re-arms for l
	}
	s.at = l.startAt
}

// remove unschedules l. It reports false if l's keeper was started (or is
// about to be): then the keeper runs and closes keeperDone itself.
func (s *keeperStarts) remove(l *Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.startIdx < 0 {
		return false
	}
	heap.Remove(&s.q, l.startIdx)
	return true
}

// fire starts the keepers that are due and re-arms the timer for the next.
// It runs in the timer's own goroutine. A fire for a lease that was removed
// meanwhile finds nothing due and only re-arms.
func (s *keeperStarts) fire() {
	s.mu.Lock()
	now := time.Now()
	var due []*Lease
	for len(s.q) > 0 && !s.q[0].startAt.After(now) {
		due = append(due, heap.Pop(&s.q).(*Lease))
	}
	s.at = time.Time{}
	if len(s.q) > 0 {
		s.at = s.q[0].startAt
		s.timer.Reset(s.at.Sub(now))
	}
	s.mu.Unlock()
	for _, l := range due {
		go l.keep()
	}
}

// startQueue is a min-heap of leases by startAt; startIdx is each lease's
// index, -1 once it left the heap.
type startQueue []*Lease

func (q startQueue) Len() int           { return len(q) }
func (q startQueue) Less(i, j int) bool { return q[i].startAt.Before(q[j].startAt) }
func (q startQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].startIdx, q[j].startIdx = i, j
}
func (q *startQueue) Push(x any) {
	l := x.(*Lease)
	l.startIdx = len(*q)
	*q = append(*q, l)
}
func (q *startQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	l.startIdx = -1
	return l
}
