#!/bin/bash
# The guest half of scripts/vm/run.sh (issue 38), run at boot by signet-vm-job from the job
# disk. Everything it needs is on that disk (/job): the signet .deb, the packages, a TUF
# repository in two states, the TLS files. The machine has no network device: nginx serves
# all of it on the guest's own loopback.
#
# 1. Power cuts: for each of ext4 and XFS (and once more with the test-only broken build),
#    DIR's filesystem sits on a dm-log-writes device whose log the host replays: mkfs, mount,
#    mark "empty", install release 1 into the empty DIR, mark "r1", update to release 2
#    (ranged: unchanged files come from DIR, shared or reflinked), mark "r2", roll back to
#    release 1, mark "rb", update to release 3 whose health check fails (release 1 swapped
#    back), mark "hc", install release 4 pending, mark "pd", confirm it, mark "cf", install
#    release 5 pending, mark "p5", roll it back by the boot check, mark "bc", unmount.
#    Once more on ext4 with the verity feature and unpack --verity (issue 52; kernel.sh's
#    record_verity): install, update, rollback.
# 2. systemd: the shipped timer starts the shipped service, which installs from nginx through
#    its sandbox; again for release 2 (reusing unchanged files), again "up to date"; a stuck
#    server is stopped by TimeoutStartSec=; systemd-analyze security scores the unit.
# 3. The kernel (issue 52, scripts/vm/guest/kernel.sh): IMA appraisal of the signatures
#    unpack --ima writes, and fs-verity files.
# Results: /job/out/results.env (key=value lines), journal and analyzer output beside it.
set -uo pipefail
J=/job
OUT=$J/out
: > "$OUT/results.env"
say() { echo "== guest $(cut -d' ' -f1 /proc/uptime)s: $*"; }
result() { echo "$1=$2" >> "$OUT/results.env"; echo "   result $1=$2"; }

say "install the signet .deb"
dpkg -i "$J/signet.deb" || { echo "guest: dpkg -i failed"; exit 1; }
signet --version
modprobe dm-log-writes || { echo "guest: no dm-log-writes module"; exit 1; }

say "nginx on 127.0.0.1:443 (TLS, the test PKI)"
mkdir -p /srv/www
ln -sfn "$J/pkg" /srv/www/pkg
ln -sfn "$J/tuf/a/app" /srv/www/app
cat > /etc/nginx/sites-enabled/default <<EOF
server {
    listen 127.0.0.1:443 ssl;
    server_name localhost;
    ssl_certificate $J/tls/chain.pem;
    ssl_certificate_key $J/tls/leaf.key;
    root /srv/www;
}
EOF
systemctl start nginx || { journalctl -u nginx --no-pager | tail -20; exit 1; }

TLS=(--tls-ca "$J/tls/root.pem")
TRUST=(--pubkey "$J/pkg/pub.der")

# Issue 52: IMA appraisal and fs-verity (scripts/vm/guest/kernel.sh). SIGNET_VM_ONLY=kernel on
# the host runs only that phase (a quicker loop while working on it).
source "$J/kernel.sh"
record_kernel() {
  if record_verity; then result recorded_ext4v true; else result recorded_ext4v false; fi
}
if [ -f "$J/only-kernel" ]; then
  record_kernel
  kernel_checks
  say "done (only the kernel phase)"
  exit 0
fi

# One power-cut recording: FS (ext4|xfs), TAG (the disks' serial prefix), BROKEN (yes|no).
record() {
  local fs=$1 tag=$2 broken=$3
  local data=/dev/disk/by-id/virtio-$tag-data log=/dev/disk/by-id/virtio-$tag-log name=lw-$tag
  local mnt=/run/signet-vm/$fs env=()
  [ "$broken" = yes ] && env=(SIGNET_TEST_BREAK_DURABILITY=skip-syncfs)
  say "power-cut recording: $tag ($fs, broken build: $broken)"
  dmsetup create "$name" --table "0 $(blockdev --getsz "$data") log-writes $data $log" || return 1
  case $fs in
    ext4) mkfs.ext4 -q "/dev/mapper/$name" ;;
    xfs) mkfs.xfs -q -f "/dev/mapper/$name" ;;
  esac || return 1
  mkdir -p "$mnt" && mount "/dev/mapper/$name" "$mnt" || return 1
  # The filesystem as made and mounted is durable before the mark: the cuts are of installs and
  # updates, not of mkfs (after the mark, replay.py takes this point as the start).
  sync -f "$mnt" && blockdev --flushbufs "/dev/mapper/$name" || return 1
  dmsetup message "$name" 0 mark empty
  env "${env[@]}" signet unpack https://127.0.0.1/pkg/r1.zip --dest "$mnt/app" "${TRUST[@]}" "${TLS[@]}" --state "$mnt/state.json" || return 1
  dmsetup message "$name" 0 mark r1
  env "${env[@]}" signet unpack https://127.0.0.1/pkg/r2.zip --dest "$mnt/app" "${TRUST[@]}" "${TLS[@]}" --state "$mnt/state.json" || return 1
  dmsetup message "$name" 0 mark r2
  # Issue 39: the owner rolls back to release 1 (the previous release kept beside DIR); then
  # release 3 fails its health check and release 1 is swapped back (exit 1).
  env "${env[@]}" signet rollback "$mnt/app" --state "$mnt/state.json" || return 1
  dmsetup message "$name" 0 mark rb
  env "${env[@]}" signet unpack https://127.0.0.1/pkg/r3.zip --dest "$mnt/app" "${TRUST[@]}" "${TLS[@]}" --state "$mnt/state.json" \
    --health-check false; [ $? -eq 1 ] || return 1
  dmsetup message "$name" 0 mark hc
  # A pending release confirmed; then another pending one that the boot check rolls back once
  # the machine "restarted" (the record's boot id made an earlier boot's: the guest cannot
  # reboot mid-recording).
  env "${env[@]}" signet unpack https://127.0.0.1/pkg/r4.zip --dest "$mnt/app" "${TRUST[@]}" "${TLS[@]}" --state "$mnt/state.json" --pending || return 1
  dmsetup message "$name" 0 mark pd
  env "${env[@]}" signet confirm "$mnt/app" || return 1
  dmsetup message "$name" 0 mark cf
  env "${env[@]}" signet unpack https://127.0.0.1/pkg/r5.zip --dest "$mnt/app" "${TRUST[@]}" "${TLS[@]}" --state "$mnt/state.json" --pending || return 1
  dmsetup message "$name" 0 mark p5
  # Replaced durably, as Signet writes it (fsync, rename, fsync of the folder): `sed -i` alone
  # renames an unsynced file, which a power cut on XFS leaves empty (the harness's own write,
  # not Signet's, found by the replay).
  sed 's/"boot_id" : "[^"]*"/"boot_id" : "an-earlier-boot"/' "$mnt/.app.signet-release" > "$mnt/.boot-id.tmp" || return 1
  sync "$mnt/.boot-id.tmp" && mv "$mnt/.boot-id.tmp" "$mnt/.app.signet-release" && sync "$mnt" || return 1
  env "${env[@]}" signet rollback --boot-check "$mnt/app" --state "$mnt/state.json" || return 1
  dmsetup message "$name" 0 mark bc
  umount "$mnt" && dmsetup remove "$name" || return 1
  dmsetup status 2>/dev/null | grep -q logging_disabled && { echo "guest: the log device ran out of space"; return 1; }
  return 0
}
for spec in ext4:ext4:no xfs:xfs:no ext4:ext4b:yes xfs:xfsb:yes; do
  IFS=: read -r fs tag broken <<<"$spec"
  if record "$fs" "$tag" "$broken"; then result "recorded_$tag" true; else result "recorded_$tag" false; fi
done
record_kernel

kernel_checks

say "systemd: the shipped timer and service, configured as README says"
mkdir -p /etc/app /etc/signet/update.d /var/lib/signet
cp "$J/tuf/root.json" /etc/app/root.json
cp "$J/tls/root.pem" /etc/app/tls-roots.pem
signet tuf init --metadata-dir /var/lib/signet/tuf/app /etc/app/root.json
cat > /etc/signet/update.d/app.conf <<'CONF'
repository = "https://127.0.0.1/app/metadata/"
tuf-metadata = "/var/lib/signet/tuf/app"
channel = "stable"
dest = "/opt/app"
tls-ca = ["/etc/app/tls-roots.pem"]
state = "/var/lib/signet/app-state.json"
CONF
# What `systemctl edit signet-update@app.service` writes for [Service] ReadWritePaths=/opt.
mkdir -p /etc/systemd/system/signet-update@app.service.d
printf '[Service]\nReadWritePaths=/opt\n' > /etc/systemd/system/signet-update@app.service.d/override.conf
# The test does not wait for the hour: the timer also elapses 5 s after it starts, unspread.
mkdir -p /etc/systemd/system/signet-update@app.timer.d
printf '[Timer]\nOnActiveSec=5s\nRandomizedDelaySec=0\n' > /etc/systemd/system/signet-update@app.timer.d/test.conf
systemctl daemon-reload
systemctl enable --now signet-update@app.timer
systemctl list-timers --all --no-pager signet-update@app.timer | tee "$OUT/timers.txt"
result timer_next_elapse "$(systemctl show -P NextElapseUSecMonotonic signet-update@app.timer | tr ' ' _)"
finished() { [ "$(systemctl show -P ExecMainExitTimestampMonotonic signet-update@app.service)" != 0 ]; }
for _ in $(seq 1 240); do finished && break; sleep 0.5; done
result timer_triggered "$(finished && echo true || echo false)"
result timer_service_result "$(systemctl show -P Result signet-update@app.service)"
installed_sequence() { signet reverify "$1" "${TRUST[@]}" --expect-name app --json 2>/dev/null | grep -o '"sequence" *: *[0-9]*' | head -n 1 | grep -o '[0-9]*$'; }
result timer_installed_sequence "$(installed_sequence /opt/app)"

say "release 2 published: the service again (ranged, under its sandbox), then up to date"
ln -sfn "$J/tuf/b/app" /srv/www/app
systemctl start signet-update@app.service; result second_run_status $?
result second_installed_sequence "$(installed_sequence /opt/app)"
systemctl start signet-update@app.service; result third_run_status $?
journalctl -u signet-update@app.service -o cat --no-pager > "$OUT/journal-app.txt"
result journal_lines "$(grep -c . "$OUT/journal-app.txt")"
# The second run's line (the first run installed into an empty DIR and reused nothing).
result journal_reused "$(grep -o 'reused [0-9,]* from the installed tree' "$OUT/journal-app.txt" | sed -n 2p | grep -o '[0-9,]*' | tr -d ,)"
result journal_priority_noise "$(grep -c 'Failed to set thread priority' "$OUT/journal-app.txt")"
result journal_up_to_date "$(grep -c '^up to date' "$OUT/journal-app.txt")"

say "the boot check (issue 39): a pending release not confirmed before a restart is rolled back by signet-boot-check@app.service"
# What `systemctl edit signet-boot-check@app.service` writes: the previous release is swapped
# back beside DIR, so DIR's parent must be writable in its sandbox too.
mkdir -p /etc/systemd/system/signet-boot-check@app.service.d
printf '[Service]\nReadWritePaths=/opt\n' > /etc/systemd/system/signet-boot-check@app.service.d/override.conf
systemctl daemon-reload
systemctl enable signet-boot-check@app.service; result boot_check_enabled $?
signet unpack "$J/pkg/r3.zip" --dest /opt/app "${TRUST[@]}" --state /var/lib/signet/app-state.json --pending > /dev/null
result pending_install_status $?
# In the boot the release was installed in: nothing to roll back.
systemctl start signet-boot-check@app.service
result boot_check_same_boot_sequence "$(installed_sequence /opt/app)"
# The next boot (the guest cannot restart mid-job): the record's boot id is an earlier boot's.
sed -i 's/"boot_id" : "[^"]*"/"boot_id" : "an-earlier-boot"/' /opt/.app.signet-release
systemctl restart signet-boot-check@app.service
result boot_check_result "$(systemctl show -P Result signet-boot-check@app.service)"
result boot_check_rolled_back_to "$(installed_sequence /opt/app)"
result boot_check_state_ok "$(signet reverify /opt/app "${TRUST[@]}" --state /var/lib/signet/app-state.json > /dev/null && echo true || echo false)"
journalctl -u signet-boot-check@app.service -o cat --no-pager > "$OUT/journal-boot-check.txt"
result boot_check_priority_noise "$(grep -c 'Failed to set thread priority' "$OUT/journal-boot-check.txt")"
systemd-analyze security --no-pager signet-boot-check@app.service > "$OUT/security-boot-check.txt" 2>&1
result boot_check_exposure "$(grep -o 'Overall exposure level for signet-boot-check@app.service: [0-9.]*' "$OUT/security-boot-check.txt" | grep -o '[0-9.]*$')"

say "a server that never answers: TimeoutStartSec= stops the service, DIR stays as it was"
signet unpack "$J/pkg/r1.zip" --dest /opt/stuck "${TRUST[@]}" > /dev/null
signet tuf init --metadata-dir /var/lib/signet/tuf/stuck /etc/app/root.json
sed -e 's|https://127.0.0.1/app/metadata/|https://127.0.0.1:8443/app/metadata/|' -e 's|/tuf/app|/tuf/stuck|' \
    -e 's|/opt/app|/opt/stuck|' -e 's|app-state|stuck-state|' /etc/signet/update.d/app.conf > /etc/signet/update.d/stuck.conf
mkdir -p /etc/systemd/system/signet-update@stuck.service.d
printf '[Service]\nReadWritePaths=/opt\nTimeoutStartSec=20s\n' > /etc/systemd/system/signet-update@stuck.service.d/override.conf
systemctl daemon-reload
nc -lk 127.0.0.1 8443 > /dev/null &
silent=$!
tree_digest() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1); }
before=$(tree_digest /opt/stuck)
started=$(date +%s)
systemctl start signet-update@stuck.service
result stuck_seconds "$(( $(date +%s) - started ))"
result stuck_result "$(systemctl show -P Result signet-update@stuck.service)"
after=$(tree_digest /opt/stuck)
result stuck_unchanged "$([ "$before" = "$after" ] && signet reverify /opt/stuck "${TRUST[@]}" > /dev/null && echo true || echo false)"
kill "$silent"
journalctl -u signet-update@stuck.service -o cat --no-pager > "$OUT/journal-stuck.txt"
result stuck_priority_noise "$(grep -c 'Failed to set thread priority' "$OUT/journal-stuck.txt")"

say "the varlink service: signet-serve@app.socket starts it on demand; Status for the group, the rest for root"
mkdir -p /etc/systemd/system/signet-serve@app.service.d
printf '[Service]\nReadWritePaths=/opt\n' > /etc/systemd/system/signet-serve@app.service.d/override.conf
systemctl daemon-reload
systemctl enable --now signet-serve@app.socket; result serve_socket_enabled $?
result serve_socket_file "$(stat -c '%a:%U:%G' /run/signet/app.varlink 2>&1)"
result serve_idle_before "$(systemctl is-active signet-serve@app.service)"
# A varlink call is a JSON object ended by a NUL byte; netcat-openbsd is the client here.
call() { printf '{"method":"io.signet.Update.%s","parameters":{}}\0' "$1" | timeout 60 nc -N -U /run/signet/app.varlink | tr '\0' '\n'; }
signet_gid=$(getent group signet | cut -d: -f3)
as_group() { setpriv --reuid=65534 --regid="$signet_gid" --clear-groups bash -c "$(declare -f call); call $1"; }
as_group Status > "$OUT/serve-status-group.json"
result serve_status_group "$(grep -c '"destination":"/opt/app"' "$OUT/serve-status-group.json")"
as_group Install > "$OUT/serve-install-group.json"
result serve_install_group_denied "$(grep -c 'org.varlink.service.PermissionDenied' "$OUT/serve-install-group.json")"
call Check > "$OUT/serve-check-root.json"
result serve_check_root "$(grep -c '"updateAvailable"' "$OUT/serve-check-root.json")"
result serve_active_after "$(systemctl is-active signet-serve@app.service)"
systemctl stop signet-serve@app.service signet-serve@app.socket
journalctl -u signet-serve@app.service -o cat --no-pager > "$OUT/journal-serve.txt"

say "systemd-analyze security"
systemd-analyze security --no-pager signet-update@app.service > "$OUT/security.txt" 2>&1
result exposure "$(grep -o 'Overall exposure level for signet-update@app.service: [0-9.]*' "$OUT/security.txt" | grep -o '[0-9.]*$')"
say "done"
