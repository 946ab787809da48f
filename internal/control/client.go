package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
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

// Dial connects to the control socket at path.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect to the gateway's control socket (is control: set in its config?): %w", err)
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
