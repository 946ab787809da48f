package wanrelay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A port whose peer goes away (its namespace torn down) ends Run at once
// with an error that names the port, not a hang or a silent stop.
func TestRelayLinkVanishes(t *testing.T) {
	b := newBed(t)
	r, err := New(Config{Netns: b.w, A: "wa", B: "wb"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	run(t, "ip", "-n", b.a, "link", "del", "a0")
	select {
	case err := <-done:
		if !errors.Is(err, unix.ENETDOWN) || !strings.Contains(err.Error(), "wa") {
			t.Fatalf("Run returned %v, want ENETDOWN naming wa", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5s after its port vanished")
	}
}
