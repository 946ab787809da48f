package e2e_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/netns"
)

// sniffed watches ifname in ns until the test ends and keeps what pick
// makes of each IP packet it takes; the function it returns lists them so
// far, in wire order.
func sniffed[T any](t *testing.T, ns *netns.Namespace, ifname string, pick func(ip []byte) (T, bool)) func() []T {
	t.Helper()
	var mu sync.Mutex
	var got []T
	sn, err := capture.Sniff(ns, ifname, capture.SniffOptions{}, func(p capture.Sniffed) {
		if v, ok := pick(p.Data); ok {
			mu.Lock()
			got = append(got, v)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sn.Stop() })
	return func() []T {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}
