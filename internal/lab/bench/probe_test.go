package bench

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// cmsg builds one control message as the kernel lays it out.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func TestKernelTimestamp(t *testing.T) {
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts, 1_700_000_000)
	binary.NativeEndian.PutUint64(ts[8:], 123_456_789)
	want := int64(1_700_000_000)*1e9 + 123_456_789
	other := cmsg(unix.SOL_IP, unix.IP_TTL, []byte{64, 0, 0, 0})
	for _, tc := range []struct {
		name   string
		oob    []byte
		wantOK bool
	}{
		{"alone", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts), true},
		{"after another message", append(other, cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)...), true},
		{"none", other, false},
		{"empty", nil, false},
		{"truncated", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)[:20], false},
	} {
		got, ok := kernelTimestamp(tc.oob)
		if ok != tc.wantOK || ok && got != want {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, want, tc.wantOK)
		}
	}
	oob := cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)
	if n := testing.AllocsPerRun(100, func() { kernelTimestamp(oob) }); n != 0 {
		t.Errorf("kernelTimestamp allocates %v times per packet", n)
	}
}

// TestDirectSendDeliversWithoutAllocating: the connected senders' sendmmsg
// sends a whole batch, every datagram at its own length, and allocates
// nothing per batch.
func TestDirectSendDeliversWithoutAllocating(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := setBuffer(rx, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		t.Logf("receive buffer: %v", err)
	}
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	d, err := newDirectSend(tx, probeBatch)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]ipv4.Message, probeBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 20+i)}
		msgs[i].Buffers[0][0] = byte(i)
	}
	if n, err := d.write(msgs); err != nil || n != len(msgs) {
		t.Fatalf("write: %d, %v", n, err)
	}
	rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	for i := range msgs {
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if n != 20+i || buf[0] != byte(i) {
			t.Fatalf("datagram %d: %d bytes starting %d, want %d starting %d", i, n, buf[0], 20+i, i)
		}
	}
	if a := testing.AllocsPerRun(20, func() { d.write(msgs[:8]) }); a != 0 {
		t.Errorf("%v allocations per batch, want 0", a)
	}
}
