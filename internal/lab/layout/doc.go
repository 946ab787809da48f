// Package layout holds the test that keeps the product apart from the lab.
//
// The product is every package of the module outside internal/lab/,
// cmd/espgw (which composes the product with the lab's commands and
// emulated cards) and scenarios (the lab's bundled scenario files). No
// product package may import the lab or the libraries only the lab uses
// (plotting, gopacket, the progress bar, the browser driver, histograms).
// The espgw run path is package internal/cli, which the rule covers; the
// espgw binary itself also holds the lab's commands, so the test builds
// testdata/gateway (cli on the product's engines alone) and reads what it
// links with go version -m.
package layout
