package kernelpeer

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// StateStats is one SA as `ip -s xfrm state list nokeys` shows it: its
// identity, its sequence numbers and the kernel's per-SA counters.
type StateStats struct {
	Src, Dst netip.Addr
	SPI      uint32
	ReqID    uint32
	Mode     string
	ESN      bool
	Encap    string // "espinudp" for UDP encapsulation, "" for raw ESP

	// Seq is the highest sequence number received, OSeq the last one
	// sent; with ESN both carry the high 32 bits.
	Seq, OSeq    uint64
	ReplayWindow int

	// Bytes and Packets count what the SA processed successfully.
	Bytes, Packets uint64

	// The kernel's error counters for the SA: packets outside the replay
	// window, replayed packets, and integrity (ICV) failures.
	ReplayWindowDrops, Replayed, IntegrityFailed uint64
}

// ParseStates reads the output of `ip -s xfrm state list nokeys`.
func ParseStates(out string) ([]StateStats, error) {
	var states []StateStats
	var cur *StateStats
	sc := bufio.NewScanner(strings.NewReader(out))
	section := ""
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(err error) error {
			return fmt.Errorf("parse ip xfrm state line %d %q: %w", lineNo, strings.TrimSpace(line), err)
		}
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			if f[0] != "src" || len(f) < 4 || f[2] != "dst" {
				return nil, bad(fmt.Errorf("want a state header \"src A dst B\""))
			}
			states = append(states, StateStats{})
			cur = &states[len(states)-1]
			var err error
			if cur.Src, err = netip.ParseAddr(f[1]); err != nil {
				return nil, bad(err)
			}
			if cur.Dst, err = netip.ParseAddr(f[3]); err != nil {
				return nil, bad(err)
			}
			section = ""
			continue
		}
		if cur == nil {
			return nil, bad(fmt.Errorf("indented line before any state"))
		}
		var err error
		switch {
		case f[0] == "proto" && len(f) >= 8:
			cur.SPI, err = parseParenHex(f[3])
			if err == nil {
				cur.ReqID, err = parseLeadingUint32(f[5])
			}
			cur.Mode = f[7]
		case f[0] == "replay-window" && len(f) >= 2 && section == "":
			cur.ReplayWindow, err = strconv.Atoi(f[1])
			cur.ESN = strings.Contains(line, "flag") && hasWord(f, "esn")
		case f[0] == "encap" && len(f) >= 3:
			cur.Encap = f[2]
		case f[0] == "anti-replay" && len(f) >= 3 && f[1] == "context:":
			// anti-replay context: seq 0x1, oseq 0x0, bitmap 0x00000001
			kv := pairs(f[2:])
			cur.Seq, err = parseHex(kv["seq"])
			if err == nil {
				cur.OSeq, err = parseHex(kv["oseq"])
			}
		case f[0] == "anti-replay" && hasWord(f, "esn"):
			section = "esn"
		case section == "esn" && f[0] == "seq-hi":
			// seq-hi 0x1, seq 0x10, oseq-hi 0x1, oseq 0x10
			kv := pairs(f)
			var hi, lo, ohi, olo uint64
			for _, x := range []struct {
				dst *uint64
				key string
			}{{&hi, "seq-hi"}, {&lo, "seq"}, {&ohi, "oseq-hi"}, {&olo, "oseq"}} {
				if err == nil {
					*x.dst, err = parseHex(kv[x.key])
				}
			}
			cur.Seq, cur.OSeq = hi<<32|lo, ohi<<32|olo
		case section == "esn" && f[0] == "replay_window" && len(f) >= 2:
			cur.ReplayWindow, err = strconv.Atoi(strings.TrimSuffix(f[1], ","))
		case f[0] == "lifetime" && len(f) >= 2 && f[1] == "current:":
			section = "current"
		case section == "current" && strings.HasSuffix(f[0], "(bytes),"):
			// 84(bytes), 1(packets)
			cur.Bytes, err = strconv.ParseUint(strings.TrimSuffix(f[0], "(bytes),"), 10, 64)
			if err == nil && len(f) >= 2 {
				cur.Packets, err = strconv.ParseUint(strings.TrimSuffix(f[1], "(packets)"), 10, 64)
			}
		case f[0] == "stats:":
			section = "stats"
		case section == "stats" && f[0] == "replay-window" && len(f) >= 6:
			// replay-window 0 replay 0 failed 0
			kv := pairs(f)
			for _, x := range []struct {
				dst *uint64
				key string
			}{{&cur.ReplayWindowDrops, "replay-window"}, {&cur.Replayed, "replay"}, {&cur.IntegrityFailed, "failed"}} {
				if err == nil {
					*x.dst, err = strconv.ParseUint(kv[x.key], 10, 64)
				}
			}
		case f[0] == "sel" || f[0] == "lifetime" || f[0] == "auth-trunc" || f[0] == "enc" || f[0] == "aead" || f[0] == "auth":
			if section != "stats" {
				section = ""
			}
		}
		if err != nil {
			return nil, bad(err)
		}
	}
	for i := range states {
		if states[i].SPI == 0 {
			return nil, fmt.Errorf("parse ip xfrm state: state %d (%s→%s) has no \"proto … spi\" line", i, states[i].Src, states[i].Dst)
		}
	}
	return states, nil
}

// pairs reads "k1 v1, k2 v2" word lists into a map, dropping commas.
func pairs(f []string) map[string]string {
	kv := map[string]string{}
	for i := 0; i+1 < len(f); i += 2 {
		kv[f[i]] = strings.TrimSuffix(f[i+1], ",")
	}
	return kv
}

func hasWord(f []string, w string) bool {
	for _, x := range f {
		if x == w {
			return true
		}
	}
	return false
}

func parseHex(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("missing number")
	}
	return strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
}

// parseParenHex reads "0x00001001(4097)".
func parseParenHex(s string) (uint32, error) {
	h, _, _ := strings.Cut(s, "(")
	v, err := strconv.ParseUint(strings.TrimPrefix(h, "0x"), 16, 32)
	return uint32(v), err
}

// parseLeadingUint32 reads "4097(0x00001001)".
func parseLeadingUint32(s string) (uint32, error) {
	d, _, _ := strings.Cut(s, "(")
	v, err := strconv.ParseUint(d, 10, 32)
	return uint32(v), err
}

// State returns the state with this SPI and destination, or nil.
func State(states []StateStats, dst netip.Addr, spi uint32) *StateStats {
	for i := range states {
		if states[i].SPI == spi && states[i].Dst == dst {
			return &states[i]
		}
	}
	return nil
}

// XfrmStat is the kernel's global XFRM error counters, /proc/net/xfrm_stat
// (Documentation/networking/xfrm_proc.rst). Every counter counts a
// packet dropped for the reason it names.
type XfrmStat struct {
	InError, InBufferError, InHdrError, InNoStates                     uint64
	InStateProtoError, InStateModeError, InStateSeqError               uint64
	InStateExpired, InStateMismatch, InStateInvalid                    uint64
	InTmplMismatch, InNoPols, InPolBlock, InPolError                   uint64
	OutError, OutBundleGenError, OutBundleCheckError, OutNoStates      uint64
	OutStateProtoError, OutStateModeError, OutStateSeqError            uint64
	OutStateExpired, OutPolBlock, OutPolDead, OutPolError, FwdHdrError uint64
	OutStateInvalid, AcquireError                                      uint64
	// Other holds counters this struct does not name (newer kernels).
	Other map[string]uint64
}

// fields pairs each counter with its name in /proc/net/xfrm_stat.
func (x *XfrmStat) fields() []namedCounter {
	return []namedCounter{
		{"XfrmInError", &x.InError}, {"XfrmInBufferError", &x.InBufferError},
		{"XfrmInHdrError", &x.InHdrError}, {"XfrmInNoStates", &x.InNoStates},
		{"XfrmInStateProtoError", &x.InStateProtoError}, {"XfrmInStateModeError", &x.InStateModeError},
		{"XfrmInStateSeqError", &x.InStateSeqError}, {"XfrmInStateExpired", &x.InStateExpired},
		{"XfrmInStateMismatch", &x.InStateMismatch}, {"XfrmInStateInvalid", &x.InStateInvalid},
		{"XfrmInTmplMismatch", &x.InTmplMismatch}, {"XfrmInNoPols", &x.InNoPols},
		{"XfrmInPolBlock", &x.InPolBlock}, {"XfrmInPolError", &x.InPolError},
		{"XfrmOutError", &x.OutError}, {"XfrmOutBundleGenError", &x.OutBundleGenError},
		{"XfrmOutBundleCheckError", &x.OutBundleCheckError}, {"XfrmOutNoStates", &x.OutNoStates},
		{"XfrmOutStateProtoError", &x.OutStateProtoError}, {"XfrmOutStateModeError", &x.OutStateModeError},
		{"XfrmOutStateSeqError", &x.OutStateSeqError}, {"XfrmOutStateExpired", &x.OutStateExpired},
		{"XfrmOutPolBlock", &x.OutPolBlock}, {"XfrmOutPolDead", &x.OutPolDead},
		{"XfrmOutPolError", &x.OutPolError}, {"XfrmFwdHdrError", &x.FwdHdrError},
		{"XfrmOutStateInvalid", &x.OutStateInvalid}, {"XfrmAcquireError", &x.AcquireError},
	}
}

type namedCounter struct {
	name string
	v    *uint64
}

// ParseXfrmStat reads /proc/net/xfrm_stat.
func ParseXfrmStat(s string) (XfrmStat, error) {
	var x XfrmStat
	byName := map[string]*uint64{}
	for _, f := range x.fields() {
		byName[f.name] = f.v
	}
	n := 0
	for i, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return XfrmStat{}, fmt.Errorf("parse xfrm_stat line %d %q: want NAME VALUE", i+1, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return XfrmStat{}, fmt.Errorf("parse xfrm_stat line %d %q: %w", i+1, line, err)
		}
		if p, ok := byName[f[0]]; ok {
			*p = v
		} else {
			if x.Other == nil {
				x.Other = map[string]uint64{}
			}
			x.Other[f[0]] = v
		}
		n++
	}
	if n == 0 {
		return XfrmStat{}, fmt.Errorf("parse xfrm_stat: no counters")
	}
	return x, nil
}

// Sub returns the counters' increase since prev.
func (x XfrmStat) Sub(prev XfrmStat) XfrmStat {
	var d XfrmStat
	df, xf, pf := d.fields(), x.fields(), prev.fields()
	for i := range df {
		*df[i].v = *xf[i].v - *pf[i].v
	}
	for k, v := range x.Other {
		if v != prev.Other[k] {
			if d.Other == nil {
				d.Other = map[string]uint64{}
			}
			d.Other[k] = v - prev.Other[k]
		}
	}
	return d
}

// NonZero lists the counters that are not zero, by kernel name.
func (x XfrmStat) NonZero() map[string]uint64 {
	m := map[string]uint64{}
	for _, f := range x.fields() {
		if *f.v != 0 {
			m[f.name] = *f.v
		}
	}
	for k, v := range x.Other {
		if v != 0 {
			m[k] = v
		}
	}
	return m
}

// Counters is a snapshot of the guest kernel's XFRM counters.
type Counters struct {
	States []StateStats
	Stat   XfrmStat
}

// State returns the SA with this SPI and destination, or nil.
func (c Counters) State(dst netip.Addr, spi uint32) *StateStats { return State(c.States, dst, spi) }

const counterSeparator = "=== xfrm_stat ==="

// Counters reads every SA's counters and the global ones in one round
// trip. The listing hides keys (nokeys), so it may be logged.
func (p *Peer) Counters(ctx context.Context) (Counters, error) {
	out, err := p.Run(ctx, "ip -s xfrm state list nokeys && echo '"+counterSeparator+"' && cat /proc/net/xfrm_stat")
	if err != nil {
		return Counters{}, fmt.Errorf("read the kernel peer's XFRM counters: %w", err)
	}
	states, stat, ok := strings.Cut(out, counterSeparator+"\n")
	if !ok {
		return Counters{}, fmt.Errorf("read the kernel peer's XFRM counters: no separator in %q", tail(out, 300))
	}
	var c Counters
	if c.States, err = ParseStates(states); err != nil {
		return Counters{}, err
	}
	if c.Stat, err = ParseXfrmStat(stat); err != nil {
		return Counters{}, err
	}
	return c, nil
}
