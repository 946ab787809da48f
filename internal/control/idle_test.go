package control_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/control"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// syncBuffer is a log destination several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A connection that sends nothing, or stops in the middle of a line, is
// told why and dropped once the idle timeout has passed, counted and
// logged once each; one that sends a whole request inside every timeout
// stays served however long it lives in all; the slots of the dropped
// ones are free again.
func TestControlSocketIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	conn, _ := memnet.Pipe(netip.AddrPortFrom(gw1, 0), netip.AddrPortFrom(gw2, 0), 64)
	g := gateway.New(memnet.NewDevice(64, 8), []gateway.Conn{conn}, func(*sa.SA) gateway.Conn { return conn }, cpu.New(),
		gateway.Options{Local: []netip.Addr{gw1}, InnerMTU: 1400, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { g.Run(ctx) })
	var logs syncBuffer
	srv, err := control.Listen(filepath.Join(t.TempDir(), "gw.sock"), target{g}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.IdleTimeout = idle
	wg.Go(func() { srv.Serve(ctx) })

	// listLine is a whole request; its first half is a line cut short.
	listLine := `{"op":"sa.list"}` + "\n"
	cases := []struct {
		name    string
		send    []string // written one after another, idle*6/10 apart
		dropped bool
		answers int // whole answers before the drop or the client's close
	}{
		{"sends nothing", nil, true, 0},
		{"stops mid-line", []string{listLine[:8]}, true, 0},
		{"a request, then nothing", []string{listLine}, true, 1},
		{"a line slower than the timeout", []string{listLine[:5], listLine[5:10], listLine[10:]}, true, 0},
		{"a request inside every timeout", []string{listLine, listLine, listLine, listLine}, false, 4},
	}
	wantDropped := uint64(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", srv.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			go func() {
				for _, s := range tc.send {
					if _, err := io.WriteString(c, s); err != nil {
						return
					}
					time.Sleep(idle * 6 / 10)
				}
				if !tc.dropped {
					c.(*net.UnixConn).CloseWrite()
				}
			}()
			c.SetReadDeadline(time.Now().Add(idle*time.Duration(len(tc.send)+1) + 10*time.Second))
			r := bufio.NewReader(c)
			answers, last := 0, ""
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					if err != io.EOF {
						t.Fatalf("after %d answers: %v", answers, err)
					}
					break
				}
				if strings.Contains(line, `"ok":true`) {
					answers++
				} else {
					last = line
				}
			}
			if answers != tc.answers {
				t.Errorf("%d answers, want %d", answers, tc.answers)
			}
			if tc.dropped {
				wantDropped++
				if !strings.Contains(last, "within 300ms: connection closed") {
					t.Errorf("dropped with %q, want the reason", last)
				}
				if since := time.Since(start); since < idle {
					t.Errorf("dropped after %v, before the %v timeout", since, idle)
				}
			} else if last != "" {
				t.Errorf("a client inside the timeout got %q", last)
			}
			if got := srv.Stats().Idle; got != wantDropped {
				t.Errorf("%d connections counted idle, want %d", got, wantDropped)
			}
		})
	}
	if n := strings.Count(logs.String(), "dropped an idle connection"); uint64(n) != wantDropped {
		t.Errorf("%d log lines for %d idle connections dropped:\n%s", n, wantDropped, logs.String())
	}
	// The dropped connections' slots are free: as many clients as the
	// server takes at once are all served.
	var clients []*control.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range 32 {
		c, err := control.Dial(srv.Path())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if resp, err := c.Do(control.Request{Op: "sa.list"}); err != nil || !resp.OK {
			t.Fatalf("client %d after the drops: %v %+v", len(clients), err, resp)
		}
	}
	if s := srv.Stats(); s.Refused != 0 {
		t.Errorf("%d refused after the idle ones were dropped", s.Refused)
	}
}
