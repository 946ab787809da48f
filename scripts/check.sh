#!/usr/bin/env bash
# The fast tier: formatting, vet, staticcheck, govulncheck and the tests that
# need no root, in a few minutes. CI runs it before the root-only suite;
# run it before every commit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
# The Go patch release with the standard library's security fixes, taken
# from the module proxy when the machine's own Go is older.
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-go1.26.10}

staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
govulncheck=golang.org/x/vuln/cmd/govulncheck@v1.9.0
# The Go vulnerability database as a module (the proxy serves it; the
# database's own site is not reachable from every machine).
vulndb=golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018

step() { printf '== %s\n' "$*"; }

step gofmt
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi

step go vet
go vet ./...

step staticcheck
go run "$staticcheck" ./...

step govulncheck
dbdir=${ESPGW_VULNDB_DIR:-/var/cache/espgw/vulndb}
if [ ! -f "$dbdir/index/db.json" ]; then
  src=$(go mod download -json "$vulndb" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  rm -rf "$dbdir.tmp"
  go run "golang.org/x/vulndb/cmd/indexdb@${vulndb#*@}" -vulns "$src/data/osv" -out "$dbdir.tmp"
  rm -rf "$dbdir"
  mv "$dbdir.tmp" "$dbdir"
fi
go run "$govulncheck" -db "file://$dbdir" ./...

# Packages whose tests need no root, no namespaces and no guest.
step go test -short, no root
go test -count=1 -short \
  ./esp/... ./sa/... ./internal/control ./internal/errlist ./internal/yamlwalk ./internal/header ./internal/secret ./internal/shell \
  ./internal/memnet ./internal/nsrun ./internal/overwrite ./offload/virtio/internal/vfio \
  ./offload ./offload/cpu ./offload/aesni/... ./offload/afalg/internal/kcapi ./offload/engines ./internal/cli \
  ./internal/lab/sim/... ./internal/lab/layout ./internal/lab/kernelpeer/agent ./internal/lab/kernelpeer/cmd/prepare ./internal/lab/kernelpeer/ctl ./internal/lab/scapy ./scenarios \
  ./internal/lab/impair ./internal/lab/labyaml ./internal/lab/pcapgen ./internal/lab/speed ./internal/lab/testbed \
  ./internal/lab/figures ./internal/lab/runinfo ./internal/lab/certgen ./internal/lab/charonguest
