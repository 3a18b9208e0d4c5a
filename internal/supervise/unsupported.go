//go:build !unix

package supervise

// The baton command supervises CMD through Unix process groups and
// signals (setpgid, kill of a whole group, SIGCHLD), which this system
// does not have, so it builds on Unix-like systems only. The library
// packages (baton, its stores, schedule, fence, the adapters) build
// everywhere.
var _ int = "the baton command builds on Unix-like systems only (Linux, macOS, the BSDs); the library packages build everywhere"
