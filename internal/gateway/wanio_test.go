package gateway

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/sa"
)

// TestWanIOFallback: wan-io auto falls back to raw sockets, saying why,
// where XDP cannot attach; wan-io xdp refuses to start there; socket and
// UDP-encapsulated ESP never try.
func TestWanIOFallback(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	rt := &Runtime{}
	raw := connKey{encap: sa.EncapNone}
	// A local address no interface holds: nothing to attach to.
	cfg := &Config{File: "gw.yaml", Local: []netip.Addr{netip.MustParseAddr("192.0.2.77")}}
	for _, tc := range []struct {
		io      WanIO
		key     connKey
		wantErr bool
		wantLog string
	}{
		{WanIOAuto, raw, false, "wan-io auto: raw ESP stays on raw sockets"},
		{WanIOXDP, raw, true, ""},
		{WanIOSocket, raw, false, ""},
		{WanIOXDP, connKey{encap: sa.EncapUDP, port: 4500}, false, ""},
	} {
		log.Reset()
		cfg.WanIO = tc.io
		x, err := rt.openXDP(tc.key, nil, cfg, logger)
		if x != nil {
			x.Close()
			t.Errorf("wan-io %s, %v: an AF_XDP connection on no interface", tc.io, tc.key)
		}
		if (err != nil) != tc.wantErr {
			t.Errorf("wan-io %s, %v: error %v, want error %v", tc.io, tc.key, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "no interface holds the local address 192.0.2.77") {
			t.Errorf("wan-io %s: error %q does not say why", tc.io, err)
		}
		if tc.wantLog != "" && !(strings.Contains(log.String(), tc.wantLog) && strings.Contains(log.String(), "192.0.2.77")) {
			t.Errorf("wan-io %s: log %q, want %q and why", tc.io, log.String(), tc.wantLog)
		}
		if tc.wantLog == "" && log.Len() > 0 {
			t.Errorf("wan-io %s, %v: logged %q", tc.io, tc.key, log.String())
		}
	}
}

func TestWanIOConfig(t *testing.T) {
	base := "local: 198.51.100.1\ntun: {name: esp0}\nsa:\n  - {spi: 0x1001, src: 198.51.100.1, dst: 198.51.100.129, enc: aes-gcm-16, enc-key: 0x00112233445566778899aabbccddeeff00112233}\n"
	for _, tc := range []struct {
		line string
		want WanIO
		err  string
	}{
		{"", WanIOSocket, ""},
		{"wan-io: auto\n", WanIOAuto, ""},
		{"wan-io: xdp\n", WanIOXDP, ""},
		{"wan-io: socket\n", WanIOSocket, ""},
		{"wan-io: dpdk\n", "", "wan-io"},
	} {
		c, err := ParseConfig("gw.yaml", []byte(base+tc.line), sim.Engines{})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "auto, xdp or socket") {
				t.Errorf("%q: error %v, want one naming %s and the choices", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if c.WanIO != tc.want {
			t.Errorf("%q: wan-io %q, want %q", tc.line, c.WanIO, tc.want)
		}
	}
}

func TestXDPModeConfig(t *testing.T) {
	base := "local: 198.51.100.1\ntun: {name: esp0}\nwan-io: xdp\nsa:\n  - {spi: 0x1001, src: 198.51.100.1, dst: 198.51.100.129, enc: aes-gcm-16, enc-key: 0x00112233445566778899aabbccddeeff00112233}\n"
	for _, tc := range []struct {
		line string
		want xdp.Mode
		err  bool
	}{
		{"", xdp.ModeAuto, false},
		{"xdp-mode: auto\n", xdp.ModeAuto, false},
		{"xdp-mode: native\n", xdp.ModeNative, false},
		{"xdp-mode: generic\n", xdp.ModeGeneric, false},
		{"xdp-mode: zerocopy\n", "", true},
	} {
		c, err := ParseConfig("gw.yaml", []byte(base+tc.line), sim.Engines{})
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "xdp-mode") || !strings.Contains(err.Error(), "auto, native or generic") {
				t.Errorf("%q: error %v, want one naming xdp-mode and the choices", tc.line, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if c.XDPMode != tc.want {
			t.Errorf("%q: xdp-mode %q, want %q", tc.line, c.XDPMode, tc.want)
		}
	}
}

func TestTUNQueueConfig(t *testing.T) {
	base := "local: 198.51.100.1\nsa:\n  - {spi: 0x1001, src: 198.51.100.1, dst: 198.51.100.129, enc: aes-gcm-16, enc-key: 0x00112233445566778899aabbccddeeff00112233}\n"
	for _, tc := range []struct {
		tun  string
		want int
		err  bool
	}{
		{"tun: {name: esp0}\n", 0, false},
		{"tun: {name: esp0, queue: 4096}\n", 4096, false},
		{"tun: {name: esp0, queue: 0}\n", 0, true},
		{"tun: {name: esp0, queue: 100000}\n", 0, true},
	} {
		c, err := ParseConfig("gw.yaml", []byte(base+tc.tun), sim.Engines{})
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "tun.queue") {
				t.Errorf("%q: error %v, want one naming tun.queue", tc.tun, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.tun, err)
		} else if c.TUN.Queue != tc.want {
			t.Errorf("%q: queue %d, want %d", tc.tun, c.TUN.Queue, tc.want)
		}
	}
}
