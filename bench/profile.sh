#!/usr/bin/env bash
# Instruction profiles (valgrind callgrind) of Signet's hot paths: pack and unpack of a stored
# 64 MiB file, pack of 2,000 small files, reverify of the tree they install, and unpack and
# reverify of 10,000 small files (the package is made outside the profile: 10,000 RSA
# signatures under valgrind take a quarter of an hour).
# Usage: bench/profile.sh [--work DIR] [--signet BIN] [--only NAME...]
#   --work DIR    default /tmp/signet-profile (about 100 MiB)
#   --signet BIN  profile this binary instead of building one: for a before/after table, build
#                 an older commit the same way (see the swift build line below) and pass it
# Prints each run's instruction total and its top functions (self cost); the callgrind files
# stay in the work directory for callgrind_annotate --inclusive=yes --tree=calling.
# Counts are repeatable for the same binary and inputs, whatever else the machine does.
set -euo pipefail
cd "$(dirname "$0")/.."
work=/tmp/signet-profile
signet=""
only=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --work) work=$2; shift 2 ;;
        --signet) signet=$(realpath "$2"); shift 2 ;;
        --only) shift; while [[ $# -gt 0 && "$1" != --* ]]; do only+=("$1"); shift; done ;;
        *) echo "profile.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "profile.sh needs valgrind (apt-get install valgrind)" >&2; exit 2; }

if [[ -z "$signet" ]]; then
    # valgrind 3.19 cannot read the DWARF 5 Swift emits by default: a separate DWARF 4 build.
    swift build -c release --scratch-path .build-prof -Xswiftc -g -Xswiftc -dwarf-version=4 -Xcc -gdwarf-4 --product signet 2>&1 | tail -n 1
    signet="$PWD/.build-prof/release/signet"
fi

mkdir -p "$work"
cd "$work"
rm -rf out small tree tree-10k && mkdir out
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
# 10,000 small text files (200 B - 3 KiB, 1,000 per folder), as bench/memory.py makes them.
[[ -d small-10k ]] || python3 - <<'EOF'
import os, random
random.seed(10000)
for i in range(10000):
    d = f"small-10k/d{i // 1000:03d}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i:06d}.txt", "w") as f:
        f.write(f"file {i} " * random.randint(25, 380))
EOF

profile() {
    local name=$1; shift
    selected "$name" || return 0
    valgrind --tool=callgrind --callgrind-out-file="$work/$name.callgrind" "$@" >/dev/null 2>"$work/$name.log"
    echo "== $name: $(grep -o 'refs: *[0-9,]*' "$work/$name.log" | tr -s ' ') instructions"
    callgrind_annotate "$work/$name.callgrind" 2>/dev/null | awk '/file:function/ {on=1; next} on && NF' | head -n 8 | cut -c1-150  || true
}

selected() { [[ ${#only[@]} -eq 0 || " ${only[*]} " == *" $1 "* ]]; }

profile pack-64m-stored "$signet" pack random.bin --key key.pem --name p --version 1 --store --out out/stored.zip
if selected unpack-64m-stored; then
    [[ -f out/stored.zip ]] || "$signet" pack random.bin --key key.pem --name p --version 1 --store --out out/stored.zip >/dev/null
    profile unpack-64m-stored "$signet" unpack out/stored.zip --dest out/stored --pubkey pub.der
fi
profile pack-2k-small "$signet" pack small --key key.pem --name p --version 1 --out out/small.zip
if selected reverify-2k; then
    [[ -f out/small.zip ]] || "$signet" pack small --key key.pem --name p --version 1 --out out/small.zip >/dev/null
    "$signet" unpack out/small.zip --dest tree --pubkey pub.der >/dev/null
    profile reverify-2k "$signet" reverify tree --pubkey pub.der
fi
if selected unpack-10k || selected reverify-10k; then
    "$signet" pack small-10k --key key.pem --name p --version 1 --out out/small-10k.zip >/dev/null
    if selected unpack-10k; then
        profile unpack-10k "$signet" unpack out/small-10k.zip --dest tree-10k --pubkey pub.der
    else
        "$signet" unpack out/small-10k.zip --dest tree-10k --pubkey pub.der >/dev/null
    fi
    profile reverify-10k "$signet" reverify tree-10k --pubkey pub.der
fi
