package interop

import (
	"context"
	"net/netip"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// The TCP transfers' ports (kernelpeer.Peer.SendTCP, ReceiveTCP).
const (
	farPort  = 5001 // the guest's nc listener
	nearPort = 5002 // the Go listener on espgw's side
)

// PingNear pings dst from ns (espgw's side) with count requests of size
// payload bytes, 50 ms apart, waiting up to 15 s for the run and 5 s for
// late replies: a guest under TCG emulation answers with jitter far beyond
// testbed.Ping's defaults. IPv4 requests carry DF, so a too-small tunnel
// MTU shows as loss.
func PingNear(ctx context.Context, ns *netns.Namespace, dst netip.Addr, size, count int) (testbed.PingResult, error) {
	return testbed.Ping(ctx, ns, dst, testbed.PingOptions{Size: size, Count: count, Interval: 50 * time.Millisecond,
		Deadline: 15 * time.Second, Linger: 5 * time.Second})
}
