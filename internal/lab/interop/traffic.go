package interop

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// Transfer is one TCP transfer checked byte for byte.
type Transfer struct {
	Bytes    int
	Duration time.Duration
}

const (
	farPort  = 5001 // the guest's nc listener
	nearPort = 5002 // the Go listener on espgw's side
)

var sha256Line = regexp.MustCompile(`(?m)^([0-9a-f]{64})\s`)

// SendToFar sends n random bytes over TCP from the tunnel's near end to
// busybox nc listening in the guest on far, and checks the guest's
// sha256sum of what it received against the sender's.
func (b *Bed) SendToFar(ctx context.Context, far netip.Addr, n int) (Transfer, error) {
	t := b.tunnel
	if t == nil {
		return Transfer{}, errors.New("send to the kernel peer: no case configured")
	}
	data := make([]byte, n)
	rand.Read(data)
	want := sha256.Sum256(data)
	// nc's stdin is /dev/null in the background: it half-closes at once
	// and exits when the sender's data ends.
	if _, err := b.Peer.Run(ctx, fmt.Sprintf("rm -f /tmp/rx; (nc -l -p %d >/tmp/rx 2>/dev/null &)", farPort)); err != nil {
		return Transfer{}, fmt.Errorf("start nc in the kernel peer: %w", err)
	}
	start := time.Now()
	var conn net.Conn
	dst := netip.AddrPortFrom(far, farPort).String()
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := t.Near.Do(func() error {
			var err error
			conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", dst)
			return err
		})
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return Transfer{}, fmt.Errorf("connect from %s to nc in the kernel peer at %s: %w", t.Near.Short(), dst, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(data); err != nil {
		return Transfer{}, fmt.Errorf("send %d bytes to the kernel peer: %w", n, err)
	}
	conn.(*net.TCPConn).CloseWrite()
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return Transfer{}, fmt.Errorf("wait for the kernel peer's nc to finish: %w", err)
	}
	elapsed := time.Since(start)
	out, err := b.Peer.Run(ctx, "i=0; while pidof nc >/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; wc -c </tmp/rx; sha256sum /tmp/rx")
	if err != nil {
		return Transfer{}, fmt.Errorf("checksum in the kernel peer: %w", err)
	}
	got := sha256Line.FindStringSubmatch(out)
	if got == nil || got[1] != hex.EncodeToString(want[:]) {
		size, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return Transfer{}, fmt.Errorf("the kernel peer received %s bytes with a different sha256 than the %d sent (%q)", size, n, out)
	}
	return Transfer{Bytes: n, Duration: elapsed}, nil
}

// ReceiveFromFar has busybox nc in the guest send n random bytes to a
// listener at the tunnel's near end, and checks the received bytes
// against the guest's sha256sum of what it sent.
func (b *Bed) ReceiveFromFar(ctx context.Context, near netip.Addr, n int) (Transfer, error) {
	t := b.tunnel
	if t == nil {
		return Transfer{}, errors.New("receive from the kernel peer: no case configured")
	}
	var ln net.Listener
	addr := netip.AddrPortFrom(near, nearPort).String()
	if err := t.Near.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return Transfer{}, fmt.Errorf("listen on %s in %s: %w", addr, t.Near.Short(), err)
	}
	defer ln.Close()
	type result struct {
		sum [32]byte
		n   int
		err error
	}
	got := make(chan result, 1)
	go func() {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(60 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: fmt.Errorf("accept the kernel peer's connection: %w", err)}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		h := sha256.New()
		m, err := io.Copy(h, c)
		var r result
		copy(r.sum[:], h.Sum(nil))
		r.n, r.err = int(m), err
		got <- r
	}()
	start := time.Now()
	out, err := b.Peer.Run(ctx, fmt.Sprintf("head -c %d /dev/urandom >/tmp/tx && sha256sum /tmp/tx && nc %s %d </tmp/tx", n, near, nearPort))
	elapsed := time.Since(start)
	if err != nil {
		ln.Close()
		<-got
		return Transfer{}, fmt.Errorf("send from the kernel peer to %s: %w", addr, err)
	}
	r := <-got
	if r.err != nil {
		return Transfer{}, r.err
	}
	sent := sha256Line.FindStringSubmatch(out)
	if sent == nil {
		return Transfer{}, fmt.Errorf("the kernel peer printed no sha256 of what it sent: %q", out)
	}
	if r.n != n || sent[1] != hex.EncodeToString(r.sum[:]) {
		return Transfer{}, fmt.Errorf("received %d bytes from the kernel peer with a different sha256 than the %d it sent", r.n, n)
	}
	return Transfer{Bytes: n, Duration: elapsed}, nil
}

// PingNear pings dst from ns (espgw's side) with count requests of size
// payload bytes, 50 ms apart, waiting up to 15 s for the run and 5 s for
// late replies: a guest under TCG emulation answers with jitter far beyond
// testbed.Ping's defaults. IPv4 requests carry DF, so a too-small tunnel
// MTU shows as loss.
func PingNear(ctx context.Context, ns *netns.Namespace, dst netip.Addr, size, count int) (PingResult, error) {
	return testbed.Ping(ctx, ns, dst, testbed.PingOptions{Size: size, Count: count, Interval: 50 * time.Millisecond,
		Deadline: 15 * time.Second, Linger: 5 * time.Second})
}

var busyboxSummary = regexp.MustCompile(`--- (\S+) ping statistics ---\s*\n(\d+) packets transmitted, (\d+) packets received`)

// PingSizes pings dst from the guest with each payload size, count
// requests each, in one round trip, and returns one result per size.
func (x *XfrmPeer) PingSizes(ctx context.Context, dst netip.Addr, sizes []int, count int) ([]PingResult, error) {
	var script strings.Builder
	for _, s := range sizes {
		fmt.Fprintf(&script, "ping -q -c %d -i 0.2 -W 2 -s %d %s\n", count, s, dst)
	}
	script.WriteString("true\n")
	out, err := x.kernel.Run(ctx, script.String())
	if err != nil {
		return nil, fmt.Errorf("ping %s from the xfrm peer: %w", dst, err)
	}
	m := busyboxSummary.FindAllStringSubmatch(out, -1)
	if len(m) != len(sizes) {
		return nil, fmt.Errorf("ping %s from the xfrm peer: %d summaries for %d sizes in %q", dst, len(m), len(sizes), out)
	}
	res := make([]PingResult, len(sizes))
	for i := range m {
		res[i].Sent, _ = strconv.Atoi(m[i][2])
		res[i].Received, _ = strconv.Atoi(m[i][3])
		res[i].Output = m[i][0]
	}
	return res, nil
}
