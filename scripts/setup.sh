#!/usr/bin/env bash
# Installs what espgw's demo and tests need on a Debian machine (root):
# the independent judges (scapy, tshark), traffic tools (iperf3, ping),
# wg (wireguard-tools) for the bench's wireguard-go baseline,
# the kernel-peer toolchain (qemu, busybox), and Go's modules.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t packages < <(grep -v '^#' scripts/packages.txt | grep -v '^$')
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH=/usr/local/go/bin:$PATH
  else
    echo "setup: Go 1.26 is needed (https://go.dev/dl); not found on PATH or in /usr/local/go" >&2
    exit 1
  fi
fi
go mod download
