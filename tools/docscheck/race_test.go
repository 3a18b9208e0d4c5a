//go:build race

package docscheck

// raceEnabled reports whether the test was built with -race: go list then
// asks for the export data of race builds, which the test's build cached.
const raceEnabled = true
