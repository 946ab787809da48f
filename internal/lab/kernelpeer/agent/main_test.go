package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/espgw/espgw/internal/lab/kernelpeer/ctl"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "child-ended")
	mark2 := filepath.Join(dir, "child-holding-output-ended")
	for _, tc := range []struct {
		name      string
		req       ctl.Request
		exit      int
		output    string
		errSubstr string
	}{
		{"output and exit 0", ctl.Request{ID: 7, Argv: []string{"sh", "-c", "echo out; echo err >&2"}}, 0, "out\nerr\n", ""},
		{"exit status", ctl.Request{Argv: []string{"sh", "-c", "exit 3"}}, 3, "", ""},
		{"empty command", ctl.Request{}, -1, "", "empty command"},
		{"no such program", ctl.Request{Argv: []string{"/nonexistent/tree-agent-test"}}, -1, "", "no such file"},
		{"timeout", ctl.Request{Argv: []string{"sleep", "5"}, TimeoutMS: 100}, -1, "", "timed out after 100ms"},
		// A child left in the background does not hold the answer back:
		// with its output elsewhere it is no concern, and one that keeps
		// the output open is given a second. Each child leaves a mark
		// when it ends, which must not be there yet when the answer is.
		{"background child", ctl.Request{Argv: []string{"sh", "-c", "(sleep 10; touch \"$0\") >/dev/null 2>&1 & echo started", mark}, TimeoutMS: 3000}, 0, "started\n", ""},
		{"background child holding the output", ctl.Request{Argv: []string{"sh", "-c", "(sleep 10; touch \"$0\") & echo started", mark2}, TimeoutMS: 3000}, -1, "started\n", "WaitDelay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := run(tc.req)
			if resp.ID != tc.req.ID || resp.Exit != tc.exit || string(resp.Output) != tc.output {
				t.Errorf("got id %d exit %d output %q, want id %d exit %d output %q", resp.ID, resp.Exit, resp.Output, tc.req.ID, tc.exit, tc.output)
			}
			if tc.errSubstr == "" && resp.Error != "" || !strings.Contains(resp.Error, tc.errSubstr) {
				t.Errorf("error %q, want %q", resp.Error, tc.errSubstr)
			}
			for _, m := range []string{mark, mark2} {
				if _, err := os.Stat(m); err == nil {
					t.Errorf("the answer waited for a background child to end (%s)", filepath.Base(m))
				}
			}
		})
	}
}

// cmsg builds one control message with a 4-byte value.
func cmsg(level, typ int, v uint32) []byte {
	b := make([]byte, syscall.CmsgSpace(4))
	binary.NativeEndian.PutUint64(b[0:8], uint64(syscall.CmsgLen(4)))
	binary.NativeEndian.PutUint32(b[8:12], uint32(level))
	binary.NativeEndian.PutUint32(b[12:16], uint32(typ))
	binary.NativeEndian.PutUint32(b[16:20], v)
	return b
}

func TestMarks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		oob      []byte
		tos, ttl int
		ext      string
	}{
		{"IPv4", append(cmsg(syscall.IPPROTO_IP, syscall.IP_TOS, 0xb8), cmsg(syscall.IPPROTO_IP, syscall.IP_TTL, 63)...), 0xb8, 63, "-"},
		{"IPv6 with extension headers", append(append(cmsg(syscall.IPPROTO_IPV6, 0x43, 0x2e), cmsg(syscall.IPPROTO_IPV6, syscall.IPV6_HOPLIMIT, 64)...),
			append(cmsg(syscall.IPPROTO_IPV6, 54, 0), cmsg(syscall.IPPROTO_IPV6, 59, 0)...)...), 0x2e, 64, "hd"},
		{"none", nil, -1, -1, "-"},
		{"garbage", []byte{1, 2, 3}, -1, -1, "-"},
	} {
		tos, ttl, ext := marks(tc.oob)
		if tos != tc.tos || ttl != tc.ttl || ext != tc.ext {
			t.Errorf("%s: tos %#x ttl %d ext %q, want %#x %d %q", tc.name, tos, ttl, ext, tc.tos, tc.ttl, tc.ext)
		}
	}
}
