package espgw_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/scenario"
)

// TestScenarios runs every bundled scenario (scenarios/*.yaml, each matrix
// combination as its own subtest) on its own test bed and fails on any
// failed expectation, printing the scenario's verdict table.
func TestScenarios(t *testing.T) {
	needRoot(t)
	files, err := scenario.Files([]string{"scenarios"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		scs, err := scenario.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scs {
			t.Run(s.Name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				r := scenario.Run(ctx, s, scenario.Options{Binary: binary, Prefix: "it"})
				if !r.Pass {
					var b strings.Builder
					scenario.PrintTable(&b, []*scenario.Result{r})
					t.Errorf("scenario %s (%s) failed:\n%s", s.Name, f, b.String())
				}
			})
		}
	}
}
