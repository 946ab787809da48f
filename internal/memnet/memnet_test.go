package memnet_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/sa"
)

func bufs(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out
}

// What the host sends the gateway reads at its offset, in order, at most
// len(bufs) at a time and no more than are queued; what the gateway writes
// the host receives.
func TestDevice(t *testing.T) {
	d := memnet.NewDevice(8, 4)
	defer d.Close()
	if d.BatchSize() != 4 {
		t.Errorf("batch size %d", d.BatchSize())
	}
	for i := range 5 {
		if err := d.Send([]byte{0x45, byte(i), 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	const off = 16
	b, sizes := bufs(4, 64), make([]int, 4)
	for _, want := range []int{4, 1} {
		n, err := d.Read(b, sizes, off)
		if err != nil || n != want {
			t.Fatalf("read %d, %v: want %d", n, err, want)
		}
	}
	if sizes[0] != 4 || !bytes.Equal(b[0][off:off+4], []byte{0x45, 4, 2, 3}) {
		t.Errorf("last read: %d bytes %x", sizes[0], b[0][off:off+4])
	}
	out := [][]byte{append(make([]byte, off), 0x60, 1), append(make([]byte, off), 0x60, 2, 3)}
	if n, err := d.Write(out, off); n != 2 || err != nil {
		t.Fatalf("write %d, %v", n, err)
	}
	n, err := d.Receive(b, sizes)
	if err != nil || n != 2 || sizes[0] != 2 || sizes[1] != 3 || b[1][2] != 3 {
		t.Errorf("receive %d, %v, sizes %v", n, err, sizes[:2])
	}
}

// A read blocked on an empty device ends with ErrClosed on Close, and so
// does a read of nothing queued after.
func TestDeviceClose(t *testing.T) {
	d := memnet.NewDevice(2, 2)
	done := make(chan error, 1)
	go func() {
		_, err := d.Read(bufs(2, 64), make([]int, 2), 0)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	d.Close()
	select {
	case err := <-done:
		if !errors.Is(err, memnet.ErrClosed) {
			t.Errorf("blocked read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still blocked after Close")
	}
	if _, err := d.Receive(bufs(1, 64), make([]int, 1)); !errors.Is(err, memnet.ErrClosed) {
		t.Errorf("receive after close: %v", err)
	}
}

// A packet sent on one end arrives at the other's Off with the sender's
// address as Peer and the address it was sent to as Local.
func TestPipe(t *testing.T) {
	a := netip.MustParseAddrPort("192.0.2.1:4500")
	b := netip.MustParseAddrPort("192.0.2.2:4500")
	ca, cb := memnet.Pipe(a, b, 4)
	defer ca.Close()
	defer cb.Close()
	cb.As = sa.EncapUDP
	if cb.Encap() != sa.EncapUDP || ca.Encap() != sa.EncapNone {
		t.Errorf("encaps %v, %v", ca.Encap(), cb.Encap())
	}
	payload := []byte{0, 0, 0x10, 1, 0, 0, 0, 1, 0xaa}
	buf := make([]byte, 128)
	copy(buf[esp.Headroom:], payload)
	out := &esp.Packet{Buf: buf, Off: esp.Headroom, Len: len(payload), Peer: b}
	if n, err := ca.Send([]*esp.Packet{out}); n != 1 || err != nil {
		t.Fatalf("send %d, %v", n, err)
	}
	in := &esp.Packet{Buf: make([]byte, 128), Off: 8, HdrLen: 20}
	n, err := cb.Receive([]*esp.Packet{in})
	if err != nil || n != 1 {
		t.Fatalf("receive %d, %v", n, err)
	}
	if !bytes.Equal(in.Buf[8:8+in.Len], payload) || in.HdrLen != 0 || in.Peer != a || in.Local != b.Addr() {
		t.Errorf("received %x hdr %d from %v to %v", in.Buf[8:8+in.Len], in.HdrLen, in.Peer, in.Local)
	}
	// Closing b ends b's receiving and a's sends to it.
	cb.Close()
	if _, err := cb.Receive([]*esp.Packet{in}); !errors.Is(err, memnet.ErrClosed) {
		t.Errorf("receive after close: %v", err)
	}
	for range 5 { // more than the link holds: the send must fail, not block
		if _, err = ca.Send([]*esp.Packet{out}); err != nil {
			break
		}
	}
	if !errors.Is(err, memnet.ErrClosed) {
		t.Errorf("send to a closed end: %v", err)
	}
}

// Moving packets copies them but allocates nothing.
func TestAllocs(t *testing.T) {
	d := memnet.NewDevice(4, 4)
	defer d.Close()
	pkt := make([]byte, 1400)
	b, sizes := bufs(4, 1500), make([]int, 4)
	if n := testing.AllocsPerRun(100, func() {
		d.Send(pkt)
		d.Read(b, sizes, 0)
	}); n != 0 {
		t.Errorf("%v allocations per packet", n)
	}
}
