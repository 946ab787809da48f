#!/usr/bin/env bash
# A short run of every Go fuzz target (the parsers, ESP open, the engines
# against the cpu reference). FUZZTIME sets the time per target (default 8s).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
fuzztime=${FUZZTIME:-8s}
passed=0
while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
    echo "fuzz $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/espgw-fuzz.log 2>&1 || {
      cat /tmp/espgw-fuzz.log
      echo "fuzz: $target in $pkg failed" >&2
      echo "fuzz: $passed passed, 1 failed"
      exit 1
    }
    passed=$((passed + 1))
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
echo "fuzz: $passed passed, 0 failed"
