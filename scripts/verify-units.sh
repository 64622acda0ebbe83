#!/usr/bin/env bash
# Checks the systemd units the Debian package ships with `systemd-analyze verify`, as instance
# "app" of each template. With SIGNET_BINARY set, ExecStart names that binary instead of
# /usr/bin/signet (the tests run it before the package is installed). Prints what systemd-analyze
# says; fails if it says anything about these units.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v systemd-analyze >/dev/null || { echo "verify-units.sh: systemd-analyze is missing (apt-get install systemd)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for unit in packaging/systemd/signet-update@.service packaging/systemd/signet-update@.timer packaging/systemd/signet-boot-check@.service \
    packaging/systemd/signet-serve@.socket packaging/systemd/signet-serve@.service; do
  name=$(basename "$unit" | sed 's/@\./@app./')
  sed "s|/usr/bin/signet|${SIGNET_BINARY:-/usr/bin/signet}|g" "$unit" > "$work/$name"
done
output=$(systemd-analyze verify --man=no "$work/signet-update@app.service" "$work/signet-update@app.timer" "$work/signet-boot-check@app.service" \
  "$work/signet-serve@app.socket" "$work/signet-serve@app.service" 2>&1) || { echo "$output" >&2; exit 1; }
if grep -q 'signet-update\|signet-boot-check\|signet-serve' <<<"$output"; then echo "$output" >&2; exit 1; fi
echo "verify-units.sh: signet-update@.service, signet-update@.timer, signet-boot-check@.service, signet-serve@.socket and signet-serve@.service verify"
