#!/bin/bash
# Issue 52 in the guest (sourced by guest.sh, which defines J, OUT, say, result and TRUST): the
# kernel keeps Signet's promise on every read.
#
# IMA: release 1 of a small app (a program, bin/hello, and 300 data files) installed with
# --ima security on its own ext4 filesystem; the certificate `signet key show --ima-cert` made
# loaded into the _ima keyring and README's policy (appraise what runs, and what users other
# than root open, on that filesystem only, by signature) loaded by README's own block, as
# written (run.sh copies it out of README.md). Then: every file opens and the
# program runs as another user; an update and a rollback under enforcement keep it so; a file
# changed offline, a file whose attribute was removed offline and a program changed offline
# are refused by the kernel; --repair puts them right under enforcement.
#
# fs-verity: a 10,000-file release (packed with --verity) installed with --verity on ext4 with
# the verity feature; the files are fs-verity files (lsattr's V); reverify (which measures them)
# against sha256sum of the same files, caches dropped before each; a block changed on the device
# under a file reads as EIO, reverify --read-all and status name the file, unpack --repair
# replaces it; an update shares the unchanged files and a rollback brings release 1 back.

# Runs "$@" as nobody, without supplementary groups.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
# The files of a release (not Signet's own records under .signet/), NUL-separated.
resources() { (cd "$1" && find . -type f ! -path './.signet/*' -print0); }
# How many of DIR's files nobody cannot read (0: every one opens): one cat as nobody reads
# them all, and names on standard error each file it cannot open or read.
unreadable_by_nobody() {
  resources "$1" | (cd "$1" && as_nobody xargs -0 -r cat 2>&1 > /dev/null) | grep -c '^cat: '
}
# How many of DIR's files are fs-verity files (lsattr's V flag).
verity_count() {
  resources "$1" | (cd "$1" && xargs -0 -r lsattr 2>/dev/null) | awk '$1 ~ /V/ { n++ } END { print n + 0 }'
}
# The first data block of FILE (a path inside the filesystem on DEVICE) on DEVICE, in 4 KiB blocks,
# read by debugfs from an unmounted filesystem.
first_block() { debugfs -R "bmap $2 0" "$1" 2>/dev/null | tail -n 1; }
# The same for a file of a mounted filesystem (FIEMAP, which sees what is still in the journal).
first_block_mounted() { filefrag -v -b4096 "$1" | awk '$1 == "0:" { sub(/\.\./, "", $4); print $4; exit }'; }
# Replaces 4 KiB block BLOCK of DEVICE with BYTES (padded with zeros), below the page cache.
write_block() {
  local device=$1 block=$2 bytes=$3
  { printf '%s' "$bytes"; head -c $((4096 - ${#bytes})) /dev/zero; } | dd of="$device" bs=4096 seek="$block" count=1 conv=notrunc oflag=direct status=none
}

ima_phase() {
  # README's layout: DIR is /opt/app, and /opt its own filesystem (unmounted at the end, so that
  # the systemd phase after this one has the root filesystem's /opt again).
  local dev=/dev/disk/by-id/virtio-ima-data mnt=/opt
  say "IMA: release 1 installed with --ima security, on its own filesystem"
  mkfs.ext4 -q -b 4096 -L signetima "$dev" || return 1
  mkdir -p "$mnt" && mount "$dev" "$mnt" || return 1
  local app=$mnt/app state=/var/lib/signet/ima-state.json
  mkdir -p /var/lib/signet /etc/signet
  signet unpack "$J/pkg/i1.zip" --dest "$app" "${TRUST[@]}" --ima security --state "$state" > /dev/null || return 1

  say "IMA: README's boot block, as written (the certificate into _ima, the policy)"
  cp "$J/pkg/ima.der" /etc/signet/ima-signet.der
  bash -ex "$J/readme-ima-boot.sh" > "$OUT/ima-boot.txt" 2>&1; result ima_boot_block_status $?
  sed 's/^/   ima-boot: /' "$OUT/ima-boot.txt"
  # /proc/keys: "… asymmetri signet: X509.rsa <key id> []".
  result ima_key_loaded "$(grep -c ' signet: X509' /proc/keys)"
  result ima_policy_lines "$(grep -c '^appraise' /sys/kernel/security/ima/policy 2>/dev/null || echo unreadable)"
  result ima_root_runs "$("$app/bin/hello" 2>&1)"

  say "IMA: every file opens, and the program runs, as another user"
  result ima_unreadable_r1 "$(unreadable_by_nobody "$app")"
  result ima_nobody_runs_r1 "$(as_nobody "$app/bin/hello" 2>&1)"

  say "IMA: an update and a rollback under enforcement"
  signet unpack "$J/pkg/i2.zip" --dest "$app" "${TRUST[@]}" --ima security --state "$state" > "$OUT/ima-update.txt" 2>&1; result ima_update_status $?
  result ima_unreadable_r2 "$(unreadable_by_nobody "$app")"
  result ima_nobody_runs_r2 "$(as_nobody "$app/bin/hello" 2>&1)"
  signet rollback "$app" --state "$state" > "$OUT/ima-rollback.txt" 2>&1; result ima_rollback_status $?
  result ima_unreadable_rb "$(unreadable_by_nobody "$app")"
  result ima_nobody_runs_rb "$(as_nobody "$app/bin/hello" 2>&1)"

  say "IMA: files changed offline (content, attribute removed) and a program changed offline"
  local changed=d01/f0001.dat stripped=d02/f0002.dat intact=d03/f0003.dat
  local changed_block hello_block
  umount "$mnt" || return 1
  changed_block=$(first_block "$dev" "/app/$changed")
  hello_block=$(first_block "$dev" /app/bin/hello)
  [ "${changed_block:-0}" -gt 0 ] && [ "${hello_block:-0}" -gt 0 ] || { mount "$dev" "$mnt"; return 1; }
  write_block "$dev" "$changed_block" "changed offline"
  write_block "$dev" "$hello_block" "#!/bin/sh
echo changed offline"
  debugfs -w -R "ea_rm /app/$stripped security.ima" "$dev" 2> /dev/null
  mount "$dev" "$mnt" || return 1
  as_nobody cat "$app/$changed" > /dev/null 2> "$OUT/ima-changed.txt"; result ima_changed_status $?
  as_nobody cat "$app/$stripped" > /dev/null 2> "$OUT/ima-stripped.txt"; result ima_stripped_status $?
  as_nobody cat "$app/$intact" > /dev/null 2>&1; result ima_intact_status $?
  "$app/bin/hello" > "$OUT/ima-exec.txt" 2>&1; result ima_exec_status $?
  result ima_exec_output "$(head -c 200 "$OUT/ima-exec.txt" | tr '\n' ' ')"
  dmesg | grep -i 'ima\|integrity' | tail -n 20 > "$OUT/ima-dmesg.txt"

  say "IMA: --repair under enforcement"
  signet unpack "$J/pkg/i1.zip" --dest "$app" "${TRUST[@]}" --ima security --state "$state" --repair > "$OUT/ima-repair.txt" 2>&1; result ima_repair_status $?
  result ima_unreadable_repaired "$(unreadable_by_nobody "$app")"
  result ima_nobody_runs_repaired "$(as_nobody "$app/bin/hello" 2>&1)"
  umount "$mnt"
  return 0
}

verity_phase() {
  local dev=/dev/disk/by-id/virtio-vt-data mnt=/srv/vt
  say "fs-verity: a 10,000-file release installed with --verity"
  mkfs.ext4 -q -b 4096 -O verity -L signetvt "$dev" || return 1
  mkdir -p "$mnt" && mount "$dev" "$mnt" || return 1
  local app=$mnt/app started ended
  started=$(date +%s.%N)
  signet unpack "$J/pkg/v1.zip" --dest "$app" "${TRUST[@]}" --verity --json > "$OUT/verity-unpack.json" 2> "$OUT/verity-unpack.err"; result verity_unpack_status $?
  ended=$(date +%s.%N)
  result verity_unpack_seconds "$(awk "BEGIN { print $ended - $started }")"
  result verity_enabled_reported "$(grep -o '"enabled" *: *[0-9]*' "$OUT/verity-unpack.json" | grep -o '[0-9]*$')"
  result verity_files "$(verity_count "$app")"
  result verity_resources "$(resources "$app" | tr -cd '\0' | wc -c)"

  say "fs-verity: reverify against sha256sum, caches dropped before each"
  local reverify_seconds sha_seconds
  sync; echo 3 > /proc/sys/vm/drop_caches
  started=$(date +%s.%N)
  signet reverify "$app" "${TRUST[@]}" --json > "$OUT/verity-reverify.json" 2>&1; result verity_reverify_status $?
  ended=$(date +%s.%N)
  reverify_seconds=$(awk "BEGIN { print $ended - $started }")
  sync; echo 3 > /proc/sys/vm/drop_caches
  started=$(date +%s.%N)
  (cd "$app" && find . -type f ! -path './.signet/*' -print0 | xargs -0 sha256sum > /dev/null)
  ended=$(date +%s.%N)
  sha_seconds=$(awk "BEGIN { print $ended - $started }")
  result reverify_verity_seconds "$reverify_seconds"
  result sha256sum_seconds "$sha_seconds"
  result reverify_verity_ratio "$(awk "BEGIN { printf \"%.4f\", $reverify_seconds / $sha_seconds }")"
  # How many files it measured instead of reading (their detail says so).
  result reverify_verity_measured "$(grep -c 'measured by the kernel' "$OUT/verity-reverify.json")"

  say "fs-verity: a block changed on the device under a file"
  local victim=d77/f0777.dat block
  sync
  block=$(first_block_mounted "$app/$victim")
  result verity_victim_block "$block"
  [ -n "$block" ] && [ "$block" -gt 0 ] || return 1
  write_block "$dev" "$block" "changed under the file"
  echo 3 > /proc/sys/vm/drop_caches
  cat "$app/$victim" > /dev/null 2> "$OUT/verity-read.txt"; result verity_read_status $?
  result verity_read_eio "$(grep -c 'Input/output error' "$OUT/verity-read.txt")"
  # Read whole: the victim's folder (--only keeps the step short; the whole tree reads the same).
  signet reverify "$app" "${TRUST[@]}" --read-all --only "${victim%/*}" --json > "$OUT/verity-read-all.json" 2>&1; result verity_read_all_status $?
  result verity_read_all_names "$(grep -c "\"$victim\"" "$OUT/verity-read-all.json")"
  signet status "$app/$victim" "${TRUST[@]}" > "$OUT/verity-status.txt" 2>&1; result verity_status_status $?
  result verity_status_names "$(grep -c "$victim" "$OUT/verity-status.txt")"
  signet unpack "$J/pkg/v1.zip" --dest "$app" "${TRUST[@]}" --verity --repair --json > "$OUT/verity-repair.json" 2>&1; result verity_repair_status $?
  result verity_repair_names "$(grep -c "$victim" "$OUT/verity-repair.json")"
  echo 3 > /proc/sys/vm/drop_caches
  cat "$app/$victim" > /dev/null && signet reverify "$app" "${TRUST[@]}" --summary > "$OUT/verity-repaired.txt" 2>&1
  result verity_repaired_status $?
  result verity_repair_copied "$(grep -o '"files_copied" *: *[0-9]*' "$OUT/verity-repair.json" | grep -o '[0-9]*$')"

  say "fs-verity: an update shares unchanged files, a rollback brings release 1 back"
  signet unpack "$J/pkg/v2.zip" --dest "$app" "${TRUST[@]}" --verity --json > "$OUT/verity-update.json" 2>&1; result verity_update_status $?
  result verity_update_shared "$(grep -o '"files_shared" *: *[0-9]*' "$OUT/verity-update.json" | grep -o '[0-9]*$')"
  result verity_update_enabled "$(grep -o '"enabled" *: *[0-9]*' "$OUT/verity-update.json" | grep -o '[0-9]*$')"
  signet reverify "$app" "${TRUST[@]}" --summary > /dev/null 2>&1; result verity_update_reverify $?
  signet rollback "$app" > "$OUT/verity-rollback.txt" 2>&1; result verity_rollback_status $?
  signet reverify "$app" "${TRUST[@]}" --expect-name verity-app --summary > "$OUT/verity-rollback-reverify.txt" 2>&1; result verity_rollback_reverify $?
  result verity_files_after_rollback "$(verity_count "$app")"
  umount "$mnt"
  return 0
}

# The power-cut recording with --verity: ext4 with the verity feature on a dm-log-writes device
# (as guest.sh's record), marks "empty", "r1" (release 1 of the 301-file app, packed with
# --verity, installed into the empty DIR), "r2" (the update to release 2: 31 files changed,
# 270 shared on their measurement), "rb" (the rollback to release 1). The host replays it
# (replay.py's VerityChecker: its kernel cannot open fs-verity files, so DIR is read by debugfs).
record_verity() {
  local data=/dev/disk/by-id/virtio-ext4v-data log=/dev/disk/by-id/virtio-ext4v-log name=lw-ext4v
  local mnt=/run/signet-vm/ext4v
  say "power-cut recording: ext4v (ext4 -O verity, unpack --verity)"
  dmsetup create "$name" --table "0 $(blockdev --getsz "$data") log-writes $data $log" || return 1
  mkfs.ext4 -q -b 4096 -O verity "/dev/mapper/$name" || return 1
  mkdir -p "$mnt" && mount "/dev/mapper/$name" "$mnt" || return 1
  sync -f "$mnt" && blockdev --flushbufs "/dev/mapper/$name" || return 1
  dmsetup message "$name" 0 mark empty
  signet unpack "$J/pkg/w1.zip" --dest "$mnt/app" "${TRUST[@]}" --verity --state "$mnt/state.json" > /dev/null || return 1
  dmsetup message "$name" 0 mark r1
  signet unpack "$J/pkg/w2.zip" --dest "$mnt/app" "${TRUST[@]}" --verity --state "$mnt/state.json" > /dev/null || return 1
  dmsetup message "$name" 0 mark r2
  signet rollback "$mnt/app" --state "$mnt/state.json" > /dev/null || return 1
  dmsetup message "$name" 0 mark rb
  result ext4v_verity_files "$(verity_count "$mnt/app")"
  umount "$mnt" && dmsetup remove "$name" || return 1
  dmsetup status 2>/dev/null | grep -q logging_disabled && { echo "guest: the log device ran out of space"; return 1; }
  return 0
}

kernel_checks() {
  ima_phase; result ima_phase_status $?
  verity_phase; result verity_phase_status $?
}
