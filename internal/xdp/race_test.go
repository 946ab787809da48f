//go:build race

package xdp

// The race detector makes sync.Pool (used by x/net's WriteBatch) drop items
// at random, so allocation counts mean nothing under it.
const raceEnabled = true
