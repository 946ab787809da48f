package interop

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// The header judge: the same inner packets — every DSCP / ECN mix, DF set
// and clear, IPv4 and IPv6 inside an IPv4 tunnel — go into espgw's tunnel
// from hostA and into the kernel's from the guest, and what each writes in
// the outer header (DSCP, ECN, DF, TTL) is compared, packet for packet
// (the ESP is opened with the SAs to pair them). Then the WAN marks every
// ESP packet CE both ways, and what each decapsulates and delivers is
// compared (the inner header and payload, byte for byte).
//
// Where RFC 6040 and the kernel part, espgw follows the RFC and the test
// says so cell by cell: the kernel's ingress resets an inner CE to ECT(0)
// in the outer header (RFC 3168's full-functionality / RFC 4301 rule;
// normal mode copies it), and its egress forwards an inner Not-ECT packet
// under an outer CE unmarked where RFC 6040 drops it.

// headerCase is one inner packet shape.
type headerCase struct {
	name string
	v6   bool
	tos  uint8
	df   bool
}

var headerCases = func() []headerCase {
	var cs []headerCase
	for _, tos := range []uint8{0x00, 46 << 2, 34<<2 | 2, 8<<2 | 1, 10<<2 | 3} {
		for _, df := range []bool{true, false} {
			cs = append(cs, headerCase{name: fmt.Sprintf("ipv4/tos=%#02x/df=%v", tos, df), tos: tos, df: df})
		}
		cs = append(cs, headerCase{name: fmt.Sprintf("ipv6/tc=%#02x", tos), v6: true, tos: tos})
	}
	return cs
}()

const (
	judgeFarPort  = 7000 // the guest's recorder
	judgeNearPort = 7001 // hostA's sink
	judgeMagic    = "espgw-hdr-judge"
)

// innerUDP is an inner IPv4 or IPv6 UDP packet carrying id.
func innerUDP(c headerCase, src, dst netip.Addr, dport uint16, id int) []byte {
	payload := gopacket.Payload(fmt.Sprintf("%s %03d %s", judgeMagic, id, strings.Repeat("x", 40)))
	udp := &layers.UDP{SrcPort: layers.UDPPort(40000 + id), DstPort: layers.UDPPort(dport)}
	var ip gopacket.NetworkLayer
	if c.v6 {
		ip = &layers.IPv6{Version: 6, TrafficClass: c.tos, NextHeader: layers.IPProtocolUDP, HopLimit: 64, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	} else {
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TOS: c.tos, Id: uint16(0x4000 + id), TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if c.df {
			ip4.Flags = layers.IPv4DontFragment
		}
		ip = ip4
	}
	udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip.(gopacket.SerializableLayer), udp, payload)
	return buf.Bytes()
}

// sendRaw sends whole IP packets from a raw socket in ns.
func sendRaw(ns *netns.Namespace, pkts [][]byte) error {
	return ns.Do(func() error {
		for _, p := range pkts {
			fam := unix.AF_INET
			_, dst := header.AddrBytes(p)
			var to unix.Sockaddr = &unix.SockaddrInet4{Addr: [4]byte(dst)}
			if len(dst) == 16 {
				fam, to = unix.AF_INET6, &unix.SockaddrInet6{Addr: [16]byte(dst)}
			}
			fd, err := unix.Socket(fam, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
			if err != nil {
				return err
			}
			err = unix.Sendto(fd, p, 0, to)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("send %d-byte packet: %w", len(p), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	})
}

// judgeID reads the id of a judge packet's UDP payload, or -1.
func judgeID(inner []byte) int {
	i := strings.Index(string(inner), judgeMagic+" ")
	if i < 0 || i+len(judgeMagic)+4 > len(inner) {
		return -1
	}
	id, err := strconv.Atoi(string(inner[i+len(judgeMagic)+1 : i+len(judgeMagic)+4]))
	if err != nil {
		return -1
	}
	return id
}

// outerFields are what the judge compares of an outer header.
type outerFields struct {
	tos, ttl uint8
	df       bool
}

func (o outerFields) String() string {
	return fmt.Sprintf("DSCP %d ECN %d DF %v TTL %d", o.tos>>2, o.tos&3, o.df, o.ttl)
}

// watchOuter opens the ESP arriving on ifname in the wan namespace with
// sas and records the outer header of each judge packet by id.
func watchOuter(t *testing.T, b *Bed, ifname string, sas []*sa.SA) (func() map[int]outerFields, func()) {
	t.Helper()
	var live []*esp.SA
	for _, s := range sas {
		e, err := esp.NewSA(s, cpu.New(), esp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, e)
	}
	op, err := capture.NewOpener(live)
	if err != nil {
		t.Fatal(err)
	}
	seen, stop := sniffByID(t, b.WAN, ifname, func(ip []byte) (int, outerFields) {
		h, _, err := header.ParseIPv4(ip)
		if err != nil {
			return -1, outerFields{}
		}
		r, err := op.Open(context.Background(), ip)
		if err != nil || r.Inner == nil {
			return -1, outerFields{}
		}
		return judgeID(r.Inner), outerFields{tos: h.TOS, ttl: h.TTL, df: h.DF}
	})
	return seen, func() {
		stop()
		for _, e := range live {
			e.Close()
		}
	}
}

// sniffByID records, by judge packet id, what see makes of each packet
// arriving on ifname in ns (an id below 0 records nothing). seen is a copy
// of what was recorded so far; stop ends the sniffer.
func sniffByID[T any](t *testing.T, ns *netns.Namespace, ifname string, see func(ip []byte) (int, T)) (seen func() map[int]T, stop func()) {
	t.Helper()
	var mu sync.Mutex
	got := map[int]T{}
	sn, err := capture.Sniff(ns, ifname, capture.SniffOptions{}, func(p capture.Sniffed) {
		if id, v := see(p.Data); id >= 0 {
			mu.Lock()
			got[id] = v
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() map[int]T {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(got)
	}, sn.Stop
}

// delivered is an inner packet as a receiver got it.
type delivered struct {
	tos, ttl int
	payload  string
	ext      string // the guest's recorder: IPv6 extension headers seen (h, d)
}

// watchNear records the judge packets delivered to hostA.
func watchNear(t *testing.T, b *Bed) (func() map[int]delivered, func()) {
	t.Helper()
	return sniffByID(t, b.HostA, lanIf, func(ip []byte) (int, delivered) {
		id := judgeID(ip)
		if id < 0 || len(ip) < 40 {
			return -1, delivered{}
		}
		hl := header.IPv4Len
		if header.Version(ip) == 6 {
			hl = header.IPv6Len
		}
		return id, delivered{tos: int(header.TrafficClass(ip)), ttl: int(header.TTL(ip)), payload: hex.EncodeToString(ip[hl+header.UDPLen:])}
	})
}

var recvLine = regexp.MustCompile(`(?m)^udp[46] tos=(-?\d+) ttl=(-?\d+) ext=(\S+) ([0-9a-f]+)$`)

// startRecorder starts the guest's recorder of n judge packets on
// judgeFarPort. The function it returns reads what the recorder got,
// waiting up to 20 s for all n and for done.
func startRecorder(t *testing.T, ctx context.Context, b *Bed, n int) func(done func() bool) map[int]delivered {
	t.Helper()
	if _, err := b.Peer.Run(ctx, fmt.Sprintf("rm -f /tmp/marks; (/bin/espgw-agent recv %d %d 15000 >/tmp/marks 2>&1 &)", judgeFarPort, n)); err != nil {
		t.Fatalf("start the guest's recorder: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	return func(done func() bool) map[int]delivered {
		var got map[int]delivered
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			out, err := b.Peer.Run(ctx, "cat /tmp/marks")
			if err != nil {
				t.Fatal(err)
			}
			if got = farDelivered(out); len(got) >= n && done() {
				break
			}
		}
		return got
	}
}

// farDelivered parses the guest recorder's output.
func farDelivered(out string) map[int]delivered {
	seen := map[int]delivered{}
	for _, m := range recvLine.FindAllStringSubmatch(out, -1) {
		payload, err := hex.DecodeString(m[4])
		if err != nil {
			continue
		}
		if id := judgeID(payload); id >= 0 {
			tos, _ := strconv.Atoi(m[1])
			ttl, _ := strconv.Atoi(m[2])
			seen[id] = delivered{tos: tos, ttl: ttl, payload: m[4], ext: m[3]}
		}
	}
	return seen
}

// judgeRound sends every case both ways and returns what was seen: the
// outer headers espgw and the kernel wrote, and the inner packets the
// kernel (in the guest) and espgw (at hostA) delivered.
type judgeResult struct {
	espgwOuter, kernelOuter map[int]outerFields
	kernelGot, espgwGot     map[int]delivered
	sentNear, sentFar       map[int][]byte
}

func judgeRound(t *testing.T, b *Bed, c Case, wantNear int) judgeResult {
	t.Helper()
	ctx, tun := configure(t, b, c, 2*time.Minute)
	espgwOuter, stop1 := watchOuter(t, b, relayIf, []*sa.SA{tun.Out})
	defer stop1()
	kernelOuter, stop2 := watchOuter(t, b, tapIf, []*sa.SA{tun.In})
	defer stop2()
	espgwGot, stop3 := watchNear(t, b)
	defer stop3()
	// hostA's sink, so the kernel's packets draw no port-unreachable.
	var sinks []net.PacketConn
	for _, network := range []string{"udp4", "udp6"} {
		if err := b.HostA.Do(func() error {
			c, err := net.ListenPacket(network, ":"+strconv.Itoa(judgeNearPort))
			sinks = append(sinks, c)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, s := range sinks {
			if s != nil {
				s.Close()
			}
		}
	}()
	kernelGot := startRecorder(t, ctx, b, len(headerCases))
	res := judgeResult{sentNear: map[int][]byte{}, sentFar: map[int][]byte{}}
	var far []string
	var nearPkts [][]byte
	for id, hc := range headerCases {
		nearA, farA := HostA4.Addr(), FarHost4.Addr()
		if hc.v6 {
			nearA, farA = HostA6.Addr(), FarHost6.Addr()
		}
		p := innerUDP(hc, nearA, farA, judgeFarPort, id)
		nearPkts = append(nearPkts, p)
		res.sentNear[id] = p
		q := innerUDP(hc, farA, nearA, judgeNearPort, id)
		res.sentFar[id] = q
		far = append(far, hex.EncodeToString(q))
	}
	if err := sendRaw(b.HostA, nearPkts); err != nil {
		t.Fatalf("send from hostA: %v", err)
	}
	if out, err := b.Peer.Exec(ctx, append([]string{"/bin/espgw-agent", "inject"}, far...)...); err != nil {
		t.Fatalf("inject in the guest: %v\n%s", err, out)
	}
	res.kernelGot = kernelGot(func() bool { return len(espgwGot()) >= wantNear })
	time.Sleep(500 * time.Millisecond)
	res.espgwOuter, res.kernelOuter, res.espgwGot = espgwOuter(), kernelOuter(), espgwGot()
	return res
}

// outer returns the outer headers espgw and the kernel wrote for case id,
// and the one espgw should have written: the kernel's, but with an inner
// CE copied, as RFC 6040's normal mode (espgw's) does, where the kernel
// resets it to ECT(0) (which is checked). ok is false when either header
// was not seen (the test has failed).
func (r judgeResult) outer(t *testing.T, id int, hc headerCase) (espgw, kernel, want outerFields, ok bool) {
	t.Helper()
	e, ok1 := r.espgwOuter[id]
	k, ok2 := r.kernelOuter[id]
	if !ok1 || !ok2 {
		t.Errorf("%s: outer header not seen (espgw %v, kernel %v)", hc.name, ok1, ok2)
		return e, k, k, false
	}
	want = k
	if hc.tos&3 == 3 {
		if k.tos&3 != 2 {
			t.Errorf("%s: the kernel's outer ECN is %d, the test expects its CE reset to ECT(0)", hc.name, k.tos&3)
		}
		want.tos = k.tos | 3
	}
	return e, k, want, true
}

func TestKernelJudgesOuterHeaders(t *testing.T) {
	b := sharedBed(t)
	suite, bits := parseSuite(t, "aes-gcm-16-128")
	for _, encap := range []sa.Encap{sa.EncapNone, sa.EncapUDP} {
		t.Run(EncapName(encap), func(t *testing.T) {
			judgeHeaders(t, b, Case{Suite: suite, AESBits: bits, Mode: sa.Tunnel, Encap: encap})
		})
	}
}

func judgeHeaders(t *testing.T, b *Bed, c Case) {
	notECT := 0
	for _, hc := range headerCases {
		if hc.tos&3 == 0 {
			notECT++
		}
	}
	t.Run("encapsulation", func(t *testing.T) {
		r := judgeRound(t, b, c, len(headerCases))
		for id, hc := range headerCases {
			e, k, want, ok := r.outer(t, id, hc)
			if !ok {
				continue
			}
			if e != want {
				t.Errorf("%s: espgw's outer %v, the kernel's %v", hc.name, e, k)
			}
			if e.tos>>2 != hc.tos>>2 {
				t.Errorf("%s: outer DSCP %d, inner %d", hc.name, e.tos>>2, hc.tos>>2)
			}
			t.Logf("%-24s espgw %v | kernel %v", hc.name, e, k)
		}
		// Without marks on the WAN both deliver what was sent: the header
		// (less the TTL each host's routing took) and the payload.
		for id, hc := range headerCases {
			k, ok1 := r.kernelGot[id]
			e, ok2 := r.espgwGot[id]
			if !ok1 || !ok2 {
				t.Errorf("%s: not delivered (by the kernel %v, by espgw %v)", hc.name, ok1, ok2)
				continue
			}
			if k.tos != int(hc.tos) || e.tos != int(hc.tos) || k.payload != e.payload {
				t.Errorf("%s: delivered TOS %d by the kernel, %d by espgw, sent %d; payloads equal %v", hc.name, k.tos, e.tos, hc.tos, k.payload == e.payload)
			}
		}
	})

	t.Run("fixed-dscp-nopmtudisc-decap-dscp", func(t *testing.T) {
		// dscp 0, df clear and decap-dscp copy are the kernel's
		// dont-encap-dscp, nopmtudisc and decap-dscp: both must write the
		// same outer headers, and both deliver the inner packets with the
		// outer DSCP, 0, copied in.
		c := c
		c.Header = func(s *sa.SA) { s.DSCP, s.DF, s.DecapDSCP = sa.DSCP{Fixed: true}, sa.DFClear, sa.DecapCopy }
		r := judgeRound(t, b, c, len(headerCases))
		for id, hc := range headerCases {
			e, k, want, ok := r.outer(t, id, hc)
			if !ok {
				continue
			}
			if e != want || e.tos>>2 != 0 || e.df {
				t.Errorf("%s: espgw's outer %v, the kernel's %v (want DSCP 0, no DF)", hc.name, e, k)
			}
			kd, ok1 := r.kernelGot[id]
			ed, ok2 := r.espgwGot[id]
			if !ok1 || !ok2 || kd.tos != int(hc.tos&3) || ed.tos != int(hc.tos&3) || kd.payload != ed.payload {
				t.Errorf("%s: delivered TOS %d by the kernel (%v), %d by espgw (%v); want %d (DSCP 0 copied in, ECN kept)", hc.name, kd.tos, ok1, ed.tos, ok2, hc.tos&3)
			}
		}
	})

	t.Run("decapsulation-under-ce", func(t *testing.T) {
		ce := impair.DefaultConfig()
		ce.ECNCE = 100
		c := c
		c.Impair, c.ImpairBack = &ce, &ce
		r := judgeRound(t, b, c, len(headerCases)-notECT)
		for id, hc := range headerCases {
			k, kOK := r.kernelGot[id]
			e, eOK := r.espgwGot[id]
			if hc.tos&3 == 0 {
				// Not-ECT under CE: RFC 6040 drops, the kernel forwards
				// the packet unmarked.
				if eOK {
					t.Errorf("%s: espgw delivered a Not-ECT packet that came under CE (TOS %d)", hc.name, e.tos)
				}
				if !kOK || k.tos != int(hc.tos) {
					t.Errorf("%s: the kernel delivered %v (ok %v), the test expects it unmarked", hc.name, k, kOK)
				}
				continue
			}
			if !kOK || !eOK {
				t.Errorf("%s: not delivered (by the kernel %v, by espgw %v)", hc.name, kOK, eOK)
				continue
			}
			want := int(hc.tos | 3)
			if k.tos != want || e.tos != want || k.payload != e.payload || k.ttl != e.ttl {
				t.Errorf("%s: delivered %+v by the kernel, %+v by espgw; want TOS %d from both", hc.name, k, e, want)
			}
		}
		st, err := b.GatewayStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Drops["ecn-ce-not-ect"]; got != uint64(notECT) {
			t.Errorf("gw1 counted %d ecn-ce-not-ect drops, want %d", got, notECT)
		}
	})
}
