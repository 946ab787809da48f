//go:build race

package control_test

// The race detector's shadow memory follows the heap and is not given back
// with it, so resident-set bounds mean nothing under it.
const raceEnabled = true
