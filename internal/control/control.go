// Package control is a running gateway's control socket and its client.
//
// It owns a running gateway's control socket: a Unix-domain socket (mode
// 0600, root's peers only) taking newline-delimited JSON requests that add,
// delete, update, list and rekey SAs and add, delete and list policies, each
// request one atomic change. SAs and policies are written as in the SA file
// (the same fields, parsed by package sa, so every error names the entry and
// field and never shows a key); nothing the socket answers carries a key.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/sa"
)

// Target is what the socket changes: a gateway runtime.
type Target interface {
	ApplyChange(gateway.Change) error
	SAs() []*esp.SA
	Policies() []sa.Policy
	IsLocal(netip.Addr) bool
}

// Request is one line a client sends.
type Request struct {
	// Op is sa.add, sa.del, sa.update, sa.list, sa.rekey, policy.add,
	// policy.del or policy.list.
	Op string `json:"op"`
	// SA is a list of SA file entries (sa.add, sa.update, sa.rekey).
	SA json.RawMessage `json:"sa,omitempty"`
	// SPD is a list of policies as in the SA file's spd: (policy.add,
	// policy.del: the policies to delete, as they read).
	SPD json.RawMessage `json:"spd,omitempty"`
	// IDs name the SAs to delete (sa.del).
	IDs []SAID `json:"ids,omitempty"`
	// Replaces are the SPIs the new SAs of a rekey replace, one per SA;
	// Phase is install, switch or retire (see Rekey).
	Replaces []string `json:"replaces,omitempty"`
	Phase    string   `json:"phase,omitempty"`
}

// SAID names an SA: its SPI and, if several share it, its destination.
type SAID struct {
	SPI string `json:"spi"`
	Dst string `json:"dst,omitempty"`
}

// Response is the one line the server answers a request with.
type Response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Changed is the number of SAs or policies the request added,
	// deleted or replaced.
	Changed  int          `json:"changed,omitempty"`
	SAs      []SAInfo     `json:"sas,omitempty"`
	Policies []PolicyInfo `json:"policies,omitempty"`
}

// SAInfo is an SA in force as listed: everything but its keys.
type SAInfo struct {
	SPI          string `json:"spi"`
	Direction    string `json:"direction"` // out, in or both
	Mode         string `json:"mode"`
	Src          string `json:"src"`
	Dst          string `json:"dst"`
	Encap        string `json:"encap"`
	Suite        string `json:"suite"`
	ESN          bool   `json:"esn"`
	ReplayWindow int    `json:"replay-window"`
	LastSeq      uint64 `json:"last_seq"`
	Highest      uint64 `json:"highest_accepted"`
	Expired      bool   `json:"expired"`
	esp.Snapshot
}

// PolicyInfo is a policy in force as listed, in the SA file's terms.
type PolicyInfo struct {
	Index    int    `json:"index"`
	Priority int    `json:"priority"`
	Src      string `json:"src,omitempty"`
	Dst      string `json:"dst,omitempty"`
	Proto    string `json:"proto,omitempty"`
	SPorts   string `json:"sport,omitempty"`
	DPorts   string `json:"dport,omitempty"`
	Action   string `json:"action"`
	SA       string `json:"sa,omitempty"`
}

// Server answers requests on a control socket.
type Server struct {
	target Target
	log    *slog.Logger
	ln     *net.UnixListener
	path   string
	wg     sync.WaitGroup
	conns  chan struct{} // a slot per connection being served
	// IdleTimeout is how long a connection may take to send a whole
	// request line (from the end of the last answer) or to read an
	// answer; a client that sends nothing, stops mid-line or stops
	// reading is dropped after it. Zero is DefaultIdleTimeout. Set it
	// before Serve.
	IdleTimeout   time.Duration
	refused, idle atomic.Uint64
}

// DefaultIdleTimeout is how long a control connection may stay idle, or
// take for one request line, before the server drops it.
const DefaultIdleTimeout = 30 * time.Second

// Stats are a server's counts of connections it did not serve to the end.
type Stats struct {
	// Refused counts connections refused because maxConns were open.
	Refused uint64 `json:"refused"`
	// Idle counts connections dropped for sending no whole request line,
	// or reading no answer, within the idle timeout.
	Idle uint64 `json:"idle"`
}

// Stats returns the server's counts.
func (s *Server) Stats() Stats { return Stats{Refused: s.refused.Load(), Idle: s.idle.Load()} }

// maxConns bounds the connections served at once; one more is answered
// with an error and closed. With maxRequest it bounds the memory clients
// can hold (32 × 4 MiB).
const maxConns = 32

// Listen makes the socket at path, readable and writable by its owner only
// (any stale socket file there is replaced, any other file refused).
func Listen(path string, target Target, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket %q: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %q: a file that is not a socket is there", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %q: another gateway answers on it", path)
		}
		os.Remove(path)
	}
	// The umask makes the socket 0600 from its creation, with no window
	// in which another user could connect.
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %q: %w", path, err)
	}
	return &Server{target: target, log: log, ln: ln, path: path, conns: make(chan struct{}, maxConns)}, nil
}

// Serve answers connections until ctx ends or Close.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.ln.Close()
	}()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				s.wg.Wait()
				return nil
			}
			return fmt.Errorf("control socket: %w", err)
		}
		select {
		case s.conns <- struct{}{}:
		default:
			c.SetWriteDeadline(time.Now().Add(time.Second))
			json.NewEncoder(c).Encode(Response{Error: fmt.Sprintf("%d connections are open, the most the control socket serves at once: close one and try again", maxConns)})
			c.Close()
			s.refused.Add(1)
			s.log.Warn("control socket: refused a connection", "open", maxConns)
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.conns }()
			defer c.Close()
			if err := peerIsRoot(c); err != nil {
				json.NewEncoder(c).Encode(Response{Error: err.Error()})
				s.log.Warn("control socket: refused a peer", "err", err)
				return
			}
			s.serveConn(c)
		}()
	}
}

// Close stops the server and removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close()
	os.Remove(s.path)
	return err
}

// peerIsRoot admits root and the gateway's own user only (SO_PEERCRED),
// whatever the socket file's mode became.
func peerIsRoot(c *net.UnixConn) error {
	uid, err := peerUID(c)
	if err != nil {
		return err
	}
	if !trusted(uid) {
		return fmt.Errorf("uid %d may not change the gateway (root only)", uid)
	}
	return nil
}

// trusted reports whether uid is root or this process's own user: the
// only users a gateway takes changes from, and the only ones a client
// sends keys to.
func trusted(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// peerUID is the user of the process at the other end of c (SO_PEERCRED).
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return 0, fmt.Errorf("peer credentials: %w", cerr)
	}
	return cred.Uid, nil
}

// maxRequest bounds one request line: a bulk add of 10,000 SAs fits.
const maxRequest = 4 << 20

// bigRequest is a request size after which the memory it took is given
// back to the system when its connection ends.
const bigRequest = 1 << 20

func (s *Server) serveConn(c net.Conn) {
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriter(c)
	enc := json.NewEncoder(w)
	big := false
	defer func() {
		if big {
			debug.FreeOSMemory()
		}
	}()
	for {
		c.SetReadDeadline(time.Now().Add(idle))
		line, err := readLine(r)
		big = big || len(line) > bigRequest || err != nil && !errors.Is(err, io.EOF)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.dropIdle(c, w, enc, idle, "no whole request line")
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				enc.Encode(Response{Error: err.Error()})
				w.Flush()
				// Read what the client still sends for a moment, so the
				// close does not reset the connection before it reads
				// the answer.
				if u, ok := c.(*net.UnixConn); ok {
					u.CloseWrite()
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				io.Copy(io.Discard, io.LimitReader(c, maxRequest))
			}
			return
		}
		var req Request
		resp := Response{}
		if err := json.Unmarshal(line, &req); err != nil {
			resp.Error = fmt.Sprintf("request is not JSON: %v", err)
		} else {
			resp = s.Handle(req)
		}
		c.SetWriteDeadline(time.Now().Add(idle))
		enc.Encode(resp)
		// Answer at once unless the client already sent the next
		// request: a pipelining client gets its answers in batches.
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					s.dropIdle(c, nil, nil, idle, "the answer not read")
				}
				return
			}
		}
	}
}

// dropIdle ends a connection that was idle for the timeout: it is counted,
// logged once, and told why when it can still be written to (w non-nil).
func (s *Server) dropIdle(c net.Conn, w *bufio.Writer, enc *json.Encoder, idle time.Duration, what string) {
	n := s.idle.Add(1)
	s.log.Warn("control socket: dropped an idle connection", "why", what, "timeout", idle, "dropped", n)
	if w == nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(time.Second))
	enc.Encode(Response{Error: fmt.Sprintf("%s within %s: connection closed", what, idle)})
	w.Flush()
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxRequest {
			return nil, fmt.Errorf("request longer than %d bytes: send fewer SAs per request", maxRequest)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(strings.TrimSpace(string(line))) > 0 {
				return line, nil
			}
			return nil, err
		}
	}
}

// Handle answers one request.
func (s *Server) Handle(req Request) Response {
	n, list, err := s.handle(req)
	if err != nil {
		return Response{Error: fmt.Sprintf("%s: %v", req.Op, err)}
	}
	resp := Response{OK: true, Changed: n}
	switch v := list.(type) {
	case []SAInfo:
		resp.SAs = v
	case []PolicyInfo:
		resp.Policies = v
	}
	return resp
}

func (s *Server) handle(req Request) (int, any, error) {
	switch req.Op {
	case "sa.add":
		sas, err := parseSAs(req.SA)
		if err != nil {
			return 0, nil, err
		}
		return len(sas), nil, s.target.ApplyChange(gateway.Change{Add: sas})
	case "sa.update":
		sas, err := parseSAs(req.SA)
		if err != nil {
			return 0, nil, err
		}
		c := gateway.Change{Add: sas}
		for _, x := range sas {
			c.Del = append(c.Del, gateway.SAID{SPI: x.SPI, Dst: x.Dst})
		}
		return len(sas), nil, s.target.ApplyChange(c)
	case "sa.del":
		if len(req.IDs) == 0 {
			return 0, nil, errors.New("ids: name the SAs to delete")
		}
		var c gateway.Change
		for i, id := range req.IDs {
			gid, err := parseID(id)
			if err != nil {
				return 0, nil, fmt.Errorf("ids[%d]: %w", i, err)
			}
			c.Del = append(c.Del, gid)
		}
		return len(c.Del), nil, s.target.ApplyChange(c)
	case "sa.list":
		return 0, s.listSAs(), nil
	case "sa.rekey":
		return s.rekey(req)
	case "policy.add", "policy.del":
		ps, err := parsePolicies(req.SPD)
		if err != nil {
			return 0, nil, err
		}
		if req.Op == "policy.add" {
			return len(ps), nil, s.target.ApplyChange(gateway.Change{AddPolicies: ps})
		}
		var c gateway.Change
		for _, p := range ps {
			c.DelPolicies = append(c.DelPolicies, gateway.PolicyID{Index: -1, Policy: p})
		}
		return len(ps), nil, s.target.ApplyChange(c)
	case "policy.list":
		return 0, listPolicies(s.target.Policies()), nil
	case "":
		return 0, nil, errors.New("op: missing (sa.add, sa.del, sa.update, sa.list, sa.rekey, policy.add, policy.del, policy.list)")
	}
	return 0, nil, fmt.Errorf("unknown op %s (want sa.add, sa.del, sa.update, sa.list, sa.rekey, policy.add, policy.del or policy.list)", strconv.QuoteToASCII(req.Op))
}

// Rekey phases: the make-before-break rollover of VPP and strongSwan, run
// on every gateway of the tunnel phase by phase (espgw sa rekey does).
const (
	// PhaseInstall adds the new SAs that are inbound here, beside the
	// old ones: both keys are accepted from now on.
	PhaseInstall = "install"
	// PhaseSwitch adds the new SAs that are outbound here, moves the
	// policies from the old SPI to the new one and deletes the old
	// outbound SA, in one change: the next packet goes out on the new SA.
	PhaseSwitch = "switch"
	// PhaseRetire deletes the old inbound SAs, after a grace period in
	// which the packets sealed with them have arrived.
	PhaseRetire = "retire"
)

func (s *Server) rekey(req Request) (int, any, error) {
	sas, err := parseSAs(req.SA)
	if err != nil {
		return 0, nil, err
	}
	if len(req.Replaces) != len(sas) {
		return 0, nil, fmt.Errorf("replaces: %d SPIs for %d new SAs (one each)", len(req.Replaces), len(sas))
	}
	old := make([]uint32, len(sas))
	for i, r := range req.Replaces {
		v, err := strconv.ParseUint(r, 0, 32)
		if err != nil {
			return 0, nil, fmt.Errorf("replaces[%d]: %s is not an SPI", i, strconv.QuoteToASCII(r))
		}
		old[i] = uint32(v)
		if old[i] == sas[i].SPI {
			return 0, nil, fmt.Errorf("replaces[%d]: the new SA has the old SPI %#x (a rekey needs a new one)", i, old[i])
		}
	}
	var c gateway.Change
	for i, n := range sas {
		out, in := s.target.IsLocal(n.Src), s.target.IsLocal(n.Dst)
		switch req.Phase {
		case PhaseInstall:
			if in {
				c.Add = append(c.Add, n)
			}
		case PhaseSwitch:
			if out {
				c.Add = append(c.Add, n)
				if c.Retarget == nil {
					c.Retarget = map[uint32]uint32{}
				}
				c.Retarget[old[i]] = n.SPI
				c.Del = append(c.Del, gateway.SAID{SPI: old[i], Dst: n.Dst})
			}
		case PhaseRetire:
			if in {
				c.Del = append(c.Del, gateway.SAID{SPI: old[i], Dst: n.Dst})
			}
		default:
			return 0, nil, fmt.Errorf("phase: %s (want install, switch or retire)", strconv.QuoteToASCII(req.Phase))
		}
	}
	if len(c.Add)+len(c.Del) == 0 {
		return 0, nil, nil
	}
	return len(c.Add) + len(c.Del), nil, s.target.ApplyChange(c)
}

// parseSAs reads SA file entries; the SA parser checks every field.
func parseSAs(raw json.RawMessage) ([]*sa.SA, error) {
	list, err := sequence(raw, "sa")
	if err != nil {
		return nil, err
	}
	cfg, err := sa.ParseNodes("request", list, nil)
	if err != nil {
		return nil, err
	}
	return cfg.SAs, nil
}

func parsePolicies(raw json.RawMessage) ([]sa.Policy, error) {
	list, err := sequence(raw, "spd")
	if err != nil {
		return nil, err
	}
	cfg, err := sa.ParseNodes("request", nil, list)
	if err != nil {
		return nil, err
	}
	return cfg.SPD, nil
}

// sequence reads a JSON list (or one object, taken as a list of one) as the
// YAML node the SA parser reads: JSON is YAML.
func sequence(raw json.RawMessage, field string) (*yaml.Node, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: missing", field)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) != 1 {
		return nil, fmt.Errorf("%s: not a JSON list", field)
	}
	n := doc.Content[0]
	if n.Kind == yaml.MappingNode {
		n = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{n}, Line: n.Line}
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, fmt.Errorf("%s: want a list of entries", field)
	}
	return n, nil
}

func parseID(id SAID) (gateway.SAID, error) {
	spi, err := strconv.ParseUint(id.SPI, 0, 32)
	if err != nil {
		return gateway.SAID{}, fmt.Errorf("spi: %s is not an SPI", strconv.QuoteToASCII(id.SPI))
	}
	out := gateway.SAID{SPI: uint32(spi)}
	if id.Dst != "" {
		if out.Dst, err = netip.ParseAddr(id.Dst); err != nil {
			return gateway.SAID{}, fmt.Errorf("dst: %s is not an address", strconv.QuoteToASCII(id.Dst))
		}
	}
	return out, nil
}

func (s *Server) listSAs() []SAInfo {
	sas := s.target.SAs()
	out := make([]SAInfo, 0, len(sas))
	for _, x := range sas {
		c := x.Config
		dir := ""
		if s.target.IsLocal(c.Src) {
			dir = "out"
		}
		if s.target.IsLocal(c.Dst) {
			dir += "in"
		}
		if dir == "outin" {
			dir = "both"
		}
		out = append(out, SAInfo{SPI: fmt.Sprintf("%#x", c.SPI), Direction: dir, Mode: c.Mode.String(), Src: c.Src.String(), Dst: c.Dst.String(),
			Encap: c.Encap.String(), Suite: c.Suite.String(), ESN: c.ESN, ReplayWindow: c.ReplayWindow,
			LastSeq: x.LastSeq(), Highest: x.HighestAccepted(), Expired: x.Expired(), Snapshot: x.Snapshot()})
	}
	return out
}

func listPolicies(ps []sa.Policy) []PolicyInfo {
	out := make([]PolicyInfo, 0, len(ps))
	pfx := func(p netip.Prefix) string {
		if !p.IsValid() {
			return ""
		}
		return p.String()
	}
	ports := func(r sa.PortRange) string {
		if r == (sa.PortRange{}) {
			return ""
		}
		return r.String()
	}
	for i, p := range ps {
		info := PolicyInfo{Index: i, Priority: p.Priority, Src: pfx(p.Selector.Src), Dst: pfx(p.Selector.Dst),
			SPorts: ports(p.Selector.SrcPorts), DPorts: ports(p.Selector.DstPorts), Action: p.Action.String()}
		if p.Selector.Proto != 0 {
			info.Proto = sa.ProtoName(p.Selector.Proto)
		}
		if p.Action == sa.Protect {
			info.SA = fmt.Sprintf("%#x", p.SPI)
		}
		out = append(out, info)
	}
	return out
}
