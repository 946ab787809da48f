package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/secret"
)

// Capture is a tcpdump writing what crosses one interface to a pcap file.
type Capture struct {
	Path string
	cmd  *exec.Cmd
	errb LockedBuffer
}

// StartCapture captures ESP (raw and UDP 4500) on ifname in ns into path,
// stopping after limit packets (0: no limit) so that judging the capture
// stays quick after a bulk transfer.
func StartCapture(ns *netns.Namespace, ifname, path string, limit int) (*Capture, error) {
	return StartTcpdump(ns, ifname, path, ESPFilter, limit)
}

// ESPFilter is tcpdump's expression for ESP, raw and in UDP 4500.
const ESPFilter = "esp or udp port 4500 or ip6 proto 50"

// StartTcpdump captures what filter (a tcpdump expression) matches on
// ifname in ns into path, stopping after limit packets (0: no limit); it
// returns once the capture is live.
func StartTcpdump(ns *netns.Namespace, ifname, path, filter string, limit int) (*Capture, error) {
	c := &Capture{Path: path}
	args := []string{"-i", ifname, "--immediate-mode", "-U", "-s", "0", "-n", "-w", path}
	if limit > 0 {
		args = append(args, "-c", fmt.Sprint(limit))
	}
	c.cmd = ns.Command(context.Background(), "tcpdump", append(args, filter)...)
	c.cmd.Stderr = &c.errb
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tcpdump on %s in %s: %w", ifname, ns.Short(), err)
	}
	// tcpdump says "listening on" once the capture is live.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(c.errb.String(), "listening on") {
		if time.Now().After(deadline) {
			c.cmd.Process.Kill()
			c.cmd.Wait()
			return nil, fmt.Errorf("tcpdump on %s did not start: %s", ifname, c.errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, nil
}

// Stop ends the capture and flushes the file.
func (c *Capture) Stop() error {
	c.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	if _, err := os.Stat(c.Path); err != nil {
		return fmt.Errorf("capture %s: %w (%s)", c.Path, err, c.errb.String())
	}
	return nil
}

// TsharkVerdict is what tshark made of a capture with the SAs' keys.
type TsharkVerdict struct {
	ESP       int // ESP packets in the capture
	ICVGood   int // with esp.icv_good == 1
	Decrypted int // whose decrypted payload dissects as IP (frame.protocols has esp:ip or esp:ipv6)
}

// TsharkCommand returns a tshark command given the ESP SAs (Wireshark's
// esp_sa lines, which hold the keys) through a private configuration
// directory, never its command line, where every user of the machine would
// see the keys (ps, /proc/PID/cmdline): the lines go to an esp_sa file
// (mode 0600) in a fresh directory (0700) named by WIRESHARK_CONFIG_DIR.
// args are tshark's other arguments; call done once the command has ended,
// to remove the directory.
func TsharkCommand(ctx context.Context, espSA []string, args ...string) (cmd *exec.Cmd, done func(), err error) {
	dir, err := os.MkdirTemp("", "espgw-wireshark-")
	if err != nil {
		return nil, nil, fmt.Errorf("tshark configuration: %w", err)
	}
	done = func() { os.RemoveAll(dir) }
	var lines strings.Builder
	for _, l := range espSA {
		lines.WriteString(l + "\n")
	}
	if err := secret.WriteFile(filepath.Join(dir, "esp_sa"), []byte(lines.String())); err != nil {
		done()
		return nil, nil, fmt.Errorf("tshark configuration: %w", err)
	}
	cmd = exec.CommandContext(ctx, "tshark", args...)
	// HOME too, so that no personal preferences of the user's override ours.
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+dir, "HOME="+dir)
	return cmd, done, nil
}

// Tshark decrypts a capture with Wireshark's esp_sa lines (uat values, one
// per SA) and counts good ICVs and decrypted inner packets.
func Tshark(ctx context.Context, path string, espSA []string) (TsharkVerdict, error) {
	var v TsharkVerdict
	if _, err := exec.LookPath("tshark"); err != nil {
		return v, errors.New("tshark is not installed (apt-get install tshark)")
	}
	args := []string{"-r", path, "-n", "-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE",
		"-Y", "esp", "-T", "fields", "-e", "esp.icv_good", "-e", "frame.protocols"}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd, done, err := TsharkCommand(ctx, espSA, args...)
	if err != nil {
		return v, err
	}
	defer done()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return v, fmt.Errorf("tshark on %s: %w: %s", path, err, errb.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 2)
		v.ESP++
		if f[0] == "1" || strings.EqualFold(f[0], "true") {
			v.ICVGood++
		}
		if len(f) == 2 && (strings.Contains(f[1], "esp:ip") || strings.Contains(f[1], "esp:ipv6")) {
			v.Decrypted++
		}
	}
	return v, nil
}
