package control_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/control"
)

// TestMain also serves as a stand-in for a control socket when told to by
// ESPGW_TEST_LISTEN: it listens there, and writes how many bytes its one
// client sent to the file ESPGW_TEST_GOT.
func TestMain(m *testing.M) {
	if path := os.Getenv("ESPGW_TEST_LISTEN"); path != "" {
		os.Exit(listenOnce(path, os.Getenv("ESPGW_TEST_GOT")))
	}
	os.Exit(m.Run())
}

func listenOnce(path, got string) int {
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening")
	c, err := ln.Accept()
	if err != nil {
		return 1
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	var buf bytes.Buffer
	buf.ReadFrom(c)
	os.WriteFile(got, []byte(strconv.Itoa(buf.Len())), 0o644)
	return 0
}

// vmRSS is this process's resident set now, from /proc.
func vmRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// The control socket bounds what clients can hold: connections beyond
// the limit are answered with an error and closed, a request line beyond
// 4 MiB is refused, and the memory hostile clients made the server take
// is given back once they leave (checked in the plain build: the race
// detector's shadow memory stays); the socket then serves as before.
func TestControlSocketLimitsMemoryBounded(t *testing.T) {
	p := newPair(t)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	refused := 0
	for range 40 {
		c, err := net.Dial("unix", p.sock[0])
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			if !strings.Contains(line, "connections are open") {
				t.Errorf("an extra connection was answered %q", line)
			}
			refused++
		}
	}
	// p.c1 holds one connection: 32 are served, the other 9 refused.
	if refused != 9 {
		t.Errorf("%d of 41 connections refused, want the 9 beyond 32", refused)
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil

	payload := bytes.Repeat([]byte("x"), 5<<20)
	time.Sleep(100 * time.Millisecond)
	before := vmRSS(t)
	var wg sync.WaitGroup
	answers := make([]string, 10)
	for i := range answers {
		wg.Go(func() {
			c, err := net.Dial("unix", p.sock[0])
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer c.Close()
			go c.Write(payload) // an unterminated 5 MiB line: the server stops reading it at 4 MiB
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if answers[i], err = bufio.NewReader(c).ReadString('\n'); err != nil {
				answers[i] += err.Error()
			}
		})
	}
	wg.Wait()
	for _, a := range answers {
		if !strings.Contains(a, "request longer than 4194304 bytes") {
			t.Errorf("a 4 MiB line was answered %q", a)
		}
	}
	var after int64
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		if after = vmRSS(t); after < before+16<<20 {
			break
		}
	}
	t.Logf("RSS %d MB before ten 5 MiB lines, %d MB after their clients left", before>>20, after>>20)
	if after > before+16<<20 && !raceEnabled {
		t.Errorf("RSS %d MB after the hostile clients left, %d MB before: the memory was not given back", after>>20, before>>20)
	}
	c, err := control.Dial(p.sock[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp, err := c.Do(control.Request{Op: "sa.list"}); err != nil || !resp.OK {
		t.Errorf("sa.list after the hostile clients: %v %+v", err, resp)
	}
}

// The client sends nothing, keys least of all, to a socket served by a
// user other than root and its own: a uid-65534 process listening on a
// world-writable directory's socket gets zero bytes.
func TestControlClientChecksServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: runs a stand-in server as uid 65534 (nobody)")
	}
	dir, err := os.MkdirTemp("", "espgw-control-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	sock, got, bin := filepath.Join(dir, "s.sock"), filepath.Join(dir, "got"), filepath.Join(dir, "control.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "ESPGW_TEST_LISTEN="+sock, "ESPGW_TEST_GOT="+got)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "listening\n" {
		t.Fatalf("the stand-in server did not start: %q", line)
	}
	c, err := control.Dial(sock)
	if err == nil {
		c.Send(control.Request{Op: "sa.add", SA: raw(t, []any{saJSON(0x1001, gw1, gw2, key20())})})
		c.Flush()
		c.Close()
		t.Error("Dial to a uid-65534 server: no error")
	} else if !strings.Contains(err.Error(), "served by uid 65534, neither root nor this user") {
		t.Errorf("Dial to a uid-65534 server: %v", err)
	}
	cmd.Wait()
	if b, err := os.ReadFile(got); err != nil || string(b) != "0" {
		t.Errorf("the uid-65534 server received %q bytes (%v), want 0", b, err)
	}
}
