//go:build race

package main

// raceEnabled: under the race detector this test process is several times
// its usual size, and a child it starts counts the parent's memory in its
// own peak RSS (the child begins as a vfork of the parent), so peak RSS
// measures mean nothing under it.
const raceEnabled = true
