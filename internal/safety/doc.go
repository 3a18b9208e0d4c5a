// Package safety holds baton's fault-injection suite (its tests only): K
// contender processes lock one name on a real store and do read-modify-write
// increments on a fenced register and on an unfenced counter served by the
// test, while the test pauses (SIGSTOP), kills (SIGKILL) or partitions the
// holder, restarts the store, drifts the contenders' clocks or throttles the
// Kubernetes API. A checker then reads the recorded history: no stale write
// accepted, tokens strictly increasing, never two holders as the register
// sees them, linearizable register history (porcupine), and a standby that
// takes over within the store's claim lifetime plus the retry period.
//
// Run the short mode with
//
//	go test -race ./internal/safety
//
// and the long mode with -safety.long (or BATON_SAFETY_LONG=1); -safety.seed
// replays a run, BATON_SAFETY_REPORT=path writes the Markdown table.
package safety
