package cryptoguest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

func TestExplore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g, err := Boot(ctx, Options{CryptoDevice: true, OpenSSL: true, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	t.Logf("boot %v cpu %v", g.BootTime, g.BootCPU)
	for _, s := range []string{"lsmod | head -50", "cat /proc/cpuinfo | grep flags | head -1", "uname -r", "ls -la /espgw /espgw/bin", "grep -c name /proc/crypto"} {
		out, err := g.Run(ctx, s)
		t.Logf("%s:\n%s %v", s, out, err)
	}
	n, err := g.CryptoRequests()
	t.Logf("used-idx %d %v", n, err)
	out, err := g.RunFor(ctx, 3*time.Minute, "insmod /lib/modules/espgw-extra/crypto_engine.ko; insmod /lib/modules/espgw-extra/virtio_crypto.ko; sleep 1; dmesg | tail -5; cat /proc/crypto > /tmp/pc; grep -B2 -A12 virtio /proc/crypto")
	t.Logf("%s %v", out, err)
	n, err = g.CryptoRequests()
	t.Logf("used-idx %d %v", n, err)
	out, err = g.RunFor(ctx, 3*time.Minute, "OPENSSL_CONF=/dev/null openssl speed -engine afalg -evp aes-128-cbc -seconds 1 -bytes 1024 2>&1 | tail -5; cat /proc/crypto")
	t.Logf("%s %v", out, err)
	n, err = g.CryptoRequests()
	t.Logf("used-idx %d %v", n, err)
	os.WriteFile("/tmp/afx/proc_crypto.txt", []byte(out), 0o644)
}
