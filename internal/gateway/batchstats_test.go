package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// A train of packets that arrives at once reaches the engine as one batch
// each way, and /stats and /metrics say so.
func TestTrainReachesEngineAsBatch(t *testing.T) {
	for _, suite := range []sa.Suite{{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, {Cipher: sa.CipherAESGCM16}} {
		t.Run(suite.String(), func(t *testing.T) {
			const train = 32
			b := newBed(t, cpu.New(), pairSAs(suite, 1024))
			pkts := make([][]byte, train)
			for i := range pkts {
				pkts[i] = ipv4UDP(1000, uint16(i))
			}
			if err := b.dev1.SendAll(pkts); err != nil {
				t.Fatal(err)
			}
			bufs, sizes := make([][]byte, train), make([]int, train)
			for i := range bufs {
				bufs[i] = make([]byte, 2000)
			}
			for got := 0; got < train; {
				n, err := b.dev2.Receive(bufs, sizes)
				if err != nil {
					t.Fatal(err)
				}
				got += n
			}
			want := gateway.BatchStats{Batches: 1, Ops: train, Mean: train, Sizes: []gateway.BatchBucket{{Min: 32, Max: 63, Batches: 1}}}
			var out, in gateway.Stats
			if err := json.Unmarshal([]byte(getPage(t, b.gw1, "/stats")), &out); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(getPage(t, b.gw2, "/stats")), &in); err != nil {
				t.Fatal(err)
			}
			if got := out.Batches.Outbound; !batchEqual(got, want) {
				t.Errorf("gw1 outbound batches %+v, want %+v", got, want)
			}
			if got := in.Batches.Inbound; !batchEqual(got, want) {
				t.Errorf("gw2 inbound batches %+v, want %+v", got, want)
			}
			if got := out.Batches.Inbound; got.Batches != 0 {
				t.Errorf("gw1 inbound batches %+v, want none", got)
			}
			m := getPage(t, b.gw2, "/metrics")
			for _, line := range []string{
				`espgw_engine_batch_ops_bucket{direction="in",le="31"} 0`,
				`espgw_engine_batch_ops_bucket{direction="in",le="63"} 1`,
				`espgw_engine_batch_ops_sum{direction="in"} 32`,
				`espgw_engine_batch_ops_count{direction="in"} 1`,
				`espgw_engine_batch_ops_count{direction="out"} 0`,
			} {
				if !strings.Contains(m, line+"\n") {
					t.Errorf("/metrics lacks %q", line)
				}
			}
		})
	}
}

func batchEqual(a, b gateway.BatchStats) bool {
	if a.Batches != b.Batches || a.Ops != b.Ops || a.Mean != b.Mean || len(a.Sizes) != len(b.Sizes) {
		return false
	}
	for i := range a.Sizes {
		if a.Sizes[i] != b.Sizes[i] {
			return false
		}
	}
	return true
}
