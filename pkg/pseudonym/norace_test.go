//go:build !race

package pseudonym_test

const raceEnabled = false
