package interop

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/sa"
)

//go:embed scapy_responder.py
var scapyResponder []byte

// ScapyPython is the interpreter with Debian's python3-scapy (the python3
// first on PATH may have no Debian packages).
const ScapyPython = "/usr/bin/python3"

// ScapyPeerConfig places a scapy ESP responder: a far gateway that
// answers ICMP echo requests for its addresses through the tunnel.
type ScapyPeerConfig struct {
	// Netns is the namespace it runs in; Iface the interface there that
	// carries the tunnel's outer packets.
	Netns, Iface string
	// Local is its outer address (the Dst of the SAs toward it).
	Local netip.Addr
	// Owned are the inner addresses it answers pings for, besides Local.
	Owned []netip.Addr
}

// ScapyPeer is a running scapy responder (see StartScapyPeer).
type ScapyPeer struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	dir  string
	done chan error
}

// ScapyCounters are what the responder saw.
type ScapyCounters struct {
	Received      uint64 `json:"received"` // ESP packets for its address
	Opened        uint64 `json:"opened"`   // ICV verified, decrypted
	OpenedBytes   uint64 `json:"opened_bytes"`
	BadICV        uint64 `json:"bad_icv"`
	Replayed      uint64 `json:"replayed"`
	OutsideWindow uint64 `json:"outside_window"`
	UnknownSPI    uint64 `json:"unknown_spi"`
	NotEcho       uint64 `json:"not_echo"` // opened, but nothing to answer
	Replied       uint64 `json:"replied"`  // echo replies sealed and sent
	Errors        uint64 `json:"errors"`
	LastError     string `json:"last_error"`
}

// scapyNames are scapy's names for espgw's algorithms.
var (
	scapyCipher = map[sa.Cipher]string{sa.CipherAESCBC: "AES-CBC", sa.Cipher3DES: "3DES", sa.CipherAESCTR: "AES-CTR", sa.CipherAESGCM16: "AES-GCM", sa.CipherNull: "NULL"}
	scapyAuth   = map[sa.Auth]string{sa.AuthHMACSHA1_96: "HMAC-SHA1-96", sa.AuthHMACSHA256_128: "SHA2-256-128",
		sa.AuthHMACSHA384_192: "SHA2-384-192", sa.AuthHMACSHA512_256: "SHA2-512-256", sa.AuthHMACMD5_96: "HMAC-MD5-96"}
)

type scapySA struct {
	SPI        uint32 `json:"spi"`
	Dir        string `json:"dir"`
	Mode       string `json:"mode"`
	UDP        bool   `json:"udp"`
	Crypt      string `json:"crypt"`
	CryptKey   string `json:"crypt_key"`
	Auth       string `json:"auth"`
	AuthKey    string `json:"auth_key"`
	ICVLen     int    `json:"icv_len"`
	ESN        bool   `json:"esn"`
	InitialSeq uint64 `json:"initial_seq"`
	Window     int    `json:"window"`
	Src        string `json:"src"`
	Dst        string `json:"dst"`
}

// StartScapyPeer starts the responder with sas: those whose Dst is
// cfg.Local are opened, the first other one seals the replies. Outer IPv4
// only; tunnel and transport mode, raw ESP and UDP 4500, ESN.
func StartScapyPeer(ctx context.Context, cfg ScapyPeerConfig, sas []*sa.SA) (*ScapyPeer, error) {
	if out, err := exec.Command(ScapyPython, "-c", "import scapy.layers.ipsec").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scapy unavailable (%v: %s): apt-get install python3-scapy", err, strings.TrimSpace(string(out)))
	}
	type config struct {
		Iface string    `json:"iface"`
		Local string    `json:"local"`
		Owned []string  `json:"owned"`
		SAs   []scapySA `json:"sas"`
	}
	c := config{Iface: cfg.Iface, Local: cfg.Local.String(), Owned: []string{}}
	for _, a := range cfg.Owned {
		c.Owned = append(c.Owned, a.String())
	}
	for _, s := range sas {
		if !s.Src.Is4() {
			return nil, fmt.Errorf("start scapy peer: %v: outer IPv6 is not supported", s)
		}
		dir := "out"
		if s.Dst == cfg.Local {
			dir = "in"
		}
		auth := "NULL"
		if !s.Suite.Cipher.IsAEAD() {
			auth = scapyAuth[s.Suite.Auth]
		}
		c.SAs = append(c.SAs, scapySA{SPI: s.SPI, Dir: dir, Mode: s.Mode.String(), UDP: s.Encap == sa.EncapUDP,
			Crypt: scapyCipher[s.Suite.Cipher], CryptKey: hex.EncodeToString(s.EncKey), Auth: auth, AuthKey: hex.EncodeToString(s.AuthKey),
			ICVLen: s.Suite.ICVLen(), ESN: s.ESN, InitialSeq: s.InitialSeq, Window: s.ReplayWindow,
			Src: s.Src.String(), Dst: s.Dst.String()})
	}
	dir, err := os.MkdirTemp("", "espgw-scapy-")
	if err != nil {
		return nil, fmt.Errorf("start scapy peer: %w", err)
	}
	script := filepath.Join(dir, "scapy_responder.py")
	if err := os.WriteFile(script, scapyResponder, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start scapy peer: %w", err)
	}
	p := &ScapyPeer{dir: dir, done: make(chan error, 1)}
	p.cmd = exec.Command("ip", "netns", "exec", cfg.Netns, ScapyPython, "-u", script)
	var stderr strings.Builder
	p.cmd.Stderr = &stderr
	p.in, _ = p.cmd.StdinPipe()
	stdout, _ := p.cmd.StdoutPipe()
	p.out = bufio.NewScanner(stdout)
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start scapy peer: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	b, _ := json.Marshal(c) // keys go to the child's stdin only, never to logs
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.Close()
		return nil, fmt.Errorf("configure scapy peer: %w", err)
	}
	var ready struct{ Ready bool }
	if err := p.read(ctx, &ready); err != nil || !ready.Ready {
		p.Close()
		return nil, fmt.Errorf("scapy peer did not start: %v: %s", err, tail(stderr.String(), 1500))
	}
	return p, nil
}

func (p *ScapyPeer) read(ctx context.Context, v any) error {
	got := make(chan error, 1)
	go func() {
		if !p.out.Scan() {
			got <- fmt.Errorf("scapy peer exited: %v", p.out.Err())
			return
		}
		got <- json.Unmarshal(p.out.Bytes(), v)
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("scapy peer: no answer within 30s")
	}
}

// Counters asks the responder for its counters.
func (p *ScapyPeer) Counters(ctx context.Context) (ScapyCounters, error) {
	var c ScapyCounters
	if _, err := io.WriteString(p.in, "counters\n"); err != nil {
		return c, fmt.Errorf("scapy peer counters: %w", err)
	}
	if err := p.read(ctx, &c); err != nil {
		return c, fmt.Errorf("scapy peer counters: %w", err)
	}
	return c, nil
}

// Close ends the responder (EOF on its stdin, then a kill by PID after 5 s)
// and removes its files.
func (p *ScapyPeer) Close() error {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	return os.RemoveAll(p.dir)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
