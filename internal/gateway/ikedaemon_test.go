package gateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
)

// TestConnFor checks which connection a datagram goes to: the first, in
// the config's order, whose local addresses hold its destination and whose
// remote_addrs hold its source or are none.
func TestConnFor(t *testing.T) {
	a := netip.MustParseAddr
	d := &ikeDaemon{byAddrs: map[addrPair]int{}}
	for _, cc := range []*IKEConnection{
		{Name: "named", LocalAddrs: []netip.Addr{a("192.0.2.1")}, RemoteAddrs: []netip.Addr{a("198.51.100.1"), a("198.51.100.2")}},
		{Name: "any", LocalAddrs: []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}},
		{Name: "after-any", LocalAddrs: []netip.Addr{a("192.0.2.2")}, RemoteAddrs: []netip.Addr{a("198.51.100.3")}},
		{Name: "again", LocalAddrs: []netip.Addr{a("192.0.2.1")}, RemoteAddrs: []netip.Addr{a("198.51.100.1")}},
		{Name: "v6", LocalAddrs: []netip.Addr{a("2001:db8::1")}, RemoteAddrs: []netip.Addr{a("2001:db8::2")}},
	} {
		d.add(&ikeConn{d: d, cfg: cc})
	}
	for _, tc := range []struct {
		local, remote, want string
	}{
		{"192.0.2.1", "198.51.100.1", "named"},
		{"192.0.2.1", "198.51.100.2", "named"},
		{"192.0.2.1", "198.51.100.9", "any"},
		{"192.0.2.2", "198.51.100.3", "any"}, // any comes first in the config
		{"2001:db8::1", "2001:db8::2", "v6"},
		{"2001:db8::1", "2001:db8::3", ""},
		{"203.0.113.1", "198.51.100.1", ""},
	} {
		dg := ike.Datagram{Local: netip.AddrPortFrom(a(tc.local), ike.Port), Remote: netip.AddrPortFrom(a(tc.remote), ike.Port)}
		got := ""
		if c := d.connFor(dg); c != nil {
			got = c.cfg.Name
		}
		if got != tc.want {
			t.Errorf("datagram %s → %s: connection %q, want %q", tc.remote, tc.local, got, tc.want)
		}
	}
	if d.unknownPeer != 2 {
		t.Errorf("unknown peers counted %d, want 2", d.unknownPeer)
	}
}

// TestTakeDue checks the timer heap: a tick takes the connections due by
// then, soonest first, each once, and an entry superseded by an earlier
// wake is not taken again.
func TestTakeDue(t *testing.T) {
	d := &ikeDaemon{wake: time.NewTimer(time.Hour)}
	defer d.wake.Stop()
	t0 := time.Now()
	c1, c2, c3 := &ikeConn{d: d}, &ikeConn{d: d}, &ikeConn{d: d}
	c1.wakeBy(t0.Add(3 * time.Second))
	c1.wakeBy(t0.Add(time.Second)) // sooner: the 3 s entry goes stale
	c1.wakeBy(t0.Add(5 * time.Second))
	c2.wakeBy(t0.Add(2 * time.Second))
	c3.wakeBy(t0.Add(10 * time.Second))
	c3.wakeBy(time.Time{}) // zero: nothing
	if !d.wakeAt.Equal(t0.Add(time.Second)) {
		t.Errorf("daemon wakes at %v, want t0+1s", d.wakeAt.Sub(t0))
	}
	for _, step := range []struct {
		at   time.Duration
		want []*ikeConn
	}{
		{500 * time.Millisecond, nil},
		{4 * time.Second, []*ikeConn{c1, c2}},
		{6 * time.Second, nil}, // c1's 3 s entry is stale
		{11 * time.Second, []*ikeConn{c3}},
	} {
		got := d.takeDue(t0.Add(step.at))
		if len(got) != len(step.want) {
			t.Fatalf("at t0+%v: %d connections due, want %d", step.at, len(got), len(step.want))
		}
		for i := range got {
			if got[i] != step.want[i] {
				t.Errorf("at t0+%v: due connection %d is not the one expected", step.at, i)
			}
		}
	}
	if len(d.due) != 0 {
		t.Errorf("%d entries left in the heap", len(d.due))
	}
	c1.wakeBy(t0.Add(20 * time.Second)) // taken, so due again
	if got := d.takeDue(t0.Add(21 * time.Second)); len(got) != 1 || got[0] != c1 {
		t.Errorf("a connection taken from the heap and woken again is not due: %d due", len(got))
	}
}

// TestRekeyBeforeCheck: what an idle IKE SA is due for — its own rekey
// first, then a liveness check, unless one of its CHILD_SAs is due for a
// rekey (that exchange goes first and proves the peer alive); a busy or
// redundant CHILD_SA, or one of another IKE SA, holds no check back.
func TestRekeyBeforeCheck(t *testing.T) {
	now := time.Now()
	s, other := &ike.IKESA{}, &ike.IKESA{}
	installed := now.Add(-time.Minute)
	childDue := &childTrack{owner: s, installed: installed, rekeyAt: now.Add(-time.Second)}
	for _, tc := range []struct {
		name       string
		ikeRekeyAt time.Time
		lastCheck  time.Time
		children   []*childTrack
		want       saDue
	}{
		{"nothing due", now.Add(time.Hour), now, nil, saWait},
		{"check due", now.Add(time.Hour), now.Add(-11 * time.Second), nil, saCheck},
		{"IKE SA rekey and check due", now.Add(-time.Second), now.Add(-11 * time.Second), nil, saRekey},
		{"CHILD_SA rekey and check due", now.Add(time.Hour), now.Add(-11 * time.Second), []*childTrack{childDue}, saWait},
		{"CHILD_SA rekey not yet due", now.Add(time.Hour), now.Add(-11 * time.Second),
			[]*childTrack{{owner: s, installed: installed, rekeyAt: now.Add(time.Second)}}, saCheck},
		{"CHILD_SA being rekeyed", now.Add(time.Hour), now.Add(-11 * time.Second),
			[]*childTrack{{owner: s, installed: installed, rekeyAt: now.Add(-time.Second), busy: true}}, saCheck},
		{"redundant CHILD_SA", now.Add(time.Hour), now.Add(-11 * time.Second),
			[]*childTrack{{owner: s, installed: installed, rekeyAt: now.Add(-time.Second), redundant: true}}, saCheck},
		{"another IKE SA's CHILD_SA", now.Add(time.Hour), now.Add(-11 * time.Second),
			[]*childTrack{{owner: other, installed: installed, rekeyAt: now.Add(-time.Second)}}, saCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &ikeConn{cfg: &IKEConnection{RekeyTime: time.Hour, DPDDelay: 10 * time.Second}, children: map[*ike.Child]*childTrack{}}
			for _, ct := range tc.children {
				c.children[&ike.Child{}] = ct
			}
			got := c.saDue(now, &saTrack{rekeyAt: tc.ikeRekeyAt, lastCheck: tc.lastCheck}, c.childRekeysDue(now)[s])
			if got != tc.want {
				t.Errorf("due %d, want %d", got, tc.want)
			}
		})
	}
}
