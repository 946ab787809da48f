package impair

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/lab/labyaml"
)

// Config says which impairments a Stage applies. Percentages are of the
// matching packets (0 to 100); a zero percentage turns an impairment off.
// Omitted YAML fields keep the documented defaults (DefaultConfig).
//
// The impairments apply in this order to each matching packet: the path
// MTU, loss, burst loss, ECN marking, SPI rewrite, corruption, truncation, duplication, replay capture,
// reorder, delay. Each draws from its own random stream derived from Seed, so
// turning one impairment on or off never changes which packets another one
// picks.
type Config struct {
	// Seed makes every decision reproducible: the same seed and the same
	// packet stream give the same output, byte for byte.
	Seed uint64 `yaml:"seed" json:"seed"`
	// Match lists the packets impaired: "esp" (IP protocol 50),
	// "udp/PORT" (ESP in UDP, RFC 3948) and "ike" (IKE messages on UDP
	// port 500, and on 4500 behind the non-ESP marker). Default [esp,
	// udp/4500]. Everything else (ARP, ND, ICMP, IKE unless named, NAT
	// keepalives, fragments) passes untouched and undelayed.
	Match []string `yaml:"match" json:"match"`
	// Loss drops each matching packet independently with this percentage.
	Loss float64 `yaml:"loss" json:"loss"`
	// Burst is Gilbert–Elliott burst loss, applied after Loss.
	Burst Burst `yaml:"burst" json:"burst"`
	// RewriteSPI overwrites the SPI field.
	RewriteSPI RewriteSPI `yaml:"rewrite_spi" json:"rewrite_spi"`
	// Corrupt flips bytes inside the ESP part.
	Corrupt Corrupt `yaml:"corrupt" json:"corrupt"`
	// Truncate shortens the ESP part.
	Truncate Truncate `yaml:"truncate" json:"truncate"`
	// Duplicate sends a second copy of the packet right after it
	// (percentage).
	Duplicate float64 `yaml:"duplicate" json:"duplicate"`
	// Replay sends copies of earlier packets again later.
	Replay Replay `yaml:"replay" json:"replay"`
	// Reorder holds packets back behind later ones.
	Reorder Reorder `yaml:"reorder" json:"reorder"`
	// Delay holds every matching packet for a time.
	Delay Delay `yaml:"delay" json:"delay"`
	// ECNCE sets the outer ECN field to CE on this percentage of the
	// matching packets (header.go).
	ECNCE float64 `yaml:"ecn-ce" json:"ecn_ce"`
	// PMTU, when not 0, drops matching packets longer than this many bytes
	// that may not be fragmented and answers each with ICMP
	// fragmentation-needed / packet-too-big (header.go).
	PMTU int `yaml:"pmtu" json:"pmtu"`
	// Limit bounds the packets the stage holds at once (delay queue,
	// reorder holds, replay copies, ready output). A packet that finds no
	// room is dropped and counted as Overflow. Default 4096.
	Limit int `yaml:"limit" json:"limit"`
}

// Burst is the Gilbert–Elliott two-state loss model (the model of netem's
// "loss gemodel p r 1-h 1-k"). Before each matching packet the chain moves
// from the good to the bad state with probability P and from bad to good
// with probability R; the packet is then lost with LossBad in the bad state
// and LossGood in the good state. All four are percentages.
//
// In the long run the chain is bad a fraction P/(P+R) of the packets, the
// mean loss is (P·LossBad + R·LossGood)/(P+R), and a stay in the bad state
// lasts 1/R packets on average (with LossBad 100 and LossGood 0, that is the
// mean burst length). Off when P is 0.
type Burst struct {
	P        float64 `yaml:"p" json:"p"`
	R        float64 `yaml:"r" json:"r"`
	LossBad  float64 `yaml:"loss_bad" json:"loss_bad"`   // default 100
	LossGood float64 `yaml:"loss_good" json:"loss_good"` // default 0
}

// RewriteSPI writes SPI into the SPI field of Percent of the matching
// packets (default 100 when SPI is set).
type RewriteSPI struct {
	Percent float64 `yaml:"percent" json:"percent"`
	SPI     uint32  `yaml:"spi" json:"spi"`
}

// Corrupt XORs Bytes distinct bytes (default 1) of Percent of the matching
// packets with random non-zero values. The offsets are drawn uniformly from
// [From, To) counted from the first byte of the ESP header; To ≤ 0 counts
// from the end of the packet (0 is the end, -16 spares a 16-byte ICV).
// The default From 8 spares the SPI and sequence number, so the packet still
// reaches its SA and fails the ICV check there. A packet whose range is
// narrower than Bytes gets every byte in the range flipped. A UDP checksum
// is recomputed so the stack delivers the corrupted datagram to ESP.
type Corrupt struct {
	Percent float64 `yaml:"percent" json:"percent"`
	Bytes   int     `yaml:"bytes" json:"bytes"`
	From    int     `yaml:"from" json:"from"`
	To      int     `yaml:"to" json:"to"`
}

// Truncate shortens the ESP part of Percent of the matching packets, either
// to To bytes (counted from the ESP header) or by By bytes; set one of them.
// The IP and UDP lengths and checksums are fixed, so the packet reaches ESP
// short. A packet already no longer than the result is left whole and not
// counted.
type Truncate struct {
	Percent float64 `yaml:"percent" json:"percent"`
	To      int     `yaml:"to" json:"to"`
	By      int     `yaml:"by" json:"by"`
}

// Replay keeps copies of Percent of the matching packets that leave the
// stage unmodified (not rewritten, corrupted or truncated: a replayed copy is
// a packet the receiver already accepted) and sends each copy again After
// later (default 10ms). At most History copies wait at once (default 1024);
// a packet picked while the history is full is not copied and counted as
// ReplaySkipped.
type Replay struct {
	Percent float64       `yaml:"percent" json:"percent"`
	After   time.Duration `yaml:"after" json:"after"`
	History int           `yaml:"history" json:"history"`
}

// Reorder holds back Percent of the matching packets and releases each one
// right after Depth later matching packets (default 3) have left the stage,
// so it arrives Depth places late. A held packet that sees fewer than Depth
// later packets within MaxHold (default 100ms) is released then; it counts as
// Reordered if at least one packet passed it, as ReorderExpired otherwise.
// At most MaxHeld packets (256) are held at once; a packet picked while the
// holds are full is not held and not counted.
type Reorder struct {
	Percent float64       `yaml:"percent" json:"percent"`
	Depth   int           `yaml:"depth" json:"depth"`
	MaxHold time.Duration `yaml:"max_hold" json:"max_hold"`
}

// MaxHeld bounds the packets Reorder holds at once.
const MaxHeld = 256

// Delay holds each matching packet for Time plus a uniform jitter in
// [-Jitter, +Jitter] (never below zero). Packets leave in the order they
// came: a packet whose draw would overtake the one before it waits for it,
// so jitter never reorders (Reorder does that, and counts it).
type Delay struct {
	Time   time.Duration `yaml:"time" json:"time"`
	Jitter time.Duration `yaml:"jitter" json:"jitter"`
}

// DefaultConfig returns a Config that impairs nothing, with every default
// filled in.
func DefaultConfig() Config {
	return Config{
		Seed:       1,
		Match:      []string{"esp", "udp/4500"},
		Burst:      Burst{LossBad: 100},
		RewriteSPI: RewriteSPI{Percent: 100},
		Corrupt:    Corrupt{Bytes: 1, From: 8},
		Replay:     Replay{After: 10 * time.Millisecond, History: 1024},
		Reorder:    Reorder{Depth: 3, MaxHold: 100 * time.Millisecond},
		Limit:      4096,
	}
}

// UnmarshalYAML decodes a Config over DefaultConfig, so omitted fields keep
// their defaults, and rejects unknown fields.
func (c *Config) UnmarshalYAML(node *yaml.Node) error {
	type plain Config
	p := plain(DefaultConfig())
	if err := labyaml.DecodeNode(node, &p); err != nil {
		return fmt.Errorf("impairments: %w", err)
	}
	*c = Config(p)
	return nil
}

// Validate reports the first field that is out of range, by its YAML name.
func (c *Config) Validate() error {
	m, err := parseMatch(c.Match)
	if err != nil {
		return err
	}
	if m.ike && (c.Replay.Percent > 0 || c.RewriteSPI.Percent > 0 && c.RewriteSPI.SPI != 0 || c.Truncate.Percent > 0) {
		return fmt.Errorf("match has ike: its messages take loss, burst, corrupt, duplicate, reorder and delay, not replay, rewrite_spi or truncate (impair ESP in a direction of its own)")
	}
	pcts := []struct {
		name string
		v    float64
	}{
		{"loss", c.Loss}, {"burst.p", c.Burst.P}, {"burst.r", c.Burst.R},
		{"burst.loss_bad", c.Burst.LossBad}, {"burst.loss_good", c.Burst.LossGood},
		{"rewrite_spi.percent", c.RewriteSPI.Percent}, {"corrupt.percent", c.Corrupt.Percent},
		{"truncate.percent", c.Truncate.Percent}, {"duplicate", c.Duplicate},
		{"replay.percent", c.Replay.Percent}, {"reorder.percent", c.Reorder.Percent},
		{"ecn-ce", c.ECNCE},
	}
	for _, p := range pcts {
		if !(p.v >= 0 && p.v <= 100) {
			return fmt.Errorf("%s %v: want a percentage 0-100", p.name, p.v)
		}
	}
	switch {
	case c.Burst.P > 0 && c.Burst.R == 0:
		return fmt.Errorf("burst.r is 0 with burst.p %v: the bad state would never end", c.Burst.P)
	case c.Corrupt.Percent > 0 && c.Corrupt.Bytes < 1:
		return fmt.Errorf("corrupt.bytes %d: want at least 1", c.Corrupt.Bytes)
	case c.Corrupt.From < 0:
		return fmt.Errorf("corrupt.from %d: want an offset ≥ 0 from the ESP header", c.Corrupt.From)
	case c.Corrupt.To > 0 && c.Corrupt.To <= c.Corrupt.From:
		return fmt.Errorf("corrupt.to %d is not after corrupt.from %d", c.Corrupt.To, c.Corrupt.From)
	case c.Truncate.Percent > 0 && (c.Truncate.To > 0) == (c.Truncate.By > 0):
		return fmt.Errorf("truncate: set exactly one of to (%d) and by (%d), positive", c.Truncate.To, c.Truncate.By)
	case c.Truncate.To < 0 || c.Truncate.By < 0:
		return fmt.Errorf("truncate.to %d / by %d: want byte counts ≥ 0", c.Truncate.To, c.Truncate.By)
	case c.Replay.After < 0:
		return fmt.Errorf("replay.after %v: want a duration ≥ 0", c.Replay.After)
	case c.Replay.Percent > 0 && c.Replay.History < 1:
		return fmt.Errorf("replay.history %d: want at least 1", c.Replay.History)
	case c.Reorder.Percent > 0 && (c.Reorder.Depth < 1 || c.Reorder.Depth > 100000):
		return fmt.Errorf("reorder.depth %d: want 1-100000", c.Reorder.Depth)
	case c.Reorder.MaxHold <= 0 && c.Reorder.Percent > 0:
		return fmt.Errorf("reorder.max_hold %v: want a duration > 0", c.Reorder.MaxHold)
	case c.Delay.Time < 0 || c.Delay.Jitter < 0:
		return fmt.Errorf("delay.time %v / jitter %v: want durations ≥ 0", c.Delay.Time, c.Delay.Jitter)
	case c.PMTU != 0 && (c.PMTU < 68 || c.PMTU > 65535):
		return fmt.Errorf("pmtu %d: want an MTU of 68-65535 bytes (0: off)", c.PMTU)
	case c.Limit < 16:
		return fmt.Errorf("limit %d: want at least 16 packets", c.Limit)
	}
	return nil
}
