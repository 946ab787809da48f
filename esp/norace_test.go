//go:build !race

package esp_test

const raceEnabled = false
