//go:build !race

package aesni

const raceEnabled = false
