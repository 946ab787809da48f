package strongswan

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/netns"
)

// BenchmarkIKESetup is one tunnel set up and torn down per op (IKE_SA_INIT,
// IKE_AUTH with the first CHILD_SA, INFORMATIONAL Delete), espgw's ike
// initiating on gw1, against charon responding on gw2 and against espgw's
// own responder there, in one run: IKE aes128-sha256-x25519, ESP
// aes128gcm16, a PSK. Compare the two ns/op figures of the same run.
func BenchmarkIKESetup(b *testing.B) {
	if err := CheckInstalled(); err != nil {
		b.Fatal(err)
	}
	topo, err := netns.NewTopology("ib", netns.TopologyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	local, remote := a.GW1WAN4.Addr(), a.GW2WAN4.Addr()
	const secret = "an IKE benchmark's pre-shared key"
	cfgFor := func(id, peer string, lts, rts netip.Prefix) ike.Config {
		ikeP, _ := ike.ParseProposals(ike.ProtoIKE, "aes128-sha256-x25519")
		espP, _ := ike.ParseProposals(ike.ProtoESP, "aes128gcm16")
		return ike.Config{LocalID: ike.FQDN(id), RemoteID: ike.FQDN(peer), PSK: []byte(secret), IKE: ikeP, ESP: espP,
			LocalTS: []ike.Selector{ike.PrefixSelector(lts)}, RemoteTS: []ike.Selector{ike.PrefixSelector(rts)}}
	}
	endpoint := func(ns *netns.Namespace, addr netip.Addr, cfg ike.Config) (*ike.Endpoint, func()) {
		var tr *ike.Transport
		if err := ns.Do(func() (err error) { tr, err = ike.Listen(addr); return err }); err != nil {
			b.Fatal(err)
		}
		ep, err := ike.NewEndpoint(cfg, addr, tr.Send)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { tr.Serve(ctx, ep); close(done) }()
		return ep, func() { cancel(); tr.Close(); <-done }
	}
	initiator, stop := endpoint(topo.GW1, local, cfgFor("gw1", "gw2", a.LANA4, a.LANB4))
	defer stop()
	setup := func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for b.Loop() {
			s, err := initiator.Initiate(ctx, netip.AddrPortFrom(remote, ike.Port))
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Delete(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("charon-responder", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ch, err := Start(ctx, Config{NS: topo.GW2, Dir: filepath.Join(b.TempDir(), "gw2"), Local: remote, Remote: local,
			LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: secret, IKE: "aes128-sha256-x25519", ESP: "aes128gcm16"})
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Kill()
		if err := ch.WaitConnection(ctx, 20*time.Second); err != nil {
			b.Fatal(err)
		}
		setup(b)
	})
	b.Run("espgw-responder", func(b *testing.B) {
		_, stop := endpoint(topo.GW2, remote, cfgFor("gw2", "gw1", a.LANB4, a.LANA4))
		defer stop()
		setup(b)
	})
}
