//go:build !race

package emul_test

const raceEnabled = false
