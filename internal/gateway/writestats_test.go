package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/espgw/espgw/esp"
)

// TestWriteStatsAsEncoder: the SA-at-a-time /stats writer gives exactly
// what json.Encoder gives, with no SAs, one, and many.
func TestWriteStatsAsEncoder(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 3, 1000} {
		st := Stats{TunIn: 7, Drops: map[string]uint64{"no-sa": 2}, Engine: EngineStats{}}
		if n >= 0 {
			st.SAs = []SAStats{}
		}
		for i := range n {
			st.SAs = append(st.SAs, SAStats{SPI: fmt.Sprintf("%#x", 0x1000+i), Direction: "out", LastSeq: uint64(i),
				Snapshot: esp.Snapshot{SealedPackets: uint64(i), Drops: map[string]uint64{"replay": uint64(i)}}})
		}
		var want, got bytes.Buffer
		if err := json.NewEncoder(&want).Encode(st); err != nil {
			t.Fatal(err)
		}
		if err := writeStats(&got, st); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%d SAs: writeStats gave\n%.300s\nwant\n%.300s", n, got.Bytes(), want.Bytes())
		}
	}
}
