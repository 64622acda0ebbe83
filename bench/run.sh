#!/usr/bin/env bash
# Side-by-side benchmark: Signet against the openssl + zip/unzip pipeline it replaces.
# Usage: bench/run.sh [--reps N] [--scale S] [--only ROW ...] [--work DIR] [--json FILE]
# See bench/README.md. Builds signet in release mode first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
swift build -c release --product signet 2>&1 | tail -n 1
exec python3 bench/bench.py --signet "$(swift build -c release --show-bin-path)/signet" "$@"
