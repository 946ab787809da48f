#!/usr/bin/env bash
# A short run of every Go fuzz target (the parsers, ESP open, the engines
# against the cpu reference). FUZZTIME sets the time per target (default 8s).
#
# Go 1.26's fuzz coordinator can end a run with a bare "context deadline
# exceeded" at the -fuzztime boundary when a worker is slow to stop
# (go.dev/issue/75804, fixed in Go 1.27): no input failed and none is
# written. Such a run is retried once, after the target's corpus replays
# cleanly; a second one is reported as a flake. A real finding (a failing
# input written, a panic, a test error) fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
fuzztime=${FUZZTIME:-8s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
passed=0
flaked=0

# bare_deadline reports whether the log shows only the coordinator's
# deadline race and no finding.
bare_deadline() {
  grep -q 'context deadline exceeded' "$log" &&
    ! grep -q -e 'Failing input written' -e 'panic:' -e '_test.go:[0-9]' "$log"
}

fail() {
  cat "$log"
  echo "fuzz: $1 in $2 failed" >&2
  echo "fuzz: $passed passed, 1 failed, $flaked flaked"
  exit 1
}

while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
    ok=0
    for attempt in 1 2; do
      if [ "$attempt" = 1 ]; then
        echo "fuzz $pkg $target ($fuzztime)"
      else
        echo "fuzz $pkg $target ($fuzztime, again)"
      fi
      if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
        ok=1
        break
      fi
      bare_deadline || fail "$target" "$pkg"
      echo "fuzz: $target: the fuzz coordinator's deadline race (go.dev/issue/75804), no input failed; replaying the corpus"
      go test -count=1 -run "^${target}\$" "$pkg" >"$log" 2>&1 || fail "$target" "$pkg"
    done
    if [ "$ok" = 1 ]; then
      passed=$((passed + 1))
    else
      flaked=$((flaked + 1))
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
echo "fuzz: $passed passed, 0 failed, $flaked flaked"
