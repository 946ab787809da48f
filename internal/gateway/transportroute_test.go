package gateway

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestTransportRulesSurviveAKill: a transport-mode gateway killed with -9
// leaves its policy rule behind; the next start recognises it and replaces
// it, where it failed with "file exists". Run in a namespace of its own.
func TestTransportRulesSurviveAKill(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatalf("needs network namespaces (root): %v", err)
	}
	defer orig.Close()
	ns, err := netns.New() // also switches this thread into it
	if err != nil {
		t.Fatalf("needs network namespaces (root): %v", err)
	}
	defer func() {
		netns.Set(orig)
		ns.Close()
	}()
	for _, run := range []string{"first", "after a kill"} {
		// Each run has its TUN; a veth stands in for it, gone with the
		// run as a TUN goes with its process.
		link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "espgw-t0"}, PeerName: "espgw-t1"}
		if err := netlink.LinkAdd(link); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		// The routes' source must be a local address, as the SAs' are.
		for _, a := range []string{"198.51.100.1/24", "2001:db8::1/64"} {
			addr, _ := netlink.ParseAddr(a)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(link, addr); err != nil {
				t.Fatal(err)
			}
		}
		peers := []peerRoute{
			{peer: netip.MustParseAddr("198.51.100.2"), local: netip.MustParseAddr("198.51.100.1")},
			{peer: netip.MustParseAddr("2001:db8::2"), local: netip.MustParseAddr("2001:db8::1")},
		}
		rules, err := routeTransportPeers("espgw-t0", peers)
		if err != nil {
			t.Fatalf("%s start: %v", run, err)
		}
		if len(rules) != 2 {
			t.Fatalf("%s start: %d rules, want one per family", run, len(rules))
		}
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			if got, _ := staleTransportRules(fam); len(got) != 1 {
				t.Errorf("%s start: %d transport rules of family %d, want 1", run, len(got), fam)
			}
		}
		// kill -9: the rules stay, the TUN goes.
		if err := netlink.LinkDel(link); err != nil {
			t.Fatal(err)
		}
	}
}
