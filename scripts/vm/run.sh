#!/usr/bin/env bash
# The VM suite (issue 38): a real Debian 12 machine under qemu (software emulation, no network
# device) runs the shipped systemd units for real and records power cuts at the block layer.
#
#   scripts/vm/run.sh [--report FILE]
#
# 1. Builds the test image (scripts/vm/build-image.sh; reused while its inputs are unchanged)
#    and the signet .deb (scripts/build-deb.sh; or SIGNET_DEB=path).
# 2. Makes the job disk: two releases of a 2,000-file app (100 changed, 100 removed, 100
#    added), packed and signed by the .deb's own signet; a TUF repository in two states; a TLS
#    PKI for the guest's nginx; scripts/vm/guest/guest.sh.
# 3. Boots the machine (qemu-system-x86_64 -accel tcg -nic none, serial console to
#    console.log), which runs guest.sh and powers off.
# 4. Replays each dm-log-writes log on this machine (scripts/vm/replay.py) at every flush and
#    FUA point after the "empty" mark, and at random subsets of each interval's unflushed
#    writes; each image is loop-mounted and checked: DIR wholly old or wholly new, the state
#    file consistent, a next update succeeding. The test-only broken build must be caught.
#    The log recorded with --verity (ext4 -O verity) is read by debugfs instead, this
#    machine's kernel having no fs-verity: DIR wholly old or new, every file an fs-verity file,
#    the state file and release record consistent (no next update: see replay.py).
# 5. Writes the JSON report (default .build-vm/report.json) and exits 1 on any failure.
#
# Needs root (loop devices, mounts), qemu-system-x86, mmdebstrap, xfsprogs and python3
# (scripts/install-deps.sh installs them). SIGNET_VM_DIR moves the work folder (default
# .build-vm); SIGNET_VM_ONLY=kernel runs only the guest's kernel phase (issue 52: IMA and fs-verity,
# about 15 minutes) and checks only its keys; SIGNET_VM_TIMEOUT bounds the guest (default 3000 s: the guest takes about 28 minutes here since the kernel phase of issue 52, and CI machines have been 1.6 times slower).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
vm=${SIGNET_VM_DIR:-$repo/.build-vm}
report=$vm/report.json
while [ $# -gt 0 ]; do
  case $1 in
    --report) report=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "run.sh: needs root (loop devices and mounts)" >&2; exit 1; }
for pair in qemu-system-x86_64:qemu-system-x86 mmdebstrap:mmdebstrap mkfs.xfs:xfsprogs losetup:mount python3:python3 openssl:openssl dpkg-deb:dpkg; do
  command -v "${pair%%:*}" >/dev/null || { echo "run.sh: ${pair%%:*} is missing (apt-get install ${pair#*:}, or scripts/install-deps.sh)" >&2; exit 1; }
done
began=$(date +%s)
phase() { echo "== vm $(( $(date +%s) - began ))s: $*" >&2; }

mkdir -p "$vm"
phase "image"
scripts/vm/build-image.sh "$vm/image"

deb=${SIGNET_DEB:-}
if [ -z "$deb" ]; then
  phase "the .deb (scripts/build-deb.sh)"
  OUT_DIR="$vm/dist" scripts/build-deb.sh >&2
  deb=$(ls -t "$vm"/dist/signet_*.deb | head -n 1)
fi
[ -f "$deb" ] || { echo "run.sh: no .deb at '$deb'" >&2; exit 1; }

work=$vm/run
# A run that stopped half-way may have left its mounts.
for m in /run/signet-vm/*; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
rm -rf "$work"
mkdir -p "$work/job/pkg" "$work/job/tls" "$work/job/tuf" "$work/deb"
dpkg-deb -x "$deb" "$work/deb"
signet=$work/deb/usr/bin/signet
cp "$deb" "$work/job/signet.deb"
cp scripts/vm/guest/guest.sh scripts/vm/guest/kernel.sh "$work/job/"
[ "${SIGNET_VM_ONLY:-}" = kernel ] && touch "$work/job/only-kernel"
# Issue 52: README's IMA boot block, as written, for the guest to run.
awk '/^<!-- ima-boot -->$/ { marked = 1; next } marked && /^```/ { if (inside) exit; inside = 1; next } inside { print }' README.md > "$work/job/readme-ima-boot.sh"
[ -s "$work/job/readme-ima-boot.sh" ] || { echo "run.sh: README.md has no block marked <!-- ima-boot -->" >&2; exit 1; }

phase "fixtures: two releases of 2,000 files, a TUF repository, the TLS PKI"
python3 - "$work" <<'PY'
import os, random, sys
work = sys.argv[1]
rng = random.Random(38)
def write(root, rel, data, mode=0o644):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
names = [f"d{index % 40:02d}/f{index:04d}.dat" for index in range(2000)]
contents = {name: rng.randbytes(rng.randint(100, 8000)) for name in names}
for name in names:
    write(os.path.join(work, "r1"), name, contents[name], 0o755 if name.endswith("7.dat") else 0o644)
changed, removed = set(names[0:100]), set(names[100:200])
for name in names:
    if name in removed:
        continue
    data = rng.randbytes(rng.randint(100, 8000)) if name in changed else contents[name]
    write(os.path.join(work, "r2"), name, data, 0o755 if name.endswith("7.dat") else 0o644)
for index in range(100):
    write(os.path.join(work, "r2"), f"new/n{index:03d}.dat", rng.randbytes(rng.randint(100, 8000)))
# One large file: its writeback is started while it is written (StagedWriter).
# Issue 52, IMA: an app with a program (bin/hello) and 300 data files; release 2 changes the
# program and 30 files.
for release in (1, 2):
    root = os.path.join(work, f"i{release}")
    write(root, "bin/hello", f"#!/bin/sh\necho hello from release {release}\n".encode(), 0o755)
    for index in range(300):
        seed = random.Random(index * 7 + (release if index < 30 else 0))
        write(root, f"d{index % 10:02d}/f{index:04d}.dat", seed.randbytes(seed.randint(100, 6000)))
# Issue 52, fs-verity: 10,000 files of 32 KiB (compressible: the package stays small); release
# 2 changes 100 of them.
for release in (1, 2):
    root = os.path.join(work, f"v{release}")
    for index in range(10000):
        seed = random.Random(index * 11 + (release if index < 100 else 0))
        write(root, f"d{index % 100:02d}/f{index:04d}.dat", seed.randbytes(64) * 512)
big = rng.randbytes(3 << 20)
write(os.path.join(work, "r1"), "big/model.bin", big)
write(os.path.join(work, "r2"), "big/model.bin", big[:1 << 20] + rng.randbytes(1 << 20) + big[2 << 20:])
PY
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/key.pem" 2>/dev/null
openssl pkey -in "$work/key.pem" -pubout -outform DER -out "$work/job/pkg/pub.der"
(cd "$work/r1" && "$signet" pack . --key "$work/key.pem" --name app --version 1.0 --sequence 1 --out "$work/job/pkg/r1.zip" >/dev/null)
(cd "$work/r2" && "$signet" pack . --key "$work/key.pem" --name app --version 2.0 --sequence 2 --out "$work/job/pkg/r2.zip" >/dev/null)
# Issue 52: the IMA releases, the fs-verity releases (--verity) and the certificate for _ima.
for release in 1 2; do
  (cd "$work/i$release" && "$signet" pack . --key "$work/key.pem" --name ima-app --version "$release.0" --sequence "$release" --out "$work/job/pkg/i$release.zip" >/dev/null)
  (cd "$work/v$release" && "$signet" pack . --key "$work/key.pem" --name verity-app --version "$release.0" --sequence "$release" --verity --out "$work/job/pkg/v$release.zip" >/dev/null)
  # The power-cut recording with --verity: the IMA app's files, packed with --verity.
  (cd "$work/i$release" && "$signet" pack . --key "$work/key.pem" --name app --version "$release.0" --sequence "$release" --verity --out "$work/job/pkg/w$release.zip" >/dev/null)
done
"$signet" key show "$work/key.pem" --ima-cert "$work/job/pkg/ima.der" > /dev/null
# Issue 39: release 3 (release 1 and one more file) fails its health check in the guest;
# release 4 (release 2's files, sequence 4) is installed pending and confirmed.
rm -rf "$work/r3" && cp -a "$work/r1" "$work/r3" && echo "release 3" > "$work/r3/release3.txt"
(cd "$work/r3" && "$signet" pack . --key "$work/key.pem" --name app --version 3.0 --sequence 3 --out "$work/job/pkg/r3.zip" >/dev/null)
(cd "$work/r2" && "$signet" pack . --key "$work/key.pem" --name app --version 4.0 --sequence 4 --out "$work/job/pkg/r4.zip" >/dev/null)
# Release 5 (release 2 and one more file) is installed pending and rolled back by the boot
# check; the replay's next update is release 6 (release 2's files, sequence 6).
rm -rf "$work/r5" && cp -a "$work/r2" "$work/r5" && echo "release 5" > "$work/r5/release5.txt"
(cd "$work/r5" && "$signet" pack . --key "$work/key.pem" --name app --version 5.0 --sequence 5 --out "$work/job/pkg/r5.zip" >/dev/null)
(cd "$work/r2" && "$signet" pack . --key "$work/key.pem" --name app --version 6.0 --sequence 6 --out "$work/job/pkg/r6.zip" >/dev/null)
# The TUF repository: state a lists release 1, state b (the same repository, later) release 2.
repo_dir=$work/tuf-repo/app
mkdir -p "$work/tuf-repo"
"$signet" repo init "$repo_dir" --root-key "$work/job/pkg/pub.der" --targets-key "$work/job/pkg/pub.der" \
  --snapshot-key "$work/job/pkg/pub.der" --timestamp-key "$work/job/pkg/pub.der" >/dev/null
"$signet" repo sign "$repo_dir" --role root --key "$work/key.pem" --digest "$("$signet" repo status "$repo_dir" --staged-digest root)" >/dev/null
cp "$repo_dir/metadata/1.root.json" "$work/job/tuf/root.json"
for state in a b; do
  release=$([ $state = a ] && echo r1 || echo r2)
  "$signet" repo add "$repo_dir" "$work/job/pkg/$release.zip" --channel stable >/dev/null
  "$signet" repo sign "$repo_dir" --role targets --key "$work/key.pem" --digest "$("$signet" repo status "$repo_dir" --staged-digest targets)" >/dev/null
  "$signet" repo refresh "$repo_dir" --snapshot-key "$work/key.pem" --timestamp-key "$work/key.pem" >/dev/null
  mkdir -p "$work/job/tuf/$state"
  cp -a "$repo_dir" "$work/job/tuf/$state/app"
  rm -rf "$work/job/tuf/$state/app/staging"
done
# TLS: a root CA and a leaf for 127.0.0.1, as the guest's nginx presents it.
tls=$work/job/tls
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/root.key" -out "$tls/root.pem" -days 30 -subj "/CN=Signet VM test root" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$tls/leaf.key" -out "$work/leaf.csr" -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' > "$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$tls/root.pem" -CAkey "$work/root.key" -CAcreateserial -days 30 -extfile "$work/leaf.ext" -out "$tls/chain.pem" 2>/dev/null

phase "disks"
truncate -s 512M "$work/job.img"
mkfs.ext4 -q -L signetjob -d "$work/job" "$work/job.img"
disks=()
# Issue 52: the IMA filesystem and the fs-verity filesystem.
truncate -s 256M "$work/ima-data.img"
truncate -s 1536M "$work/vt-data.img"
disks+=(-drive "file=$work/ima-data.img,format=raw,if=none,id=ima-data,cache=unsafe" -device "virtio-blk-pci,drive=ima-data,serial=ima-data")
disks+=(-drive "file=$work/vt-data.img,format=raw,if=none,id=vt-data,cache=unsafe" -device "virtio-blk-pci,drive=vt-data,serial=vt-data")
for tag in ext4 xfs ext4b xfsb ext4v; do
  truncate -s 512M "$work/$tag-data.img"
  truncate -s 2G "$work/$tag-log.img"
  disks+=(-drive "file=$work/$tag-data.img,format=raw,if=none,id=$tag-data,cache=unsafe" -device "virtio-blk-pci,drive=$tag-data,serial=$tag-data")
  disks+=(-drive "file=$work/$tag-log.img,format=raw,if=none,id=$tag-log,cache=unsafe" -device "virtio-blk-pci,drive=$tag-log,serial=$tag-log")
done

phase "boot (qemu-system-x86_64 -accel tcg, no network device; console: $work/console.log)"
set +e
timeout "${SIGNET_VM_TIMEOUT:-3000}" qemu-system-x86_64 -accel tcg -m 2048 -smp 2 -nic none \
  -display none -monitor none -no-reboot -serial "file:$work/console.log" \
  -kernel "$vm/image/vmlinuz" -initrd "$vm/image/initrd.img" \
  -append "root=LABEL=signetroot rw console=ttyS0,115200 mitigations=off" \
  -drive "file=$vm/image/rootfs.img,format=raw,if=virtio,snapshot=on" \
  -drive "file=$work/job.img,format=raw,if=none,id=job,cache=unsafe" -device virtio-blk-pci,drive=job,serial=job \
  "${disks[@]}" -device virtio-rng-pci
qemu_status=$?
set -e
grep -a '^== guest\|result \|^guest:\|signet-vm-job' "$work/console.log" >&2 || true
[ $qemu_status -eq 0 ] || echo "run.sh: qemu exit $qemu_status (124: the guest did not power off within ${SIGNET_VM_TIMEOUT:-3000} s)" >&2

phase "the guest's results"
mkdir -p "$work/out" "$work/jobmnt"
mount -o loop,ro "$work/job.img" "$work/jobmnt"
cp -a "$work/jobmnt/out/." "$work/out/" || true
umount "$work/jobmnt"

phase "replay the logs"
set +e
python3 scripts/vm/replay.py --work "$work" --signet "$signet" --report "$report" --qemu-status "$qemu_status" \
  --elapsed-before "$(( $(date +%s) - began ))"
status=$?
set -e
phase "done: exit $status, report $report"
exit $status
