#!/usr/bin/env bash
# Instruction profiles (valgrind callgrind) of Signet's hot paths: pack and unpack of a stored
# 64 MiB file, pack of 2,000 small files, and reverify of the tree they install.
# Usage: bench/profile.sh [--work DIR]   (default /tmp/signet-profile; about 80 MiB)
# Prints each run's instruction total and its top functions (self cost); the callgrind files
# stay in the work directory for callgrind_annotate --inclusive=yes --tree=calling.
# Counts are repeatable for the same binary and inputs, whatever else the machine does.
set -euo pipefail
cd "$(dirname "$0")/.."
work=/tmp/signet-profile
[[ "${1:-}" == "--work" ]] && work=$2
command -v valgrind >/dev/null || { echo "profile.sh needs valgrind (apt-get install valgrind)" >&2; exit 2; }

# valgrind 3.19 cannot read the DWARF 5 Swift emits by default: a separate DWARF 4 build.
swift build -c release --scratch-path .build-prof -Xswiftc -g -Xswiftc -dwarf-version=4 -Xcc -gdwarf-4 --product signet 2>&1 | tail -n 1
signet="$PWD/.build-prof/release/signet"

mkdir -p "$work"
cd "$work"
rm -rf out small tree && mkdir out
[[ -f key.pem ]] || { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out key.pem 2>/dev/null; chmod 600 key.pem; }
openssl pkey -in key.pem -pubout -outform DER -out pub.der 2>/dev/null
[[ -f random.bin ]] || head -c 64M /dev/urandom > random.bin
python3 - <<'EOF'
import os
for i in range(2000):
    d = f"small/d{i // 250}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}.txt", "w") as f:
        f.write((f"line {i} " * 600)[:4096])
EOF

profile() {
    local name=$1; shift
    valgrind --tool=callgrind --callgrind-out-file="$work/$name.callgrind" "$@" >/dev/null 2>"$work/$name.log"
    echo "== $name: $(grep -o 'refs: *[0-9,]*' "$work/$name.log" | tr -s ' ') instructions"
    callgrind_annotate "$work/$name.callgrind" 2>/dev/null | awk '/file:function/ {on=1; next} on && NF' | head -n 8 | cut -c1-150  || true
}

profile pack-64m-stored "$signet" pack random.bin --key key.pem --name p --version 1 --store --out out/stored.zip
profile unpack-64m-stored "$signet" unpack out/stored.zip --dest out/stored --pubkey pub.der
profile pack-2k-small "$signet" pack small --key key.pem --name p --version 1 --out out/small.zip
"$signet" unpack out/small.zip --dest tree --pubkey pub.der >/dev/null
profile reverify-2k "$signet" reverify tree --pubkey pub.der
