package ike

import (
	"context"
	"net/netip"
	"testing"

	"github.com/espgw/espgw/internal/lab/certgen"
)

// BenchmarkSetup times IKE_SA_INIT and IKE_AUTH with the first CHILD_SA
// between two endpoints in memory (aes128gcm16-x25519), both sides'
// work, with a PSK and with certificates of each key type; the PSK run
// is the reference the others are read against.
func BenchmarkSetup(b *testing.B) {
	for _, c := range []struct {
		name string
		kt   certgen.KeyType
	}{{"psk", ""}, {"rsa-2048", certgen.RSA}, {"ecdsa-p256", certgen.ECDSA256}, {"ed25519", certgen.Ed25519}} {
		b.Run(c.name, func(b *testing.B) {
			ic, rc := testConfigs(b, "aes128gcm16-x25519", "aes128gcm16")
			if c.kt != "" {
				ic, rc, _ = certConfigs(b, c.kt)
				ic.IKE, _ = ParseProposals(ProtoIKE, "aes128gcm16-x25519")
				rc.IKE = ic.IKE
			}
			for b.Loop() {
				i, r := linked(b, ic, rc)
				if _, err := i.Initiate(context.Background(), netip.AddrPortFrom(r.local, Port)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
