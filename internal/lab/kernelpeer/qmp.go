package kernelpeer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// QMP runs one command on the guest's QEMU monitor (QMP, on a unix socket
// in the peer's work folder) and returns its "return" value. Device tests
// use it to read what the virtual hardware itself counted.
func (p *Peer) QMP(ctx context.Context, command string, args any) (json.RawMessage, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", p.qmpPath())
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(p.cfg.CommandTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	r := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)
	// read answers until the one to our request: QMP interleaves events.
	answer := func() (json.RawMessage, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return nil, err
			}
			var m struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Class string `json:"class"`
					Desc  string `json:"desc"`
				} `json:"error"`
				QMP json.RawMessage `json:"QMP"`
			}
			if err := json.Unmarshal(line, &m); err != nil {
				return nil, fmt.Errorf("bad QMP line %q: %w", line, err)
			}
			switch {
			case m.Error != nil:
				return nil, fmt.Errorf("%s: %s", m.Error.Class, m.Error.Desc)
			case m.Return != nil:
				return m.Return, nil
			}
		}
	}
	if _, err := r.ReadBytes('\n'); err != nil { // the greeting
		return nil, fmt.Errorf("qmp %s: greeting: %w", command, err)
	}
	if err := enc.Encode(map[string]any{"execute": "qmp_capabilities"}); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	if _, err := answer(); err != nil {
		return nil, fmt.Errorf("qmp %s: capabilities: %w", command, err)
	}
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	if err := enc.Encode(req); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	ret, err := answer()
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	return ret, nil
}

// QueueUsed is the used index of a virtio device's queue as QEMU keeps it
// (x-query-virtio-queue-status): how many requests the device completed on
// it, modulo 2^16. device is a QEMU device id (crypto0, …); a virtio-crypto
// device's data queue is 0 and its control queue follows the data queues.
func (p *Peer) QueueUsed(ctx context.Context, device string, queue int) (uint16, error) {
	ret, err := p.QMP(ctx, "x-query-virtio-queue-status",
		map[string]any{"path": "/machine/peripheral/" + device + "/virtio-backend", "queue": queue})
	if err != nil {
		return 0, err
	}
	var st struct {
		UsedIdx *uint16 `json:"used-idx"`
	}
	if err := json.Unmarshal(ret, &st); err != nil || st.UsedIdx == nil {
		return 0, fmt.Errorf("x-query-virtio-queue-status %s queue %d: no used-idx in %s", device, queue, ret)
	}
	return *st.UsedIdx, nil
}
