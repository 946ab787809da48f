// Package labtest is what the lab's tests and the end-to-end tests share.
//
// It holds what the lab's tests and the end-to-end tests share: the espgw
// command built once per test binary, fixtures made once per test binary
// (Shared: a QEMU guest, a test bed), the small hostA — wan — hostB bed of
// the relay's and the replay's tests (Chain), tshark's checksum verdict on a
// capture (TsharkFlags), and the checks that fail a test saying plainly why
// it cannot run here (not root, no network namespaces, a tool missing). Only
// tests import it.
package labtest

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/espgw/espgw/internal/lab/netns"
)

// built is the one espgw build of this test binary. It is package state
// because a test binary is one process whose tests all want the same
// command, and building it per test costs seconds each on a shared machine.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// Espgw is the path of the espgw command built from this tree, built on
// the first call of the test binary; a build that fails fails t. A test
// binary that calls it removes the build with Main or Cleanup.
func Espgw(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "espgw-test-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "espgw")
		if out, err := exec.Command("go", "build", "-o", built.path, "github.com/espgw/espgw/cmd/espgw").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build espgw: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// Built is the path Espgw built, or "" when no test asked for it.
func Built() string { return built.path }

// Cleanup removes what Espgw built.
func Cleanup() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// Main is a TestMain with nothing else to do: it runs the tests, removes
// what Espgw built and exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// NeedNamespaces fails t where network namespaces cannot be built here:
// not root, or no iproute2.
func NeedNamespaces(t testing.TB) {
	t.Helper()
	if err := netns.CheckPrerequisites(); err != nil {
		t.Fatalf("this test needs root, network namespaces and iproute2: %v", err)
	}
}

// Chain is hostA — wan — hostB for a test: three namespaces of a fresh
// netns.Bed under prefix, joined by the veth pairs a0–wa and b0–wb, all
// removed when the test ends. silentWAN turns IPv6 off in wan before its
// links exist, so that a wan with no addresses (a bridge) sends nothing of
// its own on the wire.
func Chain(t testing.TB, prefix string, silentWAN bool) (a, wan, b *netns.Namespace) {
	t.Helper()
	NeedNamespaces(t)
	bed, err := netns.New(prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	var ns [3]*netns.Namespace
	for i, name := range []string{"a", "w", "b"} {
		if ns[i], err = bed.AddNamespace(name); err != nil {
			t.Fatal(err)
		}
	}
	if silentWAN {
		if err := ns[1].Sysctl(map[string]string{"net/ipv6/conf/default/disable_ipv6": "1", "net/ipv6/conf/all/disable_ipv6": "1"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []struct {
		host       *netns.Namespace
		link, port string
	}{{ns[0], "a0", "wa"}, {ns[2], "b0", "wb"}} {
		if err := bed.Connect(l.host, l.link, ns[1], l.port, netns.LinkOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns[0], ns[1], ns[2]
}

// Address gives link in ns the prefixes (address and length, as
// "192.0.2.1/24").
func Address(t testing.TB, ns *netns.Namespace, link string, prefixes ...string) {
	t.Helper()
	for _, p := range prefixes {
		if err := ns.AddAddr(link, netip.MustParsePrefix(p)); err != nil {
			t.Fatal(err)
		}
	}
}

// packages names the Debian package of each tool the lab's tests run, for
// the failure message.
var packages = map[string]string{
	"ip": "iproute2", "ping": "iputils-ping", "iperf3": "iperf3", "tcpdump": "tcpdump", "tshark": "tshark",
	"python3": "python3-scapy", "/usr/bin/python3": "python3-scapy", "qemu-system-x86_64": "qemu-system-x86",
	"wg": "wireguard-tools", "go": "golang",
}

// NeedTools fails t, naming the package to install, for each of tools
// that is not on PATH.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			pkg := packages[tool]
			if pkg == "" {
				pkg = filepath.Base(tool)
			}
			t.Fatalf("this test needs %s (apt-get install -y %s; scripts/setup.sh installs every tool): %v", tool, pkg, err)
		}
	}
}

// TsharkFlags returns tshark's summary of the packets in the capture file
// that are malformed or carry an IP, TCP, UDP, ICMP or ICMPv6 checksum that
// does not verify, and of those that also match the display filter more
// (when not ""): "" when tshark, an independent dissector, finds nothing
// wrong.
func TsharkFlags(t testing.TB, file, more string) string {
	t.Helper()
	NeedTools(t, "tshark")
	filter := "_ws.malformed || ip.checksum.status == 0 || tcp.checksum.status == 0 || udp.checksum.status == 0 || " +
		"icmp.checksum.status == 0 || icmpv6.checksum.status == 0"
	if more != "" {
		filter += " || " + more
	}
	out, err := exec.Command("tshark", "-n", "-r", file, "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
		"-o", "udp.check_checksum:TRUE", "-Y", filter).Output()
	if err != nil {
		t.Fatalf("tshark on %s: %v\n%s", file, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Shared is a fixture costly enough to make once for every test of the
// binary that asks for it (a QEMU guest, a test bed): the first Get makes
// it, the others get the same one, and TestMain closes it with Close.
type Shared[T any] struct {
	once sync.Once
	v    T
	err  error
	made bool
}

// Get makes the fixture on first use, and fails t, saying what is
// unavailable and why, when it could not be made (then, for every test).
func (s *Shared[T]) Get(t testing.TB, what string, build func() (T, error)) T {
	t.Helper()
	s.once.Do(func() {
		s.v, s.err = build()
		s.made = s.err == nil
	})
	if s.err != nil {
		t.Fatalf("%s unavailable: %v", what, s.err)
	}
	return s.v
}

// Made is the fixture, and whether Get made it.
func (s *Shared[T]) Made() (T, bool) { return s.v, s.made }

// Close closes the fixture (named what) with closeFn if Get made it; a
// failure is printed and sets *code to 1, so that the test binary fails.
func (s *Shared[T]) Close(code *int, what string, closeFn func(T) error) {
	if !s.made {
		return
	}
	if err := closeFn(s.v); err != nil {
		fmt.Fprintf(os.Stderr, "close %s: %v\n", what, err)
		*code = 1
	}
}
