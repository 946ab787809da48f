package interop

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// Transfer is one TCP transfer checked byte for byte.
type Transfer = kernelpeer.Transfer

const (
	farPort  = 5001 // the guest's nc listener
	nearPort = 5002 // the Go listener on espgw's side
)

// SendToFar sends n random bytes over TCP from the tunnel's near end to
// busybox nc listening in the guest on far, and checks the guest's
// sha256sum of what it received against the sender's.
func (b *Bed) SendToFar(ctx context.Context, far netip.Addr, n int) (Transfer, error) {
	if b.tunnel == nil {
		return Transfer{}, errors.New("send to the kernel peer: no case configured")
	}
	return b.Peer.SendTCP(ctx, b.tunnel.Near, netip.AddrPortFrom(far, farPort), n, time.Minute)
}

// ReceiveFromFar has busybox nc in the guest send n random bytes to a
// listener at the tunnel's near end, and checks the received bytes
// against the guest's sha256sum of what it sent.
func (b *Bed) ReceiveFromFar(ctx context.Context, near netip.Addr, n int) (Transfer, error) {
	if b.tunnel == nil {
		return Transfer{}, errors.New("receive from the kernel peer: no case configured")
	}
	return b.Peer.ReceiveTCP(ctx, b.tunnel.Near, netip.AddrPortFrom(near, nearPort), n, time.Minute)
}

// PingNear pings dst from ns (espgw's side) with count requests of size
// payload bytes, 50 ms apart, waiting up to 15 s for the run and 5 s for
// late replies: a guest under TCG emulation answers with jitter far beyond
// testbed.Ping's defaults. IPv4 requests carry DF, so a too-small tunnel
// MTU shows as loss.
func PingNear(ctx context.Context, ns *netns.Namespace, dst netip.Addr, size, count int) (testbed.PingResult, error) {
	return testbed.Ping(ctx, ns, dst, testbed.PingOptions{Size: size, Count: count, Interval: 50 * time.Millisecond,
		Deadline: 15 * time.Second, Linger: 5 * time.Second})
}
