package ike

import (
	"crypto/rand"
	"io"
	"testing"
)

func randReader() io.Reader { return rand.Reader }

// FuzzParse feeds arbitrary bytes to the message parser: it returns a
// message or an error, never panics, and what it returns encodes again.
func FuzzParse(f *testing.F) {
	m := &Message{Header: Header{SPIi: 1, Exchange: IKESAInit, Flags: FlagInitiator}, Payloads: samplePayloads()}
	b, _ := m.Marshal()
	f.Add(b)
	f.Add(b[:40])
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		if _, err := m.Marshal(); err != nil && m.sk == nil {
			t.Fatalf("a parsed message does not encode: %v", err)
		}
	})
}
