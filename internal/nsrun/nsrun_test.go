package nsrun_test

import (
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/espgw/espgw/internal/nsrun"
)

// newNamespace makes an unnamed network namespace (no /run/netns entry),
// freed when its handle closes.
func newNamespace(t *testing.T) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.New()
	if err != nil {
		t.Skipf("create a network namespace: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatalf("return to the test's namespace: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// fn runs inside the namespace, its error comes back, and the thread is
// back in its own namespace after.
func TestRun(t *testing.T) {
	h := newNamespace(t)
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	for _, want := range []error{nil, errors.New("fn failed")} {
		var inside bool
		err := nsrun.Run(h, func() error {
			cur, err := netns.Get()
			if err != nil {
				return err
			}
			defer cur.Close()
			inside = cur.Equal(h)
			return want
		})
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("Run returned %v, want %v", err, want)
		}
		if !inside {
			t.Error("fn did not run in the namespace")
		}
		runtime.LockOSThread()
		after, err := netns.Get()
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatal(err)
		}
		if !after.Equal(before) {
			t.Errorf("after Run the goroutine is in %v, not %v", after, before)
		}
		after.Close()
	}
}

func TestRunBadHandle(t *testing.T) {
	called := false
	err := nsrun.Run(netns.None(), func() error { called = true; return nil })
	if err == nil || called {
		t.Errorf("Run on no namespace: %v, fn called %v", err, called)
	}
}
