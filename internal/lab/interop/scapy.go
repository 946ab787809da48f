package interop

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/espgw/espgw/internal/lab/scapy"
	"github.com/espgw/espgw/sa"
)

// ScapyPeerConfig places a scapy ESP responder: a far gateway that
// answers ICMP echo requests for its addresses through the tunnel.
type ScapyPeerConfig struct {
	// Netns is the namespace it runs in; Iface the interface there that
	// carries the tunnel's outer packets.
	Netns, Iface string
	// Local is its outer address (the Dst of the SAs toward it).
	Local netip.Addr
	// Owned are the inner addresses it answers pings for, besides Local.
	Owned []netip.Addr
}

// ScapyPeer is a running scapy responder (see StartScapyPeer).
type ScapyPeer struct{ p *scapy.Peer }

// ScapyCounters are what the responder saw.
type ScapyCounters struct {
	Received      uint64 `json:"received"` // ESP packets for its address
	Opened        uint64 `json:"opened"`   // ICV verified, decrypted
	OpenedBytes   uint64 `json:"opened_bytes"`
	BadICV        uint64 `json:"bad_icv"`
	Replayed      uint64 `json:"replayed"`
	OutsideWindow uint64 `json:"outside_window"`
	UnknownSPI    uint64 `json:"unknown_spi"`
	NotEcho       uint64 `json:"not_echo"` // opened, but nothing to answer
	Replied       uint64 `json:"replied"`  // echo replies sealed and sent
	Errors        uint64 `json:"errors"`
	LastError     string `json:"last_error"`
}

// StartScapyPeer starts the responder with sas: those whose Dst is
// cfg.Local are opened, the first other one seals the replies. Outer IPv4
// only; tunnel and transport mode, raw ESP and UDP 4500, ESN.
func StartScapyPeer(ctx context.Context, cfg ScapyPeerConfig, sas []*sa.SA) (*ScapyPeer, error) {
	c := map[string]any{"iface": cfg.Iface, "local": cfg.Local.String()}
	owned := []string{}
	for _, a := range cfg.Owned {
		owned = append(owned, a.String())
	}
	var cs []map[string]any
	for _, s := range sas {
		if !s.Src.Is4() {
			return nil, fmt.Errorf("start scapy peer: %v: outer IPv6 is not supported", s)
		}
		m := scapy.SA(s)
		m["dir"] = "out"
		if s.Dst == cfg.Local {
			m["dir"] = "in"
		}
		cs = append(cs, m)
	}
	c["owned"], c["sas"] = owned, cs
	p, err := scapy.Start(ctx, cfg.Netns, "respond", c)
	if err != nil {
		return nil, err
	}
	return &ScapyPeer{p}, nil
}

// Counters asks the responder for its counters.
func (p *ScapyPeer) Counters(ctx context.Context) (ScapyCounters, error) {
	var c ScapyCounters
	if err := p.p.Send("counters"); err != nil {
		return c, fmt.Errorf("scapy peer counters: %w", err)
	}
	if err := p.p.Read(ctx, &c); err != nil {
		return c, fmt.Errorf("scapy peer counters: %w", err)
	}
	return c, nil
}

// Close ends the responder and removes its files.
func (p *ScapyPeer) Close() error { return p.p.Close() }
