// Package scapy runs the lab's independent ESP peer, built on scapy.
//
// It runs the test bed's independent ESP peer: one script, esp_peer.py,
// built on scapy's ESP (python3-scapy, run with Debian's /usr/bin/python3),
// that seals and opens packets in batches (the capture tests), answers pings
// as the far gateway of a tunnel (the interop tests), or probes an ESP peer
// with echo, tampered and replayed packets (the kernel peer's tests). Every
// mode reads SAs in the one form SA writes.
package scapy

import (
	"bufio"
	"cmp"
	"context"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/sa"
)

//go:embed esp_peer.py
var script []byte

// Python is the interpreter with Debian's python3-scapy (the python3 first
// on PATH may have no Debian packages).
const Python = "/usr/bin/python3"

// Available says, with what to install, why scapy cannot run.
func Available() error {
	if out, err := exec.Command(Python, "-c", "import scapy.layers.ipsec").CombinedOutput(); err != nil {
		return fmt.Errorf("scapy unavailable (%v: %s): apt-get install python3-scapy (it must import under %s)", err, strings.TrimSpace(string(out)), Python)
	}
	return nil
}

// SA is c as the script reads it: espgw's own names for every field.
func SA(c *sa.SA) map[string]any {
	m := map[string]any{
		"spi": c.SPI, "mode": c.Mode.String(), "src": c.Src.String(), "dst": c.Dst.String(),
		"encap": c.Encap.String(), "enc": c.Suite.Cipher.String(), "enc_key": hex.EncodeToString(c.EncKey),
		"auth": c.Suite.Auth.String(), "auth_key": hex.EncodeToString(c.AuthKey), "esn": c.ESN,
		"initial_seq": c.InitialSeq, "replay_window": c.ReplayWindow,
	}
	if c.Encap == sa.EncapUDP {
		m["sport"], m["dport"] = cmp.Or(c.SrcPort, sa.DefaultNATTPort), cmp.Or(c.DstPort, sa.DefaultNATTPort)
	}
	return m
}

// Command is the script in mode ("jobs", "respond" or "probe"), run in the
// named network namespace ("" for this one); done removes the script's
// copy once the command has ended.
func Command(netns, mode string) (cmd *exec.Cmd, done func(), err error) {
	if err := Available(); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "espgw-scapy-")
	if err != nil {
		return nil, nil, fmt.Errorf("scapy peer: %w", err)
	}
	path := filepath.Join(dir, "esp_peer.py")
	if err := os.WriteFile(path, script, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("scapy peer: %w", err)
	}
	args := []string{"-u", path, mode}
	if netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", netns, Python}, args...)...)
	} else {
		cmd = exec.Command(Python, args...)
	}
	return cmd, func() { os.RemoveAll(dir) }, nil
}

// Peer is the script running in a line-by-line mode (respond, probe): a
// JSON value per line each way.
type Peer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr strings.Builder
	done   chan error
	clean  func()
}

// Start runs the script in mode in netns, sends first (when not nil) as its
// first line, and waits for it to say it is ready.
func Start(ctx context.Context, netns, mode string, first any) (*Peer, error) {
	cmd, clean, err := Command(netns, mode)
	if err != nil {
		return nil, err
	}
	p := &Peer{cmd: cmd, done: make(chan error, 1), clean: clean}
	cmd.Stderr = &p.stderr
	p.in, _ = cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 64<<10), 1<<20)
	if err := cmd.Start(); err != nil {
		clean()
		return nil, fmt.Errorf("start scapy peer: %w", err)
	}
	go func() { p.done <- cmd.Wait() }()
	if first != nil {
		if err := p.Send(first); err != nil { // keys go to the child's stdin only, never to logs
			p.Close()
			return nil, err
		}
	}
	var ready struct{ Ready bool }
	if err := p.Read(ctx, &ready); err != nil || !ready.Ready {
		p.Close()
		return nil, fmt.Errorf("scapy peer (%s) did not start: %v: %s", mode, err, tail(p.stderr.String(), 1500))
	}
	return p, nil
}

// Send writes v as one line (a string as it is).
func (p *Peer) Send(v any) error {
	b, ok := v.(string)
	if !ok {
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("scapy peer: %w", err)
		}
		b = string(j)
	}
	if _, err := io.WriteString(p.in, b+"\n"); err != nil {
		return fmt.Errorf("write to scapy peer: %w", err)
	}
	return nil
}

// Read reads one line into v, waiting at most 30 s.
func (p *Peer) Read(ctx context.Context, v any) error {
	got := make(chan error, 1)
	go func() {
		if !p.out.Scan() {
			got <- fmt.Errorf("scapy peer exited: %v: %s", p.out.Err(), tail(p.stderr.String(), 1500))
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

// Close ends the script (EOF on its stdin, then a kill by PID after 10 s)
// and removes its files.
func (p *Peer) Close() error {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.clean()
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
