package kernelpeer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
)

// Transfer is one TCP transfer between a namespace of the host and the
// guest, checked byte for byte.
type Transfer struct {
	Bytes    int
	Duration time.Duration
}

var sha256Line = regexp.MustCompile(`(?m)^([0-9a-f]{64})\s`)

// SendTCP sends n random bytes over TCP from ns to busybox nc listening
// in the guest on dst, and checks the guest's sha256sum of what it
// received against the sender's. The connection is tried for 15 s (the
// path may still be coming up); the transfer may take timeout.
func (p *Peer) SendTCP(ctx context.Context, ns *netns.Namespace, dst netip.AddrPort, n int, timeout time.Duration) (Transfer, error) {
	data := make([]byte, n)
	rand.Read(data)
	want := sha256.Sum256(data)
	// nc's stdin is /dev/null in the background: it half-closes at once
	// and exits when the sender's data ends.
	if _, err := p.Run(ctx, fmt.Sprintf("rm -f /tmp/rx; (nc -l -p %d >/tmp/rx 2>/dev/null &)", dst.Port())); err != nil {
		return Transfer{}, fmt.Errorf("start nc in the kernel peer: %w", err)
	}
	start := time.Now()
	var conn net.Conn
	for deadline := time.Now().Add(15 * time.Second); ; {
		err := ns.Do(func() (err error) {
			conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", dst.String())
			return err
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return Transfer{}, fmt.Errorf("connect from %s to nc in the kernel peer at %s: %w", ns.Short(), dst, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(data); err != nil {
		return Transfer{}, fmt.Errorf("send %d bytes to the kernel peer: %w", n, err)
	}
	conn.(*net.TCPConn).CloseWrite()
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return Transfer{}, fmt.Errorf("wait for the kernel peer's nc to finish: %w", err)
	}
	elapsed := time.Since(start)
	out, err := p.Run(ctx, "i=0; while pidof nc >/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; wc -c </tmp/rx; sha256sum /tmp/rx")
	if err != nil {
		return Transfer{}, fmt.Errorf("checksum in the kernel peer: %w", err)
	}
	if got := sha256Line.FindStringSubmatch(out); got == nil || got[1] != hex.EncodeToString(want[:]) {
		size, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return Transfer{}, fmt.Errorf("the kernel peer received %s bytes with a different sha256 than the %d sent (%q)", size, n, out)
	}
	return Transfer{Bytes: n, Duration: elapsed}, nil
}

// ReceiveTCP has busybox nc in the guest send n random bytes to a listener
// in ns on listen, and checks what arrived against the guest's sha256sum
// of what it sent. The transfer may take timeout.
func (p *Peer) ReceiveTCP(ctx context.Context, ns *netns.Namespace, listen netip.AddrPort, n int, timeout time.Duration) (Transfer, error) {
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", listen.String())
		return err
	}); err != nil {
		return Transfer{}, fmt.Errorf("listen on %s in %s: %w", listen, ns.Short(), err)
	}
	defer ln.Close()
	type result struct {
		sum string
		n   int
		err error
	}
	got := make(chan result, 1)
	go func() {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(timeout))
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: fmt.Errorf("accept the kernel peer's connection: %w", err)}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		h := sha256.New()
		m, err := io.Copy(h, c)
		got <- result{hex.EncodeToString(h.Sum(nil)), int(m), err}
	}()
	start := time.Now()
	out, err := p.RunFor(ctx, timeout, fmt.Sprintf("head -c %d /dev/urandom >/tmp/tx && sha256sum /tmp/tx && nc %s %d </tmp/tx", n, listen.Addr(), listen.Port()))
	elapsed := time.Since(start)
	if err != nil {
		ln.Close()
		<-got
		return Transfer{}, fmt.Errorf("send from the kernel peer to %s: %w: %s", listen, err, out)
	}
	r := <-got
	if r.err != nil {
		return Transfer{}, fmt.Errorf("receive from the kernel peer: %w", r.err)
	}
	sent := sha256Line.FindStringSubmatch(out)
	if sent == nil {
		return Transfer{}, fmt.Errorf("the kernel peer printed no sha256 of what it sent: %q", out)
	}
	if r.n != n || sent[1] != r.sum {
		return Transfer{}, fmt.Errorf("received %d bytes from the kernel peer with sha256 %s; it sent %d with %q", r.n, r.sum, n, out)
	}
	return Transfer{Bytes: n, Duration: elapsed}, nil
}
