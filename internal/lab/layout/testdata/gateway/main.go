// Command gateway is espgw's gateway commands alone, on the product's
// engines: what `espgw run` links, built by the layout test for go version -m.
package main

import (
	"fmt"
	"os"

	"github.com/espgw/espgw/internal/cli"
	"github.com/espgw/espgw/offload/engines"
)

func main() {
	if err := cli.Root(engines.Product{}).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "espgw:", err)
		os.Exit(1)
	}
}
