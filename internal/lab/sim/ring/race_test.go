//go:build race

package ring_test

// raceEnabled: the race detector allocates on synchronisation, so the
// allocation test runs only without it.
const raceEnabled = true
