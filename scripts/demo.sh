#!/usr/bin/env bash
# The whole espgw story in one command: installs what is missing, builds
# espgw and runs `espgw demo` (two gateways in network namespaces, pings,
# a pcap replay, an iperf3 burst, a WAN capture decrypted by tshark).
# Extra arguments go to `espgw demo` (see `espgw demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH=/usr/local/go/bin:$PATH
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-go1.26.10}
# The commit goes into the binary (reports name the espgw version of each
# run), also where GOFLAGS turns VCS stamping off.
go build -buildvcs=auto -o bin/espgw ./cmd/espgw
exec ./bin/espgw demo "$@"
