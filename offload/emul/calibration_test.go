package emul_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/speed"
)

// published are the tables the profiles were calibrated against, in 1000s
// of bytes per second at 16, 64, 256, 1024 and 8192 bytes.
var published = []struct {
	engine, alg string
	multi       int
	kbps        [5]float64
}{
	{"emul:ubsec-2014", "aes-128-cbc", 1, [5]float64{583.00, 2316.23, 7995.65, 25280.62, 80001.28}},
	{"emul:ubsec-2014", "aes-128-cbc", 4, [5]float64{2128.38, 8704.95, 30407.37, 68008.22, 140479.50}},
	{"emul:ubsec-2014", "aes-128-cbc", 8, [5]float64{3030.23, 12113.82, 40796.43, 66674.68, 140332.70}},
	{"emul:ubsec-2014", "aes-128-cbc", 16, [5]float64{3574.88, 14659.51, 44433.10, 81677.83, 138982.24}},
	{"emul:ubsec-2014", "des-ede3-cbc", 1, [5]float64{562.47, 2247.68, 7740.48, 24370.21, 76057.69}},
	{"emul:ubsec-2014", "aes-192-cbc", 1, [5]float64{583.69, 2304.12, 7840.50, 24367.24, 73216.34}},
	{"emul:ubsec-2014", "aes-256-cbc", 1, [5]float64{586.60, 2223.53, 7567.24, 23016.65, 66662.74}},
	{"emul:t4", "aes-128-cbc", 1, [5]float64{413248.17, 784163.48, 1008435.11, 1061075.63, 1103601.66}},
	{"emul:t4-software", "aes-128-cbc", 1, [5]float64{85871.89, 92796.71, 98383.53, 100017.49, 100256.43}},
}

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
	for _, row := range published {
		t.Run(fmt.Sprintf("%s/%s/multi=%d", row.engine, row.alg, row.multi), func(t *testing.T) {
			alg, err := speed.ParseAlg(row.alg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := speed.Run(context.Background(), speed.Config{
				Algs: []speed.Alg{alg}, Engine: row.engine, Multi: row.multi,
				Seconds: 400 * time.Millisecond, Sizes: []int{16, 64, 256, 1024, 8192},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Timing != "modelled" {
				t.Fatalf("timing %q, want modelled", res.Timing)
			}
			for i, want := range row.kbps {
				got := res.Rows[0].KBps[i]
				dev := got/want - 1
				t.Logf("%6d bytes: %12.2fk, table %12.2fk, %+5.1f%%", res.Sizes[i], got, want, 100*dev)
				if math.Abs(dev) > calibrationTolerance {
					t.Errorf("%d bytes: %.2fk is %+.1f%% off the table's %.2fk", res.Sizes[i], got, 100*dev, want)
				}
			}
		})
	}
}
