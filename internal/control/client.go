package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/sa"
)

// DefaultSocket is where espgw's control commands look when not told.
const DefaultSocket = "/run/espgw/control.sock"

// Client sends requests to a gateway's control socket, one at a time or
// pipelined (Send then Receive).
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	enc  *json.Encoder
}

// Dial connects to the control socket at path, served by root or this
// process's user.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect to the gateway's control socket (is control: set in its config?): %w", err)
	}
	// Requests carry keys: they go only to a gateway run by root or by
	// this user, never to whatever else listens on the path.
	uid, err := peerUID(c.(*net.UnixConn))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("control socket %q: %w", path, err)
	}
	if !trusted(uid) {
		c.Close()
		return nil, fmt.Errorf("control socket %q is served by uid %d, neither root nor this user: not sending it keys", path, uid)
	}
	w := bufio.NewWriter(c)
	return &Client{conn: c, r: bufio.NewReaderSize(c, 64<<10), w: w, enc: json.NewEncoder(w)}, nil
}

// Close ends the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Send queues a request; Flush or Do sends what is queued.
func (c *Client) Send(req Request) error { return c.enc.Encode(req) }

// Flush sends the queued requests.
func (c *Client) Flush() error { return c.w.Flush() }

// Receive reads the next answer.
func (c *Client) Receive() (Response, error) {
	line, err := readLine(c.r)
	if err != nil {
		return Response{}, fmt.Errorf("read the gateway's answer: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("the gateway's answer is not JSON: %w", err)
	}
	return resp, nil
}

// Do sends one request and waits for its answer; a refused request is an
// error with the gateway's reason.
func (c *Client) Do(req Request) (Response, error) {
	if err := c.Send(req); err != nil {
		return Response{}, err
	}
	if err := c.Flush(); err != nil {
		return Response{}, fmt.Errorf("send to the gateway: %w", err)
	}
	resp, err := c.Receive()
	if err != nil {
		return resp, err
	}
	if !resp.OK {
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// SAEntries writes SAs as requests carry them: the SA file's entries (keys
// included: a request is the one place they travel, over the 0600 socket).
func SAEntries(sas ...*sa.SA) (json.RawMessage, error) {
	data, err := sa.Marshal(&sa.Config{SAs: sas})
	if err != nil {
		return nil, err
	}
	var doc struct {
		SA []map[string]any `yaml:"sa"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("SA entries: %w", err)
	}
	return json.Marshal(doc.SA)
}

// PolicyEntries writes policies as the SA file's spd: entries.
func PolicyEntries(ps ...sa.Policy) (json.RawMessage, error) {
	list := make([]map[string]any, 0, len(ps))
	for _, p := range ps {
		m := map[string]any{"priority": p.Priority, "action": p.Action.String()}
		sel := p.Selector
		if sel.Src.IsValid() {
			m["src"] = sel.Src.String()
		}
		if sel.Dst.IsValid() {
			m["dst"] = sel.Dst.String()
		}
		if sel.Proto != 0 {
			m["proto"] = sa.ProtoName(sel.Proto)
		}
		if sel.SrcPorts != (sa.PortRange{}) {
			m["sport"] = sel.SrcPorts.String()
		}
		if sel.DstPorts != (sa.PortRange{}) {
			m["dport"] = sel.DstPorts.String()
		}
		if p.Action == sa.Protect {
			m["sa"] = fmt.Sprintf("%#x", p.SPI)
		}
		list = append(list, m)
	}
	return json.Marshal(list)
}
