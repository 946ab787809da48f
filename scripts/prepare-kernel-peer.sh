#!/usr/bin/env bash
# Prepares the Linux-kernel ESP peer (internal/lab/kernelpeer): Debian's kernel
# image unpacked into $ESPGW_KERNEL_DIR (default /var/cache/espgw/kernel),
# never installed as the machine's kernel; the guest agent; the initramfs.
# Idempotent: a prepared folder takes seconds. Needs root, apt, dpkg-deb,
# busybox-static, iproute2 (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
if ! apt-cache show linux-image-amd64 >/dev/null 2>&1; then
  apt-get update -qq
fi
exec go run ./internal/lab/kernelpeer/cmd/prepare "$@"
