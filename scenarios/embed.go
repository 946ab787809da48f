// Package scenarios holds the bundled scenario files and the captures they
// replay.
//
// It holds espgw's bundled scenario files and the captures they replay,
// embedded so that an installed binary (espgw scenario run --bundled, espgw
// demo) carries them. The format is documented in README.md;
// internal/lab/scenario reads and runs them.
package scenarios

import "embed"

// Bundled holds the scenario files (*.yaml) and pcaps/*.pcap.
//
//go:embed *.yaml pcaps/*.pcap
var Bundled embed.FS
