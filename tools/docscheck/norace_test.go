//go:build !race

package docscheck

// raceEnabled reports whether the test was built with -race.
const raceEnabled = false
