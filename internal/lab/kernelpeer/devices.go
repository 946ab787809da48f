package kernelpeer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// CryptoDeviceID is the QEMU id of the virtio-crypto device Config.CryptoDevice
// adds, and CryptoDataQueue its data virtqueue (queue 1 is the control
// queue, where sessions are made).
const (
	CryptoDeviceID  = "crypto0"
	CryptoDataQueue = 0
)

// CryptoDevicePath is the device's virtio backend in QEMU's object tree,
// as x-query-virtio-queue-status names it.
const CryptoDevicePath = "/machine/peripheral/" + CryptoDeviceID + "/virtio-backend"

// machineArgs are QEMU's arguments for the opt-in CPU, machine and IOMMU;
// they come before every device (QEMU wants intel-iommu before the
// devices it translates for).
func (c *Config) machineArgs() []string {
	var args []string
	if c.CPU != "" {
		args = append(args, "-cpu", c.CPU)
	}
	if c.Machine != "" {
		m := c.Machine
		if c.IOMMU {
			m += ",kernel-irqchip=split"
		}
		args = append(args, "-machine", m)
	}
	if c.IOMMU {
		// intel-iommu must come before the devices it translates for.
		args = append(args, "-device", "intel-iommu,intremap=on,caching-mode=on")
	}
	return args
}

// deviceArgs are QEMU's arguments for the opt-in crypto device and monitor.
func (c *Config) deviceArgs(qmpPath string) []string {
	var args []string
	if c.CryptoDevice {
		dev := "virtio-crypto-pci,id=" + CryptoDeviceID + ",cryptodev=cryptodev0"
		if c.IOMMU {
			dev += ",iommu_platform=on,disable-legacy=on"
		}
		args = append(args, "-object", "cryptodev-backend-builtin,id=cryptodev0", "-device", dev)
	}
	if c.QMP {
		args = append(args, "-qmp", "unix:"+qmpPath+",server=on,wait=off")
	}
	return args
}

// loadModules insmods the extra archive's modules in order; one that is
// already loaded (built in, or loaded by a test) is no error.
func (p *Peer) loadModules(ctx context.Context, mods []string) error {
	if len(mods) == 0 {
		return nil
	}
	var script strings.Builder
	for _, m := range mods {
		fmt.Fprintf(&script, "[ -d /sys/module/%s ] || insmod /%s/%s.ko || { echo \"insmod %s failed\"; exit 1; }\n", m, extraModuleDir, m, m)
	}
	if out, err := p.RunFor(ctx, 2*time.Minute, script.String()); err != nil {
		return fmt.Errorf("load modules %s in the guest: %w: %s", strings.Join(mods, " "), err, out)
	}
	return nil
}

// LoadModules loads modules of Extra.LaterModules (with their
// dependencies) now.
func (p *Peer) LoadModules(ctx context.Context, names ...string) error {
	want := map[string]bool{}
	for _, n := range names {
		want[moduleName(n)] = true
	}
	var order []string
	for _, m := range p.laterModules {
		order = append(order, m)
		delete(want, m)
		if len(want) == 0 {
			break
		}
	}
	if len(want) != 0 {
		var missing []string
		for m := range want {
			missing = append(missing, m)
		}
		return fmt.Errorf("load modules: %s not in Extra.LaterModules", strings.Join(missing, ", "))
	}
	return p.loadModules(ctx, order)
}

// RunFor is Run with its own timeout, for commands that take longer than
// Config.CommandTimeout (test binaries, benchmarks).
func (p *Peer) RunFor(ctx context.Context, timeout time.Duration, script string) (string, error) {
	return p.exec(ctx, []string{"/bin/sh", "-c", "ip() { /sbin/ip \"$@\"; }\n" + script}, timeout)
}

// qmpConn is a QMP session with QEMU: one command at a time, events
// skipped.
type qmpConn struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

func dialQMP(ctx context.Context, path string) (*qmpConn, error) {
	var c net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("unix", path); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("connect to QEMU's QMP socket: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	q := &qmpConn{conn: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.r.ReadBytes('\n'); err != nil { // the greeting
		c.Close()
		return nil, fmt.Errorf("read QMP greeting: %w", err)
	}
	if _, err := q.roundTrip("qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpConn) roundTrip(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	q.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", cmd, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("QMP %s: %w", cmd, err)
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return nil, fmt.Errorf("QMP %s: bad answer %q: %w", cmd, tail(string(line), 200), err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return nil, fmt.Errorf("QMP %s: %s: %s", cmd, resp.Error.Class, resp.Error.Desc)
		}
		return resp.Return, nil
	}
}

func (q *qmpConn) close() { q.conn.Close() }

// QMP runs a QMP command on the peer's QEMU (Config.QMP) and returns its
// "return" value.
func (p *Peer) QMP(cmd string, args any) (json.RawMessage, error) {
	if p.qmp == nil {
		return nil, errors.New("QMP: the peer was started without Config.QMP")
	}
	p.qmp.mu.Lock()
	defer p.qmp.mu.Unlock()
	return p.qmp.roundTrip(cmd, args)
}

// VirtqueueUsedIndex is a virtqueue's used index as QEMU's device model
// keeps it (x-query-virtio-queue-status): it advances by one for every
// request the device completed, modulo 2^16.
func (p *Peer) VirtqueueUsedIndex(path string, queue int) (uint16, error) {
	raw, err := p.QMP("x-query-virtio-queue-status", map[string]any{"path": path, "queue": queue})
	if err != nil {
		return 0, err
	}
	var st struct {
		UsedIdx *int `json:"used-idx"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.UsedIdx == nil {
		return 0, fmt.Errorf("x-query-virtio-queue-status %s queue %d: no used-idx in %s", path, queue, raw)
	}
	return uint16(*st.UsedIdx), nil
}

// CryptoRequests is the number of requests the crypto device's data queue
// has completed since boot, modulo 2^16 (VirtqueueUsedIndex).
func (p *Peer) CryptoRequests() (uint16, error) {
	if !p.cfg.CryptoDevice {
		return 0, errors.New("the peer was started without Config.CryptoDevice")
	}
	return p.VirtqueueUsedIndex(CryptoDevicePath, CryptoDataQueue)
}
