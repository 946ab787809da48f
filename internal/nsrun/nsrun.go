// Package nsrun runs a function inside another network namespace.
//
// It runs a function inside another network namespace: on a locked OS thread
// switched into the namespace and back. Sockets and TUN devices opened by
// the function belong to that namespace for good.
package nsrun

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Run runs fn on a locked OS thread inside namespace h, then restores the
// thread's namespace. If the thread cannot be restored it stays locked, so
// the Go runtime retires it with the goroutine instead of reusing it
// elsewhere. Goroutines started by fn do not inherit the namespace.
func Run(h netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", h, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(fnErr, fmt.Errorf("return to original namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}
