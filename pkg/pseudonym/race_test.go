//go:build race

package pseudonym_test

// raceEnabled: the race detector makes sync.Pool drop what it is given
// now and then, so allocation counts say nothing under it.
const raceEnabled = true
