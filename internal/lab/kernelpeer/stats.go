package kernelpeer

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/espgw/espgw/sa"
)

// XfrmStat is the kernel's global XFRM error counters, /proc/net/xfrm_stat
// (Documentation/networking/xfrm_proc.rst), by their kernel names
// (XfrmInNoStates, …). Every counter counts a packet dropped for the
// reason it names.
type XfrmStat map[string]uint64

// ParseXfrmStat reads /proc/net/xfrm_stat.
func ParseXfrmStat(s string) (XfrmStat, error) {
	x := XfrmStat{}
	for i, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("parse xfrm_stat line %d %q: want NAME VALUE", i+1, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse xfrm_stat line %d %q: %w", i+1, line, err)
		}
		x[f[0]] = v
	}
	if len(x) == 0 {
		return nil, fmt.Errorf("parse xfrm_stat: no counters")
	}
	return x, nil
}

// Sub returns the counters that increased since prev, by how much.
func (x XfrmStat) Sub(prev XfrmStat) XfrmStat {
	d := XfrmStat{}
	for k, v := range x {
		if v != prev[k] {
			d[k] = v - prev[k]
		}
	}
	return d
}

// NonZero lists the counters that are not zero.
func (x XfrmStat) NonZero() map[string]uint64 {
	m := map[string]uint64{}
	for k, v := range x {
		if v != 0 {
			m[k] = v
		}
	}
	return m
}

// Counters is a snapshot of the guest kernel's XFRM counters: every state
// as `ip -s xfrm state list nokeys` shows it (sa.ParseXFRMStates) and the
// global counters.
type Counters struct {
	States []sa.XFRMState
	Stat   XfrmStat
}

// State returns the state with this SPI and destination, or nil.
func (c Counters) State(dst netip.Addr, spi uint32) *sa.XFRMState {
	for i := range c.States {
		if c.States[i].SPI == spi && c.States[i].Dst == dst {
			return &c.States[i]
		}
	}
	return nil
}

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
	// No state at all is no error: the guest may hold none yet.
	if strings.TrimSpace(states) != "" {
		if c.States, err = sa.ParseXFRMStates("the kernel peer's ip -s xfrm state", []byte(states)); err != nil {
			return Counters{}, err
		}
	}
	if c.Stat, err = ParseXfrmStat(stat); err != nil {
		return Counters{}, err
	}
	return c, nil
}

// Drops are what the kernel dropped on an inbound state: packets whose
// ICV failed, replayed packets, and packets behind the replay window.
type Drops struct{ IntegrityFailed, Replayed, OutsideWindow uint64 }

// CheckDrops says how the kernel's drops differ from want: on in's state,
// on every other state (none), and in /proc/net/xfrm_stat since before
// (XfrmInStateProtoError for the ICV failures, XfrmInStateSeqError for the
// rest, no other counter). With exact each count must be as wanted;
// without, at least as wanted, so a caller can wait for late packets
// before it checks exactly.
func (c Counters) CheckDrops(before Counters, in *sa.SA, want Drops, exact bool) error {
	ok := func(got, want uint64) bool { return got == want || !exact && got > want }
	var errs []string
	s := c.State(in.Dst, in.SPI)
	if s == nil {
		return fmt.Errorf("the kernel holds no state for SA %#x", in.SPI)
	}
	for _, o := range c.States {
		d, w := Drops{o.IntegrityFailed, o.Replayed, o.ReplayWindowDrops}, Drops{}
		if o.SPI == in.SPI && o.Dst == in.Dst {
			w = want
		}
		if !ok(d.IntegrityFailed, w.IntegrityFailed) || !ok(d.Replayed, w.Replayed) || !ok(d.OutsideWindow, w.OutsideWindow) {
			errs = append(errs, fmt.Sprintf("state %#x dropped %+v, want %+v", o.SPI, d, w))
		}
	}
	wantStat := XfrmStat{"XfrmInStateProtoError": want.IntegrityFailed, "XfrmInStateSeqError": want.Replayed + want.OutsideWindow}
	got := c.Stat.Sub(before.Stat)
	for k := range wantStat {
		got[k] = c.Stat[k] - before.Stat[k] // compared also when it did not rise
	}
	for k, v := range got {
		if !ok(v, wantStat[k]) {
			errs = append(errs, fmt.Sprintf("xfrm_stat %s rose by %d, want %d", k, v, wantStat[k]))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kernel drops: %s", strings.Join(errs, "; "))
	}
	return nil
}
