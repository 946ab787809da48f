package impair

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/pcapgen"
)

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// espPayload is an ESP packet body: SPI, sequence number, then a pattern.
func espPayload(spi, seq uint32, n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b, spi)
	binary.BigEndian.PutUint32(b[4:], seq)
	for i := 8; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}

type kind int

const (
	rawESP4 kind = iota
	udpESP4
	rawESP6
	udpESP6
)

// templates caches serialized frames by kind and size: frame only patches
// the sequence number in, which keeps the long statistical runs quick.
var templates = map[[2]int][]byte{}

// frame returns an Ethernet frame carrying ESP packet seq with an n-byte ESP
// part, the way a gateway sends it.
func frame(t testing.TB, k kind, seq uint32, n int) []byte {
	t.Helper()
	tpl, ok := templates[[2]int{int(k), n}]
	if !ok {
		tpl = serializeFrame(t, k, n)
		templates[[2]int{int(k), n}] = tpl
	}
	f := bytes.Clone(tpl)
	l, _ := locate(f)
	binary.BigEndian.PutUint32(f[l.esp+4:], seq)
	l.fixUDP(f)
	return f
}

func serializeFrame(t testing.TB, k kind, n int) []byte {
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	proto := layers.IPProtocolESP
	if k == udpESP4 || k == udpESP6 {
		proto = layers.IPProtocolUDP
	}
	var ip gopacket.SerializableLayer = &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, Flags: layers.IPv4DontFragment,
		SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 2}}
	if k == rawESP6 || k == udpESP6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net6("2001:db8::1"), DstIP: net6("2001:db8::2")}
	}
	ls := []gopacket.SerializableLayer{eth, ip}
	if proto == layers.IPProtocolUDP {
		ls = append(ls, &layers.UDP{SrcPort: 4500, DstPort: 4500})
	}
	return serialize(t, append(ls, gopacket.Payload(espPayload(0x1001, 0, n)))...)
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	b, err := pcapgen.Serialize(ls...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func net6(s string) net.IP { return net.ParseIP(s) }

// locate finds the headers of a frame built by frame.
func locate(f []byte) (layout, bool) {
	m := matcher{esp: true, ports: []uint16{4500}}
	return m.locate(f, Ethernet)
}

// espSeq reads the ESP sequence number of a frame built by frame.
func espSeq(t testing.TB, f []byte) uint32 {
	t.Helper()
	l, ok := locate(f)
	if !ok {
		t.Fatalf("output frame does not parse: %x", f)
	}
	return binary.BigEndian.Uint32(f[l.esp+4:])
}

// clock is the virtual time of a run: one packet every 10µs.
type run struct {
	s   *Stage
	now time.Time
	out [][]byte
	at  []time.Time
}

func newRun(t testing.TB, cfg Config) *run {
	t.Helper()
	s, err := New(cfg, Ethernet, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &run{s: s, now: time.Unix(1_700_000_000, 0)}
}

func (r *run) drain() {
	for p := r.s.Pop(r.now); p != nil; p = r.s.Pop(r.now) {
		r.out = append(r.out, bytes.Clone(p.Bytes()))
		r.at = append(r.at, r.now)
		r.s.Release(p)
	}
}

func (r *run) push(f []byte) {
	r.s.Push(r.now, f)
	r.drain()
	r.now = r.now.Add(10 * time.Microsecond)
}

// finish lets the clock run until the stage holds nothing.
func (r *run) finish() {
	for {
		t, ok := r.s.Next()
		if !ok {
			return
		}
		if t.After(r.now) {
			r.now = t
		}
		r.drain()
	}
}

func (r *run) feed(t testing.TB, k kind, n int) [][]byte {
	in := make([][]byte, n)
	for i := range in {
		in[i] = frame(t, k, uint32(i), 64+i%512)
		r.push(in[i])
	}
	r.finish()
	return in
}

func checkConservation(t *testing.T, s *Stage) {
	t.Helper()
	c := s.Counters()
	if in, out := c.Received+c.Duplicated+c.Replayed, c.Emitted+c.Dropped()+uint64(s.InFlight()); in != out {
		t.Errorf("conservation: received %d + duplicated %d + replayed %d != emitted %d + dropped %d + in flight %d",
			c.Received, c.Duplicated, c.Replayed, c.Emitted, c.Dropped(), s.InFlight())
	}
}

// within checks a binomial count against n·p with a 5-sigma tolerance.
func within(t *testing.T, what string, got uint64, n int, pct float64) {
	t.Helper()
	p := pct / 100
	mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
	if math.Abs(float64(got)-mean) > 5*sd+1 {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f (5σ)", what, got, n, mean, 5*sd)
	}
}

func cfgWith(f func(*Config)) Config {
	c := DefaultConfig()
	c.Seed = 42
	f(&c)
	return c
}

const many = 20000

func TestRates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		pct  float64
		got  func(Counters) uint64
	}{
		{"loss", cfgWith(func(c *Config) { c.Loss = 5 }), 5, func(c Counters) uint64 { return c.Lost }},
		{"duplicate", cfgWith(func(c *Config) { c.Duplicate = 3 }), 3, func(c Counters) uint64 { return c.Duplicated }},
		{"corrupt", cfgWith(func(c *Config) { c.Corrupt.Percent = 10 }), 10, func(c Counters) uint64 { return c.Corrupted }},
		{"truncate", cfgWith(func(c *Config) { c.Truncate = Truncate{Percent: 2, By: 4} }), 2, func(c Counters) uint64 { return c.Truncated }},
		{"rewrite", cfgWith(func(c *Config) { c.RewriteSPI = RewriteSPI{Percent: 7, SPI: 0xdead} }), 7, func(c Counters) uint64 { return c.Rewritten }},
		{"replay", cfgWith(func(c *Config) { c.Replay.Percent = 4 }), 4, func(c Counters) uint64 { return c.Replayed }},
		{"reorder", cfgWith(func(c *Config) { c.Reorder.Percent = 6 }), 6, func(c Counters) uint64 { return c.Reordered }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRun(t, tt.cfg)
			r.feed(t, udpESP4, many)
			c := r.s.Counters()
			within(t, tt.name, tt.got(c), many, tt.pct)
			checkConservation(t, r.s)
			if r.s.InFlight() != 0 {
				t.Errorf("%d packets still in flight after the run", r.s.InFlight())
			}
			if want := c.Received - c.Dropped() + c.Duplicated + c.Replayed; uint64(len(r.out)) != want {
				t.Errorf("%d packets out, counters say %d", len(r.out), want)
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	cfg := cfgWith(func(c *Config) {
		c.Loss, c.Duplicate = 2, 2
		c.Burst = Burst{P: 1, R: 30, LossBad: 80}
		c.Corrupt.Percent, c.Corrupt.Bytes = 3, 4
		c.Truncate = Truncate{Percent: 1, To: 20}
		c.RewriteSPI = RewriteSPI{Percent: 1, SPI: 7}
		c.Replay.Percent = 2
		c.Reorder.Percent = 3
		c.Delay = Delay{Time: time.Millisecond, Jitter: 500 * time.Microsecond}
	})
	a, b := newRun(t, cfg), newRun(t, cfg)
	a.feed(t, rawESP6, 3000)
	b.feed(t, rawESP6, 3000)
	if a.s.Counters() != b.s.Counters() || len(a.out) != len(b.out) {
		t.Fatalf("same seed, different runs:\n%+v\n%+v", a.s.Counters(), b.s.Counters())
	}
	for i := range a.out {
		if !bytes.Equal(a.out[i], b.out[i]) || !a.at[i].Equal(b.at[i]) {
			t.Fatalf("same seed, packet %d differs", i)
		}
	}
	checkConservation(t, a.s)
	cfg.Seed++
	c := newRun(t, cfg)
	c.feed(t, rawESP6, 3000)
	if c.s.Counters() == a.s.Counters() {
		t.Error("another seed gave the very same counters")
	}
}

// Turning one impairment on must not change the packets another one picks.
func TestStreamsIndependent(t *testing.T) {
	lossOnly := newRun(t, cfgWith(func(c *Config) { c.Loss = 10 }))
	lossOnly.feed(t, rawESP4, 2000)
	both := newRun(t, cfgWith(func(c *Config) { c.Loss = 10; c.Corrupt.Percent = 50 }))
	both.feed(t, rawESP4, 2000)
	if lossOnly.s.Counters().Lost != both.s.Counters().Lost {
		t.Fatalf("lost %d alone, %d with corruption on", lossOnly.s.Counters().Lost, both.s.Counters().Lost)
	}
	for i := range lossOnly.out {
		if espSeq(t, lossOnly.out[i]) != espSeq(t, both.out[i]) {
			t.Fatalf("packet %d: loss picked differently with corruption on", i)
		}
	}
}

func TestBurstLoss(t *testing.T) {
	b := Burst{P: 1, R: 25, LossBad: 100}
	r := newRun(t, cfgWith(func(c *Config) { c.Burst = b }))
	const n = 100000
	r.feed(t, rawESP4, n)
	// Runs of lost sequence numbers.
	var runs, lost int
	next := uint32(0)
	for _, f := range r.out {
		s := espSeq(t, f)
		if s > next {
			runs++
			lost += int(s - next)
		}
		next = s + 1
	}
	if int(n-next) > 0 {
		runs++
		lost += int(n - next)
	}
	c := r.s.Counters()
	if uint64(lost) != c.BurstLost {
		t.Fatalf("%d missing from the output, counters say %d", lost, c.BurstLost)
	}
	wantLoss := b.P / (b.P + b.R) * 100 // percent
	if got := float64(lost) / n * 100; math.Abs(got-wantLoss) > 0.15*wantLoss {
		t.Errorf("burst loss %.2f%%, want %.2f%% ± 15%%", got, wantLoss)
	}
	if mean, want := float64(lost)/float64(runs), 100/b.R; math.Abs(mean-want) > 0.1*want {
		t.Errorf("mean burst %.2f packets, want %.2f ± 10%%", mean, want)
	}
}

func TestReorderDepth(t *testing.T) {
	for _, depth := range []int{1, 3, 17} {
		r := newRun(t, cfgWith(func(c *Config) { c.Reorder = Reorder{Percent: 10, Depth: depth, MaxHold: time.Hour} }))
		const n = 5000
		for i := 0; i < n; i++ {
			r.push(frame(t, rawESP4, uint32(i), 100))
		}
		r.finish() // the last holds have no later packets: MaxHold releases them
		if len(r.out) != n {
			t.Fatalf("depth %d: %d packets out of %d", depth, len(r.out), n)
		}
		seqs := make([]uint32, len(r.out))
		for i, f := range r.out {
			seqs[i] = espSeq(t, f)
		}
		late := 0
		for i, s := range seqs {
			passed := 0 // later packets that came out before s
			for _, g := range seqs[:i] {
				if g > s {
					passed++
				}
			}
			switch {
			case passed == depth:
				late++
			case passed != 0 && s < n-uint32(depth)-MaxHeld:
				t.Fatalf("depth %d: packet %d passed by %d", depth, s, passed)
			}
		}
		c := r.s.Counters()
		if uint64(late) > c.Reordered || c.Reordered-uint64(late) > MaxHeld {
			t.Errorf("depth %d: %d packets came exactly %d late, counters say %d reordered", depth, late, depth, c.Reordered)
		}
		within(t, "reordered", c.Reordered, n, 10)
	}
}

func TestReorderExpires(t *testing.T) {
	r := newRun(t, cfgWith(func(c *Config) { c.Reorder = Reorder{Percent: 100, Depth: 1, MaxHold: time.Millisecond} }))
	r.push(frame(t, rawESP4, 1, 100))
	if len(r.out) != 0 {
		t.Fatal("a held packet came out at once")
	}
	next, ok := r.s.Next()
	if !ok || next.Sub(r.now) > time.Millisecond {
		t.Fatalf("Next %v %v, want within 1ms", next, ok)
	}
	r.finish()
	if c := r.s.Counters(); len(r.out) != 1 || c.ReorderExpired != 1 || c.Reordered != 0 {
		t.Fatalf("out %d, counters %+v", len(r.out), c)
	}
}

func TestCorruptSparesHeader(t *testing.T) {
	tests := []struct {
		name     string
		k        kind
		from, to int
		bytes    int
	}{
		{"raw4 default", rawESP4, 8, 0, 1},
		{"udp4 past IV, spare ICV", udpESP4, 24, -12, 3},
		{"raw6 fixed window", rawESP6, 8, 40, 5},
		{"udp6 whole range", udpESP6, 8, 0, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRun(t, cfgWith(func(c *Config) { c.Corrupt = Corrupt{Percent: 50, Bytes: tt.bytes, From: tt.from, To: tt.to} }))
			in := r.feed(t, tt.k, 2000)
			var corrupted uint64
			for i, f := range r.out {
				l, _ := locate(in[i])
				if len(f) != len(in[i]) {
					t.Fatalf("packet %d changed length", i)
				}
				lo, hi := l.esp+tt.from, l.ipEnd+tt.to
				if tt.to > 0 {
					hi = min(l.esp+tt.to, l.ipEnd)
				}
				diff := 0
				for j := range f {
					if f[j] == in[i][j] {
						continue
					}
					inUDPSum := l.udp >= 0 && (j == l.udp+6 || j == l.udp+7)
					if !inUDPSum && (j < lo || j >= hi) {
						t.Fatalf("packet %d: byte %d changed, outside [%d,%d)", i, j, lo, hi)
					}
					if !inUDPSum {
						diff++
					}
				}
				if diff > 0 {
					corrupted++
					if want := min(tt.bytes, hi-lo); diff != want {
						t.Fatalf("packet %d: %d bytes changed, want %d", i, diff, want)
					}
				}
				if l.udp >= 0 && !udpValid(f, l) {
					t.Fatalf("packet %d: UDP checksum does not verify", i)
				}
			}
			if c := r.s.Counters(); c.Corrupted != corrupted {
				t.Fatalf("%d packets differ, counters say %d corrupted", corrupted, c.Corrupted)
			}
		})
	}
}

func udpValid(f []byte, l layout) bool {
	var p uint32
	if l.v6 {
		p = header.Pseudo(f[l.ip+8:l.ip+24], f[l.ip+24:l.ip+40], 17, l.ipEnd-l.udp)
	} else {
		p = header.Pseudo(f[l.ip+12:l.ip+16], f[l.ip+16:l.ip+20], 17, l.ipEnd-l.udp)
	}
	return header.Valid(p, f[l.udp:l.ipEnd])
}

func TestTruncate(t *testing.T) {
	for _, k := range []kind{rawESP4, udpESP4, rawESP6, udpESP6} {
		for _, tr := range []Truncate{{Percent: 100, To: 30}, {Percent: 100, By: 13}} {
			r := newRun(t, cfgWith(func(c *Config) { c.Truncate = tr }))
			in := r.feed(t, k, 50)
			for i, f := range r.out {
				lin, _ := locate(in[i])
				want := lin.ipEnd - lin.esp - tr.By
				if tr.To > 0 {
					want = min(tr.To, lin.ipEnd-lin.esp)
				}
				l, ok := locate(f)
				if !ok {
					t.Fatalf("kind %d %+v: truncated packet %d does not parse", k, tr, i)
				}
				if got := l.ipEnd - l.esp; got != want || l.ipEnd != len(f) {
					t.Fatalf("kind %d %+v: ESP part %d bytes (frame %d, IP end %d), want %d", k, tr, got, len(f), l.ipEnd, want)
				}
				if !l.v6 && !header.Valid(0, f[l.ip:l.ip+20]) {
					t.Fatalf("IPv4 header checksum wrong after truncation")
				}
				if l.udp >= 0 && !udpValid(f, l) {
					t.Fatalf("UDP checksum wrong after truncation")
				}
				if !bytes.Equal(f[l.esp:], in[i][lin.esp:lin.esp+want]) {
					t.Fatalf("truncation changed bytes it kept")
				}
			}
		}
	}
}

func TestReplay(t *testing.T) {
	after := 5 * time.Millisecond
	r := newRun(t, cfgWith(func(c *Config) { c.Replay = Replay{Percent: 10, After: after, History: 8} }))
	in := r.feed(t, udpESP4, 3000)
	c := r.s.Counters()
	if c.ReplaySkipped == 0 {
		t.Error("history of 8 over 3000 packets with copies held 5ms never filled")
	}
	seen := map[uint32]time.Time{}
	replays := 0
	for i, f := range r.out {
		s := espSeq(t, f)
		if !bytes.Equal(f, in[s]) {
			t.Fatalf("packet %d (seq %d) is not byte-identical to the original", i, s)
		}
		if first, ok := seen[s]; ok {
			replays++
			if r.at[i].Sub(first) < after {
				t.Fatalf("seq %d replayed %v after the original, want ≥ %v", s, r.at[i].Sub(first), after)
			}
			continue
		}
		seen[s] = r.at[i]
	}
	if uint64(replays) != c.Replayed || c.Replayed == 0 {
		t.Fatalf("%d replays seen, counters say %d", replays, c.Replayed)
	}
	checkConservation(t, r.s)
}

func TestRewriteSPI(t *testing.T) {
	r := newRun(t, cfgWith(func(c *Config) { c.RewriteSPI = RewriteSPI{Percent: 100, SPI: 0xdeadbeef} }))
	r.feed(t, udpESP6, 10)
	for _, f := range r.out {
		l, _ := locate(f)
		if spi := binary.BigEndian.Uint32(f[l.esp:]); spi != 0xdeadbeef {
			t.Fatalf("SPI %#x, want 0xdeadbeef", spi)
		}
		if !udpValid(f, l) {
			t.Fatal("UDP checksum wrong after the SPI rewrite")
		}
	}
	if c := r.s.Counters(); c.Rewritten != 10 {
		t.Fatalf("rewritten %d, want 10", c.Rewritten)
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	d := Delay{Time: 2 * time.Millisecond, Jitter: time.Millisecond}
	r := newRun(t, cfgWith(func(c *Config) { c.Delay = d }))
	pushed := map[uint32]time.Time{}
	const n = 5000
	for i := 0; i < n; i++ {
		pushed[uint32(i)] = r.now
		r.push(frame(t, rawESP4, uint32(i), 80))
	}
	r.finish()
	var sum time.Duration
	for i, f := range r.out {
		s := espSeq(t, f)
		if s != uint32(i) {
			t.Fatalf("packet %d came out as %d: delay reordered", i, s)
		}
		wait := r.at[i].Sub(pushed[s])
		if wait < d.Time-d.Jitter {
			t.Fatalf("seq %d waited %v, want ≥ %v", s, wait, d.Time-d.Jitter)
		}
		sum += wait
	}
	// Keeping order only ever adds waiting, so the mean is at least Time.
	if mean := sum / n; mean < d.Time-50*time.Microsecond || mean > d.Time+d.Jitter {
		t.Errorf("mean delay %v, want about %v", mean, d.Time)
	}
	if c := r.s.Counters(); c.Delayed != n {
		t.Errorf("delayed %d, want %d", c.Delayed, n)
	}
}

// Packets the filter does not match pass untouched, even at 100% loss.
func TestFilterPassesOthers(t *testing.T) {
	ser := func(ls ...gopacket.SerializableLayer) []byte { return serialize(t, ls...) }
	eth := func(et layers.EthernetType) *layers.Ethernet {
		return &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: et}
	}
	ip4 := func(p layers.IPProtocol) *layers.IPv4 {
		return &layers.IPv4{Version: 4, TTL: 64, Protocol: p, SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 2}}
	}
	udp := func(port layers.UDPPort) *layers.UDP { return &layers.UDP{SrcPort: port, DstPort: port} }
	frag := ip4(layers.IPProtocolESP)
	frag.Flags = layers.IPv4MoreFragments
	others := map[string][]byte{
		"arp": ser(eth(layers.EthernetTypeARP), &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: 1, SourceHwAddress: macA, SourceProtAddress: []byte{192, 0, 2, 1},
			DstHwAddress: make([]byte, 6), DstProtAddress: []byte{192, 0, 2, 2}}),
		"icmp":      ser(eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolICMPv4), &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0)}, gopacket.Payload(make([]byte, 56))),
		"ike":       ser(eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP), udp(4500), gopacket.Payload(make([]byte, 40))),
		"keepalive": ser(eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP), udp(4500), gopacket.Payload([]byte{0xff})),
		"udp 53":    ser(eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP), udp(53), gopacket.Payload(espPayload(1, 1, 40))),
		"fragment":  ser(eth(layers.EthernetTypeIPv4), frag, gopacket.Payload(espPayload(1, 1, 40))),
	}
	r := newRun(t, cfgWith(func(c *Config) { c.Loss = 100 }))
	for name, f := range others {
		r.out = r.out[:0]
		r.push(f)
		if len(r.out) != 1 || !bytes.Equal(r.out[0], f) {
			t.Errorf("%s did not pass untouched", name)
		}
	}
	r.push(frame(t, udpESP4, 1, 64))
	if c := r.s.Counters(); c.Matched != 1 || c.Lost != 1 {
		t.Errorf("ESP in UDP not matched: %+v", c)
	}
}

func TestLimit(t *testing.T) {
	r := newRun(t, cfgWith(func(c *Config) { c.Delay.Time = time.Second; c.Limit = 16 }))
	for i := 0; i < 20; i++ {
		r.push(frame(t, rawESP4, uint32(i), 64))
	}
	if c := r.s.Counters(); c.Overflow != 4 || r.s.InFlight() != 16 {
		t.Fatalf("overflow %d in flight %d, want 4 and 16", c.Overflow, r.s.InFlight())
	}
	checkConservation(t, r.s)
}

func TestNoAllocs(t *testing.T) {
	r := newRun(t, cfgWith(func(c *Config) {
		c.Loss = 5
		c.Corrupt = Corrupt{Percent: 20, Bytes: 3, From: 8}
		c.Reorder = Reorder{Percent: 10, Depth: 3, MaxHold: time.Second}
		c.Burst = Burst{P: 1, R: 20, LossBad: 100}
	}))
	f := frame(t, udpESP4, 1, 1400)
	step := func() {
		r.s.Push(r.now, f)
		for p := r.s.Pop(r.now); p != nil; p = r.s.Pop(r.now) {
			r.s.Release(p)
		}
		r.now = r.now.Add(time.Microsecond)
	}
	for i := 0; i < 5000; i++ { // warm the pool and rings
		step()
	}
	if a := testing.AllocsPerRun(5000, step); a != 0 {
		t.Fatalf("%v allocations per packet, want 0", a)
	}
}

func BenchmarkStage(b *testing.B) {
	s, _ := New(cfgWith(func(c *Config) { c.Loss = 1; c.Corrupt.Percent = 1; c.Reorder.Percent = 1 }), Ethernet, 2048)
	f := frame(b, udpESP4, 1, 1400)
	now := time.Unix(0, 0)
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		s.Push(now, f)
		for p := s.Pop(now); p != nil; p = s.Pop(now) {
			s.Release(p)
		}
	}
}

// With packets further apart than the jitter's span, each wait is its own
// uniform draw in [Time-Jitter, Time+Jitter]: check mean, spread and bounds.
func TestJitterUniform(t *testing.T) {
	d := Delay{Time: 3 * time.Millisecond, Jitter: time.Millisecond}
	r := newRun(t, cfgWith(func(c *Config) { c.Delay = d }))
	const n = 4000
	var waits []float64
	for i := 0; i < n; i++ {
		start := r.now
		r.s.Push(r.now, frame(t, rawESP4, uint32(i), 64))
		next, ok := r.s.Next()
		if !ok {
			t.Fatal("a delayed packet has no due time")
		}
		r.now = next
		r.drain()
		if len(r.out) != i+1 {
			t.Fatalf("packet %d not out at its due time", i)
		}
		waits = append(waits, float64(r.now.Sub(start))/float64(time.Millisecond))
		r.now = r.now.Add(5 * time.Millisecond) // beyond the jitter's span
	}
	var sum, sq, lo, hi float64 = 0, 0, 1e9, 0
	for _, w := range waits {
		sum += w
		lo, hi = min(lo, w), max(hi, w)
	}
	mean := sum / n
	for _, w := range waits {
		sq += (w - mean) * (w - mean)
	}
	sd := math.Sqrt(sq / n)
	wantSD := 2.0 / math.Sqrt(12) // uniform over 2 ms
	if math.Abs(mean-3) > 5*wantSD/math.Sqrt(n) || math.Abs(sd-wantSD) > 0.05*wantSD {
		t.Errorf("waits mean %.3f ms sd %.3f ms, want 3 ms and %.3f ms", mean, sd, wantSD)
	}
	if lo < 2 || hi > 4 || lo > 2.01 || hi < 3.99 {
		t.Errorf("waits span [%.3f, %.3f] ms, want [2, 4]", lo, hi)
	}
}

// A duplicate leaves right behind its original.
func TestDuplicateFollows(t *testing.T) {
	r := newRun(t, cfgWith(func(c *Config) { c.Duplicate = 20 }))
	r.feed(t, udpESP6, 2000)
	dups := 0
	for i := 1; i < len(r.out); i++ {
		if bytes.Equal(r.out[i], r.out[i-1]) {
			dups++
		}
	}
	if c := r.s.Counters(); uint64(dups) != c.Duplicated {
		t.Fatalf("%d adjacent copies, counters say %d duplicated", dups, c.Duplicated)
	}
}

// With ike in match, IKE messages (UDP 500, and 4500 behind the non-ESP
// marker) are impaired and counted as IKE; NAT keepalives and ESP in UDP
// are not IKE, and ESP stays unmatched unless named.
func TestMatchIKE(t *testing.T) {
	ser := func(ls ...gopacket.SerializableLayer) []byte { return serialize(t, ls...) }
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	ip4 := func() *layers.IPv4 {
		return &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{192, 0, 2, 1}, DstIP: []byte{192, 0, 2, 2}}
	}
	udp := func(port layers.UDPPort) *layers.UDP { return &layers.UDP{SrcPort: port, DstPort: port} }
	ike500 := ser(eth, ip4(), udp(500), gopacket.Payload(make([]byte, 40)))
	ike4500 := ser(eth, ip4(), udp(4500), gopacket.Payload(make([]byte, 44)))
	keepalive := ser(eth, ip4(), udp(4500), gopacket.Payload([]byte{0xff}))
	r := newRun(t, cfgWith(func(c *Config) { c.Match = []string{"ike"}; c.Loss = 100 }))
	for _, f := range [][]byte{ike500, ike4500, keepalive, frame(t, udpESP4, 1, 64), frame(t, rawESP4, 2, 64)} {
		r.push(f)
	}
	c := r.s.Counters()
	if c.Matched != 2 || c.IKEMatched != 2 || c.IKEDropped != 2 || c.Lost != 2 || len(r.out) != 3 {
		t.Errorf("IKE not matched, or more than IKE: %+v, %d passed", c, len(r.out))
	}
	// Held IKE messages are told apart from held ESP.
	r = newRun(t, cfgWith(func(c *Config) { c.Match = []string{"ike", "esp"}; c.Delay.Time = time.Hour }))
	r.push(ike500)
	r.push(frame(t, rawESP4, 3, 64))
	if r.s.InFlight() != 2 || r.s.IKEInFlight() != 1 {
		t.Errorf("in flight %d, IKE among them %d; want 2 and 1", r.s.InFlight(), r.s.IKEInFlight())
	}
	if err := (&Config{Match: []string{"ike"}, Replay: Replay{Percent: 5}, Limit: 10}).Validate(); err == nil || !strings.Contains(err.Error(), "match has ike") {
		t.Errorf("replay of IKE: %v", err)
	}
}
