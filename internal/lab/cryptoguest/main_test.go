package cryptoguest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// noDevice is a guest started without any crypto device, for the negative
// controls: an engine that needs the device must refuse there.
var noDevice struct {
	once sync.Once
	g    *Guest
	err  error
}

func noDeviceGuest(t *testing.T) *Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG; run without -short")
	}
	noDevice.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		noDevice.g, noDevice.err = Boot(ctx, Options{Prefix: "cg0", BootTimeout: 5 * time.Minute, Logger: logger()})
	})
	if noDevice.err != nil {
		t.Fatalf("guest without a crypto device unavailable: %v", noDevice.err)
	}
	return noDevice.g
}

// TestMain closes the guests the tests booted: the afalg guest (shared),
// the virtio guest behind an IOMMU (sharedIOMMU) and the one without a
// device (noDevice).
func TestMain(m *testing.M) {
	code := m.Run()
	for _, g := range []*Guest{shared.g, sharedIOMMU.g, noDevice.g} {
		if g != nil {
			if err := g.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}
