package interop

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/sa"
)

// The scapy bed needs no guest: it is cheap, and kept apart from the
// kernel's so each can run alone.
var scapyShared labtest.Shared[*Bed]

func scapyBed(t *testing.T) *Bed {
	t.Helper()
	if testing.Short() {
		t.Skip("runs espgw gateways and scapy in namespaces; run without -short")
	}
	binary := labtest.Espgw(t)
	return scapyShared.Get(t, "gateway ↔ scapy interop bed", func() (*Bed, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return StartBed(ctx, BedOptions{Binary: binary, Prefix: "kis", Scapy: true})
	})
}

// TestGatewayScapyInterop puts scapy's ESP (the scapy peer in respond
// mode) on the far side: pings of a spread of sizes must be
// answered through the tunnel, and scapy's counters must agree with gw1's.
// scapy is slow and answers pings only, so this covers one row per suite,
// with modes, encapsulations and ESN spread over them (AES-GMAC, which
// scapy lacks, is the guest kernel's to judge).
func TestGatewayScapyInterop(t *testing.T) {
	b := scapyBed(t)
	names := slices.Clone(suiteNames)
	for _, n := range modernSuiteNames {
		if !strings.HasPrefix(n, "aes-gmac") { // scapy has no AES-GMAC
			names = append(names, n)
		}
	}
	for i, name := range names {
		suite, bits := parseSuite(t, name)
		c := Case{Suite: suite, AESBits: bits, Mode: []sa.Mode{sa.Tunnel, sa.Transport}[i%2],
			Encap: []sa.Encap{sa.EncapNone, sa.EncapUDP}[(i/2)%2], ESN: i%3 != 1}
		ok := t.Run(c.Name(), func(t *testing.T) { checkScapy(t, b, c) })
		matrix.Add(MatrixRow{Suite: name, Mode: c.Mode.String(), Encap: EncapName(c.Encap), ESN: c.ESN,
			Peer: "scapy (python3-scapy)", Checks: "ping+counters", Pass: ok})
	}
}

func checkScapy(t *testing.T, b *Bed, c Case) {
	ctx, tun := configure(t, b, c, 2*time.Minute)
	requests := 0
	for _, size := range pingSizes4 {
		r, err := PingNear(ctx, tun.Near, tun.FarAddrs[0], size, 2)
		if err != nil {
			t.Fatal(err)
		}
		if r.Received < 2 {
			t.Errorf("ping %s → %s, %d bytes: %d replies to %d requests", tun.Near.Short(), tun.FarAddrs[0], size, r.Received, r.Sent)
		}
		requests += r.Sent
	}
	var sc ScapyCounters
	var gs gateway.Stats
	var gout, gin *gateway.SAStats
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if sc, err = b.Scapy.Counters(ctx); err != nil {
			t.Fatal(err)
		}
		if gs, err = b.GatewayStats(ctx); err != nil {
			t.Fatal(err)
		}
		gout, gin = gs.SA(tun.Out.SPI), gs.SA(tun.In.SPI)
		if gout == nil || gin == nil {
			t.Fatalf("gw1 lacks SA %#x or %#x", tun.Out.SPI, tun.In.SPI)
		}
		if gout.SealedPackets == sc.Opened && sc.Replied == gin.OpenedPackets || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d requests; gw1 sealed %d, scapy received %d, opened %d, replied %d, gw1 opened %d",
		requests, gout.SealedPackets, sc.Received, sc.Opened, sc.Replied, gin.OpenedPackets)
	if sc.Opened != gout.SealedPackets || sc.Received != sc.Opened {
		t.Errorf("gw1 sealed %d packets, scapy received %d and opened %d", gout.SealedPackets, sc.Received, sc.Opened)
	}
	if sc.Replied != gin.OpenedPackets || sc.Replied != sc.Opened {
		t.Errorf("scapy opened %d requests and sealed %d replies, gw1 opened %d", sc.Opened, sc.Replied, gin.OpenedPackets)
	}
	if gin.Highest != tun.In.InitialSeq+sc.Replied {
		t.Errorf("gw1's highest accepted sequence number %#x, want %#x", gin.Highest, tun.In.InitialSeq+sc.Replied)
	}
	if bad := sc.BadICV + sc.Replayed + sc.OutsideWindow + sc.UnknownSPI + sc.NotEcho + sc.Errors; bad != 0 {
		t.Errorf("scapy counted problems: %+v", sc)
	}
	checkNoDrops(t, gs, gout, gin)
	if t.Failed() {
		t.Logf("gw1 log:\n%s", b.GatewayOutput())
	}
}
