#!/usr/bin/env bash
# Runs the whole espgw test suite, as CI does: set-up, then every package's
# tests with the race detector, including the root-only tests that build
# network namespaces, TUN devices and the Linux-kernel ESP peer.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
# The Go patch release with the standard library's security fixes (the
# module proxy serves it; the machine's own Go 1.26 fetches it).
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-go1.26.10}
# The fast tier first: format, vet, staticcheck, govulncheck, the tests
# that need no root (CI runs it before installing packages, then sets
# ESPGW_CHECKED=1).
[ -n "${ESPGW_CHECKED:-}" ] || ./scripts/check.sh
./scripts/setup.sh
# Tests keep what a person would look at here (the report pages' screenshots).
export ESPGW_ARTIFACTS="${ESPGW_ARTIFACTS:-$PWD/test-artifacts}"
# Debian's kernel and a small initramfs for the Linux-kernel ESP peer
# (unpacked into a cache folder, never installed as this machine's kernel).
./scripts/prepare-kernel-peer.sh
go test -race -count=1 -timeout 60m ./... "$@"
# Allocation tests skip under the race detector (it makes sync.Pool drop
# items), and peak-RSS bounds mean nothing under it (it makes the test
# process, whose memory a child's peak counts, several times larger): run
# them again in the plain build.
go test -count=1 -run 'Alloc|MemoryBounded' ./...
# The emulated cards' calibration against the published tables (skipped
# under the race detector, where too few ops run to judge a cell).
go test -count=1 -run Calibration ./internal/lab/sim/emul/
# The end-to-end tests again with every gateway on the aesni engine and its
# raw ESP on AF_XDP (wan-io: xdp): real tunnels between espgw gateways and
# against the Linux kernel's ESP and scapy, and the IKE-negotiated ones.
ESPGW_ENGINE=aesni ESPGW_WAN_IO=xdp go test -count=1 -timeout 40m ./internal/lab/e2e/ ./internal/lab/interop/ ./internal/lab/iketunnel/
# The aesni engine's pure-Go fallback, through the same tests.
go test -count=1 -tags purego ./offload/aesni/...
./scripts/fuzz.sh
