// Command espgw-agent runs inside the kernel peer's guest (see package
// kernelpeer). It is built as a static binary and put into the initramfs.
//
//	espgw-agent serve         answer command requests on the control port
//	espgw-agent natt PORT...  hold UDP_ENCAP_ESPINUDP sockets open on PORTs
//	espgw-agent inject HEX... send whole IP packets from a raw socket
//	espgw-agent recv PORT N MS  print the marks of the UDP datagrams received
//
// serve reads one JSON request per line from the virtio-serial port named
// org.espgw.ctl and writes one JSON response per line (package ctl). The port is opened
// once, read-write, for both directions: a second open of a virtio console
// port fails with EBUSY.
//
// natt exists because the kernel only takes ESP out of UDP datagrams that
// arrive on a socket with the UDP_ENCAP option set (normally the IKE
// daemon's); without one, UDP-encapsulated ESP is answered with ICMP port
// unreachable.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer/ctl"
)

func main() {
	if len(os.Args) < 2 {
		fatal(fmt.Errorf("usage: espgw-agent serve | natt PORT... | inject HEX... | recv PORT N MS"))
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve()
	case "natt":
		err = natt(os.Args[2:])
	case "inject":
		err = inject(os.Args[2:])
	case "recv":
		err = recvMarks(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (want serve, natt, inject or recv)", os.Args[1])
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "espgw-agent: %v\n", err)
	os.Exit(1)
}

func findPort() (string, error) {
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err == nil && strings.TrimSpace(string(b)) == ctl.PortName {
			return "/dev/" + filepath.Base(filepath.Dir(n)), nil
		}
	}
	return "", fmt.Errorf("no virtio-serial port named %s (looked at %d ports)", ctl.PortName, len(names))
}

func serve() error {
	var dev string
	var err error
	for range 50 { // the port appears when virtio_console has probed
		if dev, err = findPort(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	port, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open control port: %w", err)
	}
	defer port.Close()
	fmt.Fprintf(os.Stderr, "espgw-agent: serving on %s\n", dev)
	in := bufio.NewReader(port)
	enc := json.NewEncoder(port)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var req ctl.Request
			var resp ctl.Response
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				resp = ctl.Response{Exit: -1, Error: fmt.Sprintf("bad request: %v", jerr)}
			} else {
				resp = run(req)
			}
			if werr := enc.Encode(resp); werr != nil {
				return fmt.Errorf("write response: %w", werr)
			}
		}
		if err != nil {
			// EOF: the host is not connected; keep the port open and wait.
			if errors.Is(err, os.ErrClosed) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func run(req ctl.Request) ctl.Response {
	resp := ctl.Response{ID: req.ID}
	if len(req.Argv) == 0 {
		resp.Exit, resp.Error = -1, "empty command"
		return resp
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	// Background children must not hold the output pipe open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	resp.Output = out.Bytes()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		resp.Exit, resp.Error = -1, fmt.Sprintf("timed out after %v", timeout)
	case errors.As(err, &exit):
		resp.Exit = exit.ExitCode()
	case err != nil:
		resp.Exit, resp.Error = -1, err.Error()
	}
	return resp
}

// natt opens an ESP-in-UDP socket per port and address family and holds
// them until killed.
func natt(ports []string) error {
	if len(ports) == 0 {
		return fmt.Errorf("natt: no ports given")
	}
	failed := make(chan error)
	for _, p := range ports {
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return fmt.Errorf("natt: bad port %q: %w", p, err)
		}
		for _, network := range []string{"udp4", "udp6"} {
			c, err := net.ListenUDP(network, &net.UDPAddr{Port: int(port)})
			if err != nil {
				return fmt.Errorf("natt: listen %s port %d: %w", network, port, err)
			}
			if err := setEncap(c, network == "udp6"); err != nil {
				return fmt.Errorf("natt: %s port %d: %w", network, port, err)
			}
			go drain(c, failed)
		}
	}
	fmt.Fprintf(os.Stderr, "espgw-agent: ESP-in-UDP sockets open on ports %s\n", strings.Join(ports, ","))
	return <-failed
}

// drain reads what the kernel leaves to the socket (anything that is not
// ESP, such as NAT keepalives) and keeps the socket referenced.
func drain(c *net.UDPConn, failed chan<- error) {
	buf := make([]byte, 65536)
	for {
		if _, _, err := c.ReadFrom(buf); err != nil {
			failed <- fmt.Errorf("natt: read %s: %w", c.LocalAddr(), err)
			return
		}
	}
}

func setEncap(c *net.UDPConn, v6 bool) error {
	const (
		solUDP           = 17 // SOL_UDP
		udpEncap         = 100
		udpEncapESPInUDP = 2
	)
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), solUDP, udpEncap, udpEncapESPInUDP)
		if serr != nil {
			serr = fmt.Errorf("setsockopt UDP_ENCAP: %w", serr)
			return
		}
		serr = bypassPolicies(int(fd), v6)
	}); err != nil {
		return err
	}
	return serr
}

// bypassPolicies exempts the socket from IPsec policy in both directions,
// as IKE daemons do for theirs (strongSwan's add_socket_bypass). The
// kernel checks the inbound policy on a UDP datagram before handing it to
// the encapsulation handler, so without the bypass a transport-mode policy
// covering the two hosts drops the very ESP-in-UDP packets it expects
// (XfrmInTmplMismatch).
func bypassPolicies(fd int, v6 bool) error {
	// struct xfrm_userpolicy_info (linux/xfrm.h): selector (56 bytes),
	// lifetime cfg (8 x u64), lifetime cur (4 x u64), priority, index,
	// dir, action, flags, share; 168 bytes with padding.
	const (
		size         = 168
		offFamily    = 40
		offLifetime  = 56
		offDir       = 160
		policyIn     = 0
		policyOut    = 1
		ipXfrmPolicy = 17 // IP_XFRM_POLICY
		ip6XfrmPol   = 35 // IPV6_XFRM_POLICY
	)
	level, opt, family := syscall.IPPROTO_IP, ipXfrmPolicy, uint16(syscall.AF_INET)
	if v6 {
		level, opt, family = syscall.IPPROTO_IPV6, ip6XfrmPol, syscall.AF_INET6
	}
	for _, dir := range []byte{policyIn, policyOut} {
		var pol [size]byte
		binary.NativeEndian.PutUint16(pol[offFamily:], family)
		for i := range 4 { // soft and hard byte and packet limits: infinite
			binary.NativeEndian.PutUint64(pol[offLifetime+8*i:], ^uint64(0))
		}
		pol[offDir] = dir // action 0 is XFRM_POLICY_ALLOW
		if err := syscall.SetsockoptString(fd, level, opt, string(pol[:])); err != nil {
			return fmt.Errorf("setsockopt XFRM_POLICY bypass (dir %d): %w", dir, err)
		}
	}
	return nil
}
