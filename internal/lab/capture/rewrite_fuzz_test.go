package capture

import (
	"bytes"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Any IP-ish bytes in a raw capture: Read and Rewrite return packets or an
// error, never panic, and every record is a packet or a counted skip.
func FuzzReadRewrite(f *testing.F) {
	for _, fr := range fragmentsSeed() {
		f.Add(fr)
	}
	f.Add([]byte{0x60, 0, 0, 0, 0, 8, 0, 64})
	f.Add([]byte{0x45, 0, 0, 20})
	f.Fuzz(func(t *testing.T, ip []byte) {
		var buf bytes.Buffer
		w := pcapgo.NewWriter(&buf)
		w.WriteFileHeader(65535, layers.LinkTypeRaw)
		for i := 0; i < 2; i++ {
			w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(ip), Length: len(ip)}, ip)
		}
		frames, st, err := ReadAll(&buf, "fuzz.pcap")
		if err != nil {
			return
		}
		skipped := 0
		for _, n := range st.Skipped {
			skipped += n
		}
		if st.Packets+skipped != st.Frames || len(frames) != st.Packets {
			t.Fatalf("read stats %+v for %d frames", st, len(frames))
		}
		pkts, st2, err := Rewrite(frames, topo, RewriteOptions{})
		if err != nil {
			return
		}
		skipped = 0
		for _, n := range st2.Skipped {
			skipped += n
		}
		if len(pkts)+skipped != len(frames) {
			t.Fatalf("rewrite: %d packets + %d skipped != %d frames", len(pkts), skipped, len(frames))
		}
	})
}

func fragmentsSeed() [][]byte {
	var out [][]byte
	for _, v6 := range []bool{false, true} {
		tb := &testing.T{}
		for _, f := range fragments(tb, v6, 1400, 600) {
			out = append(out, f.IP)
		}
	}
	return out
}
