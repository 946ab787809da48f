package interop

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/sa"
)

// padOpts is a hop-by-hop or destination-options header holding one PadN
// option; the sender's kernel writes its next-header byte.
var padOpts = []byte{0, 0, 1, 4, 0, 0, 0, 0}

// chainBeforeESP lists the next-header values of an IPv6 packet up to ESP
// or the first header that is neither an extension header nor ESP.
func chainBeforeESP(ip []byte) string {
	if len(ip) < 40 || ip[0]>>4 != 6 {
		return ""
	}
	var out []string
	nh, off := ip[6], 40
	for {
		out = append(out, fmt.Sprint(nh))
		if nh != 0 && nh != 60 && nh != 43 || len(ip) < off+8 {
			return strings.Join(out, ",")
		}
		nh, off = ip[off], off+(int(ip[off+1])+1)*8
	}
}

// withExtHeaders is an IPv6 UDP packet to judgeNearPort with a hop-by-hop
// and a destination options header, each padOpts's one PadN option.
func withExtHeaders(src, dst netip.Addr, sport uint16, payload string) []byte {
	ip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolIPv6HopByHop, HopLimit: 64, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	padN := []*layers.IPv6HopByHopOption{{OptionType: padOpts[2], OptionData: padOpts[4:]}}
	hop := &layers.IPv6HopByHop{Options: padN}
	hop.NextHeader = layers.IPProtocolIPv6Destination
	dopts := &layers.IPv6Destination{Options: []*layers.IPv6DestinationOption{(*layers.IPv6DestinationOption)(padN[0])}}
	dopts.NextHeader = layers.IPProtocolUDP
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: judgeNearPort}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, hop, dopts, udp, gopacket.Payload(payload))
	return buf.Bytes()
}

// TestKernelJudgesTransportExtHeaders: in transport mode over IPv6, a
// packet with hop-by-hop and destination options headers keeps them in
// clear in front of ESP, and the far end delivers them: espgw and the
// kernel put them in the same place on the wire (hop-by-hop, destination
// options, ESP), and each opens the other's packets with them intact.
func TestKernelJudgesTransportExtHeaders(t *testing.T) {
	b := sharedBed(t)
	suite, bits := parseSuite(t, "aes-gcm-16-128")
	ctx, tun := configure(t, b, Case{Suite: suite, AESBits: bits, Mode: sa.Transport, OuterV6: true}, 2*time.Minute)
	gw1, guest := tun.Out.Src, tun.Out.Dst
	var mu sync.Mutex
	// by who sent: chain → packets; the outer map is complete before the
	// first sniffer starts, since the sniffers read it.
	chains := map[string]map[string]int{"espgw": {}, "kernel": {}}
	for _, w := range []struct{ ifname, who string }{{relayIf, "espgw"}, {tapIf, "kernel"}} {
		seen := chains[w.who]
		sn, err := capture.Sniff(b.WAN, w.ifname, capture.SniffOptions{}, func(p capture.Sniffed) {
			c := chainBeforeESP(p.Data)
			if strings.HasSuffix(c, ",50") || c == "50" {
				mu.Lock()
				seen[c]++
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Stop()
	}
	const n = 5
	// espgw seals: gw1's own UDP with both headers to the guest's recorder.
	kernelGot := startRecorder(t, ctx, b, n)
	if err := b.GW1.Do(func() error {
		c, err := net.Dial("udp6", fmt.Sprintf("[%s]:%d", guest, judgeFarPort))
		if err != nil {
			return err
		}
		defer c.Close()
		rc, _ := c.(*net.UDPConn).SyscallConn()
		rc.Control(func(fd uintptr) {
			for _, o := range []int{unix.IPV6_HOPOPTS, unix.IPV6_DSTOPTS} {
				if err == nil {
					err = unix.SetsockoptString(int(fd), unix.IPPROTO_IPV6, o, string(padOpts))
				}
			}
		})
		if err != nil {
			return err
		}
		for i := range n {
			if _, err := fmt.Fprintf(c, "%s %03d to the kernel", judgeMagic, i); err != nil {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}); err != nil {
		t.Fatalf("send from gw1: %v", err)
	}
	// The kernel seals: the guest sends the same shape to gw1.
	var rx *net.UDPConn
	if err := b.GW1.Do(func() error {
		var err error
		if rx, err = net.ListenUDP("udp6", &net.UDPAddr{IP: gw1.AsSlice(), Port: judgeNearPort}); err != nil {
			return err
		}
		rc, _ := rx.SyscallConn()
		rc.Control(func(fd uintptr) {
			for _, o := range []int{unix.IPV6_RECVHOPOPTS, unix.IPV6_RECVDSTOPTS} {
				if err == nil {
					err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, o, 1)
				}
			}
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var pkts []string
	for i := range n {
		pkts = append(pkts, hex.EncodeToString(withExtHeaders(guest, gw1, 40000+uint16(i), fmt.Sprintf("%s %03d to espgw", judgeMagic, i))))
	}
	if out, err := b.Peer.Exec(ctx, append([]string{"/bin/espgw-agent", "inject"}, pkts...)...); err != nil {
		t.Fatalf("inject in the guest: %v\n%s", err, out)
	}
	rx.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf, oob := make([]byte, 2048), make([]byte, 512)
	intact := 0
	for got := 0; got < n; got++ {
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Errorf("gw1 received %d of the kernel's %d packets: %v", got, n, err)
			break
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		var h, d bool
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IPV6 && len(m.Data) == 8 && string(m.Data[1:]) == string(padOpts[1:]) {
				h = h || m.Header.Type == unix.IPV6_HOPOPTS
				d = d || m.Header.Type == unix.IPV6_DSTOPTS
			}
		}
		if h && d {
			intact++
		}
	}
	if intact != n {
		t.Errorf("espgw delivered %d of the kernel's %d packets with both extension headers", intact, n)
	}
	got := kernelGot(func() bool { return true })
	for i := range n {
		if d, ok := got[i]; !ok || d.ext != "hd" {
			t.Errorf("the kernel delivered espgw's packet %d with extension headers %q (ok %v), want hop-by-hop and destination options", i, d.ext, ok)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := "0,60,50" // hop-by-hop, destination options, then ESP
	for _, who := range []string{"espgw", "kernel"} {
		if chains[who][want] < n {
			t.Errorf("%s's ESP packets on the wire: %v, want %d with the chain %s", who, chains[who], n, want)
		}
	}
	t.Logf("on the wire: espgw %v, kernel %v", chains["espgw"], chains["kernel"])
	if t.Failed() {
		st, _ := b.GatewayStats(context.Background())
		t.Logf("gw1: tun_in %d wire_out %d drops %v sockets %+v\n%s", st.TunIn, st.WireOut, st.Drops, st.Sockets, b.GatewayOutput())
		rules, _ := b.GW1.Output(context.Background(), "ip", "-6", "rule")
		routes, _ := b.GW1.Output(context.Background(), "ip", "-6", "route", "show", "table", "all")
		t.Logf("gw1 rules:\n%s\nroutes:\n%s", rules, routes)
	}
}
