package bench

import (
	"encoding/binary"
	"testing"
	"unsafe"

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
