package cryptoguest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
)

// noDevice is a guest started without any crypto device, for the negative
// controls: an engine that needs the device must refuse there.
var noDevice labtest.Shared[*Guest]

func noDeviceGuest(t *testing.T) *Guest {
	t.Helper()
	return bootShared(t, &noDevice, "guest without a crypto device", Options{Prefix: "cg0"})
}

// bootShared boots the guest of s with opts on first use (5 minutes for
// the boot, 10 for all), for every test that asks for it.
func bootShared(t *testing.T, s *labtest.Shared[*Guest], what string, opts Options) *Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG; run without -short")
	}
	labtest.NeedNamespaces(t)
	return s.Get(t, what, func() (*Guest, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		opts.BootTimeout, opts.Logger = 5*time.Minute, logger()
		return Boot(ctx, opts)
	})
}

// TestMain closes the guests the tests booted: the afalg guest (shared),
// the virtio guest behind an IOMMU (sharedIOMMU) and the one without a
// device (noDevice).
func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range []*labtest.Shared[*Guest]{&shared, &sharedIOMMU, &noDevice} {
		s.Close(&code, "guest", (*Guest).Close)
	}
	os.Exit(code)
}
