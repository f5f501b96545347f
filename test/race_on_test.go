//go:build race

package test

// raceEnabled reports that the tests were built with the race detector.
const raceEnabled = true
