package capture

// FuzzCapture feeds arbitrary bytes to the capture reader, and every IP
// packet found to the opener and the sealer: bad input must give an error
// or a count, never a panic.
//
//	go test ./internal/capture -run '^$' -fuzz FuzzCapture -fuzztime 30s

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/espgw/espgw/sa"
)

func FuzzCapture(f *testing.F) {
	dir := f.TempDir()
	cfgs := []*sa.SA{
		randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 16}, sa.Tunnel, false, sa.EncapUDP),
		randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESGCM16}, 20}, sa.Transport, true, sa.EncapNone),
	}
	// Seeds: a sealed raw capture, a pcapng Ethernet capture, garbage.
	sealedPath := filepath.Join(dir, "sealed.pcap")
	{
		in := filepath.Join(dir, "in.pcap")
		writeRawSeed(f, in)
		saFile := filepath.Join(dir, "sa.yaml")
		if err := sa.WriteFile(saFile, &sa.Config{SAs: cfgs[:1]}); err != nil {
			f.Fatal(err)
		}
		if _, err := SealFile(context.Background(), Options{SAFile: saFile}, in, sealedPath); err != nil {
			f.Fatal(err)
		}
	}
	seed, err := os.ReadFile(sealedPath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	writeNg(f, filepath.Join(dir, "ng.pcapng"), true, []int{60, 200})
	ng, err := os.ReadFile(filepath.Join(dir, "ng.pcapng"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ng)
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0})
	f.Add([]byte("not a capture"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data), "fuzz.pcap")
		if err != nil {
			return
		}
		sas := newSAs(t, cfgs...)
		o, err := NewOpener(sas)
		if err != nil {
			t.Fatal(err)
		}
		z := NewSealer(sas[0])
		for i := 0; i < 64; i++ {
			fr, err := r.Next()
			if errors.Is(err, io.EOF) || err != nil {
				return
			}
			if fr.Skip != NotSkipped {
				continue
			}
			if _, err := o.Open(context.Background(), fr.IP); err != nil {
				t.Fatal(err)
			}
			z.Seal(context.Background(), fr.IP)
		}
	})
}

func writeRawSeed(f *testing.F, path string) {
	var pkts [][]byte
	for i, n := range []int{20, 100, 600} {
		pkts = append(pkts, udpPacket(false, n, uint16(i)))
	}
	if err := WriteFile(path, LinkRaw, pkts); err != nil {
		f.Fatal(err)
	}
}
