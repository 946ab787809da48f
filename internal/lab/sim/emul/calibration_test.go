package emul_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/sim/emul"
	"github.com/espgw/espgw/internal/lab/speed"
)

// calibrationTolerance is the target for every cell. The model is
// within ±10% of every cell (see the package doc); short runs of a model
// with random service times add a few percent of noise on top.
const calibrationTolerance = 0.15

// TestCalibration runs `espgw speed` (package speed, modelled clock, short
// runs) on the emulated engines and compares every cell with the table.
func TestCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("calibration takes about half a minute")
	}
	if raceEnabled {
		t.Skip("too few ops under the race detector to judge a cell; run without -race")
	}
	for _, row := range emul.PublishedTables() {
		t.Run(fmt.Sprintf("%s/%s/multi=%d/batch=%d", "emul:"+row.Profile, row.Alg, row.Multi, max(1, row.Batch)), func(t *testing.T) {
			alg, err := speed.ParseAlg(row.Alg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := speed.Run(context.Background(), speed.Config{
				Algs: []speed.Alg{alg}, Engine: "emul:" + row.Profile, Multi: row.Multi, Batch: row.Batch,
				Duration: 400 * time.Millisecond, Sizes: row.Sizes,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Timing != "modelled" {
				t.Fatalf("timing %q, want modelled", res.Timing)
			}
			tol := calibrationTolerance
			if row.Tolerance > 0 {
				tol = row.Tolerance
			}
			for i, want := range row.KBps {
				got := res.Rows[0].KBps[i]
				dev := got/want - 1
				if slices.Contains(row.Unfitted, res.Sizes[i]) {
					t.Logf("%6d bytes: %12.2fk, table %12.2fk, %+5.1f%% (a cell outside the model)", res.Sizes[i], got, want, 100*dev)
					continue
				}
				t.Logf("%6d bytes: %12.2fk, table %12.2fk, %+5.1f%%", res.Sizes[i], got, want, 100*dev)
				if math.Abs(dev) > tol {
					t.Errorf("%d bytes: %.2fk is %+.1f%% off the table's %.2fk", res.Sizes[i], got, 100*dev, want)
				}
			}
		})
	}
}
