//go:build race

package emul_test

// raceEnabled: under the race detector the ciphers run so slowly that a
// short calibration run counts too few ops to judge a table cell.
const raceEnabled = true
