#!/usr/bin/env bash
# Builds the test machine's root filesystem (issue 38): Debian 12 from Debian's packages, with
# systemd, the cloud kernel and its initramfs, nginx, XFS and device-mapper tools, and the
# libraries the signet .deb depends on. The .deb itself is installed at each boot from the job
# disk (scripts/vm/run.sh), so a change to Signet does not rebuild the image.
#
#   scripts/vm/build-image.sh DIR      writes DIR/rootfs.img, DIR/vmlinuz, DIR/initrd.img
#
# Reused when DIR/image.key equals this script's hash (the package list and every setting are
# in it); built from scratch otherwise. Needs root, mmdebstrap and e2fsprogs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-image.sh DIR}
mkdir -p "$out"
key=$(cat "$here/build-image.sh" "$here/guest/signet-vm-job" "$here/guest/signet-vm-job.service" | sha256sum | cut -d" " -f1)
if [ -f "$out/image.key" ] && [ "$(cat "$out/image.key")" = "$key" ] && [ -f "$out/rootfs.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  echo "build-image: reusing $out/rootfs.img (inputs unchanged)" >&2
  exit 0
fi
rm -f "$out/image.key" "$out/rootfs.img" "$out/vmlinuz" "$out/initrd.img"

packages=(
  systemd systemd-sysv udev dbus kmod procps
  linux-image-cloud-amd64 initramfs-tools
  nginx-light openssl ca-certificates
  e2fsprogs xfsprogs dmsetup util-linux attr netcat-openbsd
  # Issue 52: keyctl loads the IMA certificate into the _ima keyring.
  keyutils
  # What the signet .deb depends on (dpkg -i at boot has no network).
  libssl3 libzip4 libcurl4 libxml2
)
include=$(IFS=,; echo "${packages[*]}")

root=$(mktemp -d "$out/root.XXXXXX")
trap 'rm -rf "$root"' EXIT
echo "build-image: mmdebstrap bookworm (${#packages[@]} packages)" >&2
# The guest has no network device: nothing in it may wait for one.
mmdebstrap --variant=minbase --include="$include" \
  --customize-hook='echo signet-vm > "$1/etc/hostname"' \
  --customize-hook='echo "LABEL=signetroot / ext4 rw,errors=remount-ro 0 1" > "$1/etc/fstab"' \
  --customize-hook='chroot "$1" systemctl disable nginx.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer 2>/dev/null || true' \
  --customize-hook='chroot "$1" systemctl mask getty@tty1.service serial-getty@ttyS0.service systemd-timesyncd.service 2>/dev/null || true' \
  --customize-hook="copy-in $here/guest/signet-vm-job $here/guest/signet-vm-job.service /tmp" \
  --customize-hook='install -m 0755 "$1/tmp/signet-vm-job" "$1/usr/local/sbin/signet-vm-job"' \
  --customize-hook='install -m 0644 "$1/tmp/signet-vm-job.service" "$1/etc/systemd/system/signet-vm-job.service"' \
  --customize-hook='chroot "$1" systemctl enable signet-vm-job.service' \
  --customize-hook='rm -f "$1/tmp/signet-vm-job" "$1/tmp/signet-vm-job.service"' \
  bookworm "$root" http://deb.debian.org/debian >&2

cp "$(ls "$root"/boot/vmlinuz-* | head -n 1)" "$out/vmlinuz"
cp "$(ls "$root"/boot/initrd.img-* | head -n 1)" "$out/initrd.img"
# The root filesystem: ext4, 3 GiB sparse, made from the folder (mkfs.ext4 -d keeps owners,
# modes and attributes).
truncate -s 3G "$out/rootfs.img.tmp"
mkfs.ext4 -q -L signetroot -d "$root" "$out/rootfs.img.tmp"
mv "$out/rootfs.img.tmp" "$out/rootfs.img"
echo "$key" > "$out/image.key"
echo "build-image: $out/rootfs.img ready" >&2
