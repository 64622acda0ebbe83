#!/usr/bin/env python3
"""The host half of scripts/vm/run.sh (issue 38): replays the guest's dm-log-writes logs.

The log format is the kernel's (drivers/md/dm-log-writes.c,
Documentation/admin-guide/device-mapper/log-writes.rst): a super block in the first sector
(magic, version, entry count, sector size), then one entry per sector-sized header (sector,
sector count, flags, data length), each write's data in the sectors after its header. Writes
are logged once a flush has made them durable, in the order the flush found them completed,
just before that flush's own entry; FUA writes are logged when they complete.

For each log, from the "empty" mark on, the device is rebuilt on this machine:
- at every flush and FUA entry (what a power cut right after it leaves);
- for each interval between two flushes, at a few random cut points with a random subset of
  the interval's unflushed writes dropped (a power cut loses unflushed writes in any order).
Each image is loop-mounted (the filesystem's journal recovery runs) and checked: DIR is
wholly one release the phase allows (empty or release 1 before the "r1" mark, release 1 or 2
before "r2"; then `signet rollback` (issue 39): release 2 or 1 before "rb"; then an update to
release 3 whose health check fails and swaps release 1 back: release 1 or 3 before "hc";
then release 4 installed pending: 1 or 4 before "pd"; confirmed:
4 before "cf"; release 5 pending: 4 or 5 before "p5"; rolled back by the boot check: 5 or 4
before "bc", 4 after), by `signet reverify`; the state file parses and records no more than
DIR holds, and `signet status DIR` reads the release record; and a next update (`signet
unpack r6.zip`, release 2's files as sequence 6) succeeds from there.
"""
import argparse
import ctypes
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time

FLUSH, FUA, DISCARD, MARK = 1, 2, 4, 8
MAGIC = 0x6A736677736872
PHASES = {"empty": ("empty", "r1"), "r1": ("r1", "r2"), "r2": ("r2", "r1"), "rb": ("r1", "r3"), "hc": ("r1", "r4"),
          "pd": ("r4",), "cf": ("r4", "r5"), "p5": ("r5", "r4"), "bc": ("r4",)}
# The log recorded with --verity (issue 52): install, update, rollback.
VERITY_PHASES = {"empty": ("empty", "r1"), "r1": ("r1", "r2"), "r2": ("r2", "r1"), "rb": ("r1",)}
SEQUENCES = {"r1": 1, "r2": 2, "r3": 3, "r4": 4, "r5": 5, "r6": 6}

libc = ctypes.CDLL(None, use_errno=True)
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2


class LogError(Exception):
    pass


class Caught(Exception):
    """A broken build's log has shown the failure it exists to show: the rest is not replayed."""


class Entry:
    __slots__ = ("index", "sector", "count", "flags", "data_offset", "mark")

    def __init__(self, index, sector, count, flags, data_offset, mark):
        self.index, self.sector, self.count, self.flags = index, sector, count, flags
        self.data_offset, self.mark = data_offset, mark


def read_log(path, device_size):
    """The entries of a log, every number checked against the log's and the device's size."""
    size = os.path.getsize(path)
    with open(path, "rb") as log:
        magic, version, count, sector_size = struct.unpack("<QQQI", log.read(28))
        if magic != MAGIC or version != 1:
            raise LogError(f"{path}: not a dm-log-writes log (magic {magic:#x}, version {version})")
        if sector_size not in (512, 1024, 2048, 4096):
            raise LogError(f"{path}: sector size {sector_size}")
        if count > size // sector_size:
            raise LogError(f"{path}: {count} entries cannot fit in {size} bytes")
        entries, offset = [], sector_size
        for index in range(count):
            if offset + sector_size > size:
                raise LogError(f"{path}: entry {index} lies past the end of the log")
            log.seek(offset)
            header = log.read(sector_size)
            sector, sectors, flags, data_len = struct.unpack("<QQQQ", header[:32])
            offset += sector_size
            mark = None
            if flags & MARK:
                if data_len > sector_size - 32:
                    raise LogError(f"{path}: entry {index}: a mark of {data_len} bytes")
                mark = header[32:32 + data_len].decode("utf-8", "replace")
                sectors = 0
            if (sector + sectors) * sector_size > device_size:
                raise LogError(f"{path}: entry {index} writes past the end of the device")
            data_offset = offset
            if not flags & (DISCARD | MARK):
                offset += sectors * sector_size
                if offset > size:
                    raise LogError(f"{path}: entry {index}'s data lies past the end of the log")
            entries.append(Entry(index, sector, sectors, flags, data_offset, mark))
        return sector_size, entries


class Replayer:
    """Applies entries to image files."""

    def __init__(self, log_path, sector_size):
        self.log = open(log_path, "rb")
        self.sector_size = sector_size

    def close(self):
        self.log.close()

    def apply(self, entry, image_fd):
        if entry.flags & MARK or entry.count == 0:
            return
        offset, length = entry.sector * self.sector_size, entry.count * self.sector_size
        if entry.flags & DISCARD:
            # Discarded sectors read as zeros here (as a loop file's punched hole does).
            if libc.fallocate(image_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              ctypes.c_long(offset), ctypes.c_long(length)) != 0:
                os.pwrite(image_fd, bytes(length), offset)
            return
        self.log.seek(entry.data_offset)
        os.pwrite(image_fd, self.log.read(length), offset)


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def copy_image(source, target):
    # Sparse copies: only the written parts of the device are copied. The target is a new inode
    # each time (--remove-destination): a loop device whose detach the kernel deferred (udev's
    # blkid still holding it open after `losetup -d`) keeps the old inode, never the new image.
    result = run(["cp", "--sparse=always", "--reflink=auto", "--remove-destination", source, target])
    if result.returncode != 0:
        raise RuntimeError(f"cp: {result.stderr}")


class Checker:
    """Mounts an image where the guest had it and checks DIR, the state file and a next update."""

    def __init__(self, fs, signet, pubkey, next_package, scratch, judge_twice=True):
        # judge_twice: a failed state is built and judged again (not for the broken builds'
        # logs, whose failures are expected and would each cost a second judgement).
        self.fs, self.signet, self.pubkey, self.next_package = fs, signet, pubkey, next_package
        self.judge_twice = judge_twice
        self.mount_point = f"/run/signet-vm/{fs}"
        self.dir = self.mount_point + "/app"
        self.state = self.mount_point + "/state.json"
        self.scratch = scratch
        os.makedirs(self.mount_point, exist_ok=True)

    def reverify(self, state):
        argv = [self.signet, "reverify", self.dir, "--pubkey", self.pubkey, "--expect-name", "app", "--json"]
        if state:
            argv += ["--state", self.state]
        result = run(argv)
        try:
            trees = json.loads(result.stdout).get("trees") or [{}]
        except ValueError:
            trees = [{}]
        tree = trees[0]
        problems = [f"{f.get('path')}: {f.get('verdict')}" for f in tree.get("files") or [] if f.get("verdict") != "ok"]
        return result.returncode, tree.get("sequence"), (tree.get("error") or {}), problems

    def check(self, image, allowed, rebuild, dropped):
        # A tree the kernel cannot read (EBADMSG: a block that fails its checksum) is a verdict,
        # not a crash of the replay. Two CI runs read EBADMSG (or judged a tree mixed) in a state
        # that, replayed again from the same logs, checked whole; the first attempt's mount had
        # already recovered the journal and the check had begun writing. So a state that fails is
        # built again from the log (`rebuild`, into a new file) and judged once more from a fresh
        # loop device and mount; it counts as good only if that second judgement finds it whole,
        # and the report counts such states ("judged_twice"). A state that fails twice is a
        # failure, with what the filesystem's own checker says of the rebuilt image.
        outcome = self.judge(image, allowed)
        if self.good(outcome, allowed) or not self.judge_twice or (dropped and outcome["tree"] == "unmountable"):
            return outcome
        first = outcome
        print(f"replay: {self.fs}: {first['tree']}: {first['detail'][:200]}; built again and judged once more", file=sys.stderr)
        again = image + ".again"
        rebuild(again)
        pristine = again + ".fsck"
        copy_image(again, pristine)
        try:
            outcome = self.judge(again, allowed)
            if self.good(outcome, allowed):
                outcome["judged_twice"] = first["tree"]
                return outcome
            outcome["detail"] += f" (first judgement: {first['tree']}: {first['detail'][:200]}) fsck: {self.fsck(pristine)}"
            return outcome
        finally:
            for path in (again, pristine):
                if os.path.exists(path):
                    os.remove(path)

    @staticmethod
    def good(outcome, allowed):
        return outcome["tree"] in allowed and outcome["state_ok"] and outcome["next_update_ok"]

    def fsck(self, image):
        """What the filesystem's own checker says of a throwaway copy of an image: e2fsck replays
        the journal itself and repairs the copy (what it had to repair is the finding); xfs_repair
        only reads (it will not touch a dirty log)."""
        argv = ["e2fsck", "-fy", image] if self.fs == "ext4" else ["xfs_repair", "-n", "-f", image]
        try:
            result = run(argv, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{argv[0]}: {error}"
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        return f"{argv[0]} exit {result.returncode}: " + " | ".join(lines[:12])

    def judge(self, image, allowed):
        try:
            return self.check_once(image, allowed)
        except OSError as error:
            return {"tree": "unreadable", "state_ok": False, "next_update_ok": False, "detail": str(error)}

    def check_once(self, image, allowed):
        outcome = {"tree": None, "state_ok": False, "next_update_ok": False, "detail": ""}
        # CI runs the sanitizer suite beside this, whose tests mount loop devices too: a device
        # another process took between --find and its set-up is tried again with the next one.
        for attempt in range(5):
            loop = run(["losetup", "--find", "--show", image])
            if loop.returncode == 0:
                break
            time.sleep(0.2 * (attempt + 1))
        if loop.returncode != 0:
            raise RuntimeError(f"losetup: {loop.stderr}")
        device = loop.stdout.strip()
        options = ["-o", "nouuid"] if self.fs == "xfs" else []
        try:
            mounted = run(["mount", "-t", self.fs, *options, device, self.mount_point])
            if mounted.returncode != 0:
                outcome["tree"] = "unmountable"
                outcome["detail"] = mounted.stderr.strip()
                return outcome
            try:
                self.check_mounted(outcome, allowed)
            finally:
                for _ in range(20):
                    if run(["umount", self.mount_point]).returncode == 0:
                        break
                    time.sleep(0.2)
                else:
                    # Still mounted: detached lazily, and the replay stops rather than judging the
                    # next states under a filesystem that may still write.
                    run(["umount", "-l", self.mount_point])
                    raise RuntimeError(f"umount {self.mount_point}: still busy after 4 s")
        finally:
            run(["losetup", "-d", device])
        return outcome

    def check_mounted(self, outcome, allowed):
        # DIR: absent or empty, or wholly one signed release.
        if not os.path.isdir(self.dir) or not os.listdir(self.dir):
            tree, installed = "empty", 0
        else:
            status, sequence, error, problems = self.reverify(state=False)
            if status == 0 and sequence in SEQUENCES.values():
                tree = f"r{sequence}"
                installed = sequence
            else:
                tree, installed = "mixed", None
                outcome["detail"] = f"reverify exit {status}: {error.get('message', '')} {problems[:5]}"
        outcome["tree"] = tree
        # The state file: parses, and records no more than DIR holds (absent before the first install).
        recorded = None
        if os.path.exists(self.state) and os.path.getsize(self.state) == 0:
            # Created (for its lock) by the first install, not yet written: no records.
            state_ok = installed is not None
        elif os.path.exists(self.state):
            try:
                with open(self.state) as f:
                    document = json.load(f)
                entry = (document.get("destinations") or {}).get(self.dir)
                recorded = entry.get("sequence") if entry else None
                state_ok = installed is not None and (recorded or 0) <= installed
                if state_ok and installed:
                    state_ok = self.reverify(state=True)[0] == 0
                if state_ok and installed:
                    # The release record beside DIR parses (issue 39).
                    status = run([self.signet, "status", self.dir, "--json"])
                    state_ok = status.returncode == 0
                    if not state_ok:
                        outcome["detail"] += f" status DIR: exit {status.returncode}: {status.stderr.strip()[-200:]}"
            except (ValueError, AttributeError) as error:
                state_ok = False
                outcome["detail"] += f" state file: {error}"
        else:
            state_ok = installed is not None
        outcome["state_ok"] = state_ok
        outcome["recorded"] = recorded
        if not state_ok:
            outcome["detail"] += f" state records {recorded} for a tree {tree}"
        # A next update from here succeeds and leaves release 2.
        update = run([self.signet, "unpack", self.next_package, "--dest", self.dir, "--pubkey", self.pubkey,
                      "--state", self.state])
        after = self.reverify(state=True)
        outcome["next_update_ok"] = update.returncode == 0 and after[0] == 0 and after[1] == SEQUENCES["r6"]
        if not outcome["next_update_ok"]:
            outcome["detail"] += f" next update: exit {update.returncode}: {update.stderr.strip()[-300:]}"


class VerityChecker(Checker):
    """The log recorded with unpack --verity (issue 52; kernel.sh's record_verity), judged
    without opening DIR's files: this machine's kernel mounts ext4 with the verity feature but
    refuses to open an fs-verity file (EOPNOTSUPP), so `signet reverify` cannot judge the tree
    here. Instead each state is mounted (the kernel recovers the journal, as for the other logs)
    for the state file and the release record, unmounted, and read by debugfs, which reads the
    filesystem itself: DIR must be wholly one release (the files of its packed folder, bytes
    and modes, nothing else, and its own signed manifest's sequence), and each of its files an
    fs-verity file (the inode's verity flag) carrying user.signet.sig. A next update is not
    judged: signet would have to open the fs-verity files it shares."""

    VERITY_FL = 0x100000

    def __init__(self, releases, scratch, judge_twice=True):
        # releases: tree name ("r1", ...) -> the folder it was packed from.
        super().__init__("ext4", None, None, None, scratch, judge_twice)
        self.releases = {tree: self.files_of(folder) for tree, folder in releases.items()}
        self.mount_point = "/run/signet-vm/ext4v"
        self.dir = self.mount_point + "/app"
        self.state = self.mount_point + "/state.json"
        self.record = self.mount_point + "/.app.signet-release"
        os.makedirs(self.mount_point, exist_ok=True)

    @staticmethod
    def files_of(folder):
        """{relative path: (mode, bytes)} of a folder's files, Signet's .signet/ left out."""
        files = {}
        for root, dirs, names in os.walk(folder):
            dirs[:] = [d for d in dirs if not (root == folder and d == ".signet")]
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, folder)] = (os.stat(path).st_mode & 0o7777, f.read())
        return files

    def check_once(self, image, allowed):
        outcome = super().check_once(image, allowed)
        if outcome["tree"] == "unmountable":
            return outcome
        # Unmounted and detached now (the journal recovered into the image): debugfs reads it.
        tree, detail = self.read_tree(image)
        outcome["tree"] = tree
        if detail:
            outcome["detail"] = detail + outcome["detail"]
        installed = SEQUENCES.get(tree) if tree != "empty" else 0
        recorded = outcome.get("recorded")
        state_ok = outcome.pop("state_parsed") and installed is not None and (recorded or 0) <= (installed or 0)
        if tree == "empty" and recorded:
            state_ok = False
        outcome["state_ok"] = state_ok
        if not state_ok:
            outcome["detail"] += f" state records {recorded} for a tree {tree}"
        outcome["next_update_ok"] = True
        outcome["next_update"] = "not judged (fs-verity files cannot be opened on this machine)"
        return outcome

    def check_mounted(self, outcome, allowed):
        # The state file: parses (empty: created for its lock, not yet written). The release
        # record, where there is one: a signet-release/1 document.
        outcome["state_parsed"], outcome["recorded"] = True, None
        try:
            if os.path.exists(self.state) and os.path.getsize(self.state) > 0:
                with open(self.state) as f:
                    entry = (json.load(f).get("destinations") or {}).get(self.dir)
                outcome["recorded"] = entry.get("sequence") if entry else None
            if os.path.exists(self.record):
                with open(self.record) as f:
                    if json.load(f).get("format") != "signet-release/1":
                        raise ValueError("not a signet-release/1 document")
        except (ValueError, AttributeError, OSError) as error:
            outcome["state_parsed"] = False
            outcome["detail"] += f" state file or release record: {error}"

    def debugfs(self, image, commands):
        script = os.path.join(self.scratch, "debugfs.cmds")
        with open(script, "w") as f:
            f.write("\n".join(commands) + "\n")
        try:
            result = run(["debugfs", "-f", script, image], env=dict(os.environ, DEBUGFS_PAGER="__none__"), timeout=120)
        except subprocess.TimeoutExpired:
            raise OSError("debugfs: no answer within 120 s")
        if result.returncode != 0:
            raise OSError(f"debugfs exit {result.returncode}: {result.stderr.strip()[-300:]}")
        return result.stdout

    def read_tree(self, image):
        """The tree DIR holds in the image ("empty", "r1", ... or "mixed") and why not a release."""
        dump = os.path.join(self.scratch, "dump")
        shutil.rmtree(dump, ignore_errors=True)
        os.makedirs(dump)
        listing = self.debugfs(image, ['ls -l "/app"'])
        if "File not found" in listing or not [line for line in listing.splitlines()[1:]
                                                if line.split() and line.split()[-1] not in (".", "..")]:
            return "empty", ""
        self.debugfs(image, [f'rdump "/app" "{dump}"'])
        found = self.files_of(os.path.join(dump, "app"))
        trees = [tree for tree, files in self.releases.items()
                 if set(files) == set(found) and all(files[p][1] == found[p][1] for p in files)]
        if not trees:
            near = min(self.releases, key=lambda t: len(set(self.releases[t]) ^ set(found))
                       + sum(1 for p in found if p in self.releases[t] and self.releases[t][p][1] != found[p][1]))
            files = self.releases[near]
            differ = sorted(set(files) ^ set(found)) + sorted(p for p in found if p in files and files[p][1] != found[p][1])
            return "mixed", f"neither release: {len(differ)} files differ from {near}'s, e.g. {differ[:5]}"
        tree = trees[0]
        problems = []
        try:
            with open(os.path.join(dump, "app", ".signet", "manifest.json")) as f:
                sequence = json.load(f).get("sequence")
        except (OSError, ValueError) as error:
            sequence = f"unreadable ({error})"
        if sequence != SEQUENCES[tree]:
            problems.append(f"its .signet/manifest.json says sequence {sequence}")
        # Each file's inode, as debugfs states it: "Mode:  0644   Flags: 0x180000" and the
        # extended attributes by name.
        paths = sorted(found)
        output = self.debugfs(image, [f'stat "/app/{path}"' for path in paths])
        stats = output.split("debugfs: stat ")[1:]
        if len(stats) != len(paths):
            return "mixed", f"debugfs stated {len(stats)} of {len(paths)} files"
        for path, text in zip(paths, stats):
            header = text.split("\n", 2)[1] if "\n" in text else ""
            fields = header.split()
            mode = int(fields[fields.index("Mode:") + 1], 8) & 0o7777 if "Mode:" in fields else None
            flags = int(fields[fields.index("Flags:") + 1], 16) if "Flags:" in fields else 0
            if mode != self.releases[tree][path][0]:
                problems.append(f"{path}: mode {mode if mode is None else oct(mode)}")
            if not flags & self.VERITY_FL:
                problems.append(f"{path}: not an fs-verity file (flags {flags:#x})")
            if "  user.signet.sig " not in text:
                problems.append(f"{path}: no user.signet.sig")
        if problems:
            return "mixed", f"{tree}'s files, but {len(problems)} problems: {problems[:5]}"
        return tree, ""


def replay(log_path, fs, checker, device_size, drops, rng, scratch, verbose, stop_when_caught=False, phases=PHASES):
    # stop_when_caught: for the broken builds' logs, whose question is only whether the replay
    # catches them; the first failed state answers it (about half the VM suite's replay time
    # went to judging the rest of them, every one failing).
    sector_size, entries = read_log(log_path, device_size)
    replayer = Replayer(log_path, sector_size)
    work, base, probe = (os.path.join(scratch, name) for name in ("work.img", "base.img", "probe.img"))
    for path in (work, base):
        with open(path, "wb") as f:
            f.truncate(device_size)
    phase = None
    summary = {"log": os.path.basename(log_path), "fs": fs, "entries": len(entries), "flush_points": 0,
               "drop_points": 0, "states_checked": 0, "trees": {}, "mixed": 0, "broken_state": 0,
               "unmountable": 0, "unmountable_after_drops": 0, "judged_twice": 0, "judged_twice_first": [],
               "failures": []}
    interval = []   # the entries since the last flush (a FUA entry among them is durable on its own)
    written = {}    # bytes written in each phase (install: "empty", update: "r1")
    marks = []
    work_fd = os.open(work, os.O_RDWR)
    base_fd = os.open(base, os.O_RDWR)

    def verdict(image, label, rebuild, dropped=False):
        allowed = phases[phase]
        outcome = checker.check(image, allowed, rebuild, dropped)
        if "judged_twice" in outcome:
            summary["judged_twice"] += 1
            summary["judged_twice_first"].append(f"{label}: {outcome['judged_twice']}")
        tree = outcome["tree"]
        summary["trees"][tree] = summary["trees"].get(tree, 0) + 1
        bad = False
        if tree != "unmountable" or not dropped:
            summary["states_checked"] += 1
        if tree == "unmountable" and dropped:
            # The filesystem's own journal did not survive this subset of lost writes (seen with
            # XFS's log): no tree to judge. Counted apart; never at a flush or FUA point.
            summary["unmountable_after_drops"] += 1
            if verbose:
                print(f"  {label}: unmountable after drops: {outcome['detail'][:200]}", file=sys.stderr)
            return
        if tree == "unmountable":
            summary["unmountable"] += 1
            bad = True
        elif tree not in allowed:
            summary["mixed"] += 1
            bad = True
        if tree != "unmountable" and not (outcome["state_ok"] and outcome["next_update_ok"]):
            summary["broken_state"] += 1
            bad = True
        if bad and len(summary["failures"]) < 20:
            summary["failures"].append({"point": label, "phase": phase, **outcome})
        if verbose:
            print(f"  {label}: {tree} state_ok={outcome['state_ok']} next={outcome['next_update_ok']} {outcome['detail'][:200]}",
                  file=sys.stderr)
        if bad and stop_when_caught:
            summary["caught_at"] = label
            raise Caught()

    try:
        for entry in entries:
            if entry.flags & MARK:
                marks.append(entry.mark)
                if entry.mark in phases:
                    if phase is None:
                        # The guest flushed before this mark: the made and mounted filesystem
                        # is the starting point (power cuts during mkfs are not the question).
                        os.close(base_fd)
                        copy_image(work, base)
                        base_fd = os.open(base, os.O_RDWR)
                        interval = []
                    phase = entry.mark
                continue
            replayer.apply(entry, work_fd)
            if phase is not None and not entry.flags & DISCARD:
                # What each phase wrote (the kernel's own record): an update on XFS, whose
                # unchanged files are reflinked, writes little more than the changed bytes.
                written[phase] = written.get(phase, 0) + entry.count * sector_size
            if phase is None:
                # Before the "empty" mark (mkfs, mount): nothing to check, but the last flush's
                # image and the unflushed writes since are kept for the first interval after it.
                if entry.flags & FLUSH:
                    os.close(base_fd)
                    copy_image(work, base)
                    base_fd = os.open(base, os.O_RDWR)
                    interval = []
                else:
                    interval.append(entry)
                continue
            if entry.flags & FLUSH:
                # A power cut before this flush completed: the last flush's image, the FUA writes
                # of a prefix of the interval, and any subset of its other writes.
                if interval and drops:
                    writes = interval
                    for _ in range(drops):
                        cut = rng.randint(1, len(writes))
                        copy_image(base, probe)
                        probe_fd = os.open(probe, os.O_RDWR)
                        chosen = [e for e in writes[:cut] if e.flags & FUA or rng.random() < 0.5]
                        try:
                            for e in chosen:
                                replayer.apply(e, probe_fd)
                        finally:
                            os.close(probe_fd)
                        summary["drop_points"] += 1

                        def rebuild(target, chosen=chosen):
                            copy_image(base, target)
                            fd = os.open(target, os.O_RDWR)
                            try:
                                for e in chosen:
                                    replayer.apply(e, fd)
                            finally:
                                os.close(fd)
                        verdict(probe, f"entry {entry.index}: {len(chosen)} of the first {cut} of {len(writes)} unflushed writes",
                                rebuild, dropped=True)
                # Right after the flush (and its own data, if it carried any).
                summary["flush_points"] += 1
                copy_image(work, probe)
                verdict(probe, f"entry {entry.index}: flush", lambda target: copy_image(work, target))
                os.close(base_fd)
                copy_image(work, base)
                base_fd = os.open(base, os.O_RDWR)
                interval = []
            elif entry.flags & FUA:
                summary["flush_points"] += 1
                copy_image(work, probe)
                verdict(probe, f"entry {entry.index}: FUA", lambda target: copy_image(work, target))
                interval.append(entry)
            else:
                interval.append(entry)
    except Caught:
        pass
    finally:
        os.close(work_fd)
        os.close(base_fd)
        replayer.close()
    summary["marks"] = marks
    summary["bytes_written"] = {"install": written.get("empty", 0), "update": written.get("r1", 0),
                                "rollback": written.get("r2", 0), "health_check_rollback": written.get("rb", 0),
                                "pending_install": written.get("hc", 0), "confirm": written.get("pd", 0),
                                "boot_check_rollback": written.get("p5", 0), "after": written.get("bc", 0)}
    missing = [mark for mark in phases if mark not in marks]
    if missing and "caught_at" not in summary:
        summary["failures"].append({"log": f"the marks {', '.join(phases)} are not all in the log (missing {', '.join(missing)})", "marks": marks})
    return summary


from kernel_report import kernel_report, number  # noqa: E402 (issue 52: the guest's kernel phase)


def replay_verity(work, results, drops, rng, verbose):
    """Issue 52: the power-cut log recorded with unpack --verity (ext4v), judged by
    VerityChecker. Returns the summary and what fails the run."""
    if results.get("recorded_ext4v") != "true":
        return {"fs": "ext4"}, ["ext4v: the guest did not record the --verity log"]
    scratch = "/dev/shm/signet-vm-replay-verity"
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    print("replay: ext4v", file=sys.stderr)
    try:
        checker = VerityChecker({"r1": os.path.join(work, "i1"), "r2": os.path.join(work, "i2")}, scratch)
    except OSError as error:
        return {"fs": "ext4"}, [f"ext4v: the releases' folders: {error}"]
    try:
        summary = replay(os.path.join(work, "ext4v-log.img"), "ext4", checker, os.path.getsize(os.path.join(work, "ext4v-data.img")),
                         drops, rng, scratch, verbose, phases=VERITY_PHASES)
    except (LogError, RuntimeError) as error:
        summary = {"fs": "ext4", "failures": [{"log": str(error)}]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"replay: ext4v: {summary.get('flush_points')} flush points, {summary.get('drop_points')} drop points, "
          f"{summary.get('states_checked')} states: {summary.get('trees')}; mixed {summary.get('mixed')}, "
          f"broken state {summary.get('broken_state')}, unmountable {summary.get('unmountable')}", file=sys.stderr)
    failures = [f"ext4v: {failure}" for failure in summary.get("failures", [])]
    for key in ("mixed", "broken_state", "unmountable"):
        if summary.get(key):
            failures.append(f"ext4v: {key}: {summary[key]}")
    if not summary.get("flush_points"):
        failures.append("ext4v: no flush points replayed")
    files = number(results, "ext4v_verity_files", int)
    if files != len(checker.releases["r1"]):
        failures.append(f"ext4v: {files} of the {len(checker.releases['r1'])} files installed are fs-verity files after the recording")
    return summary, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="run.sh's work folder")
    parser.add_argument("--signet", required=True, help="the signet binary for the checks")
    parser.add_argument("--report", required=True)
    parser.add_argument("--qemu-status", type=int, default=0)
    parser.add_argument("--elapsed-before", type=float, default=0)
    parser.add_argument("--drops", type=int, default=int(os.environ.get("SIGNET_VM_DROPS", "2")),
                        help="random drop points per flush interval (default 2)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SIGNET_VM_SEED", "38")))
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--only", choices=["kernel"], default=os.environ.get("SIGNET_VM_ONLY") or None,
                        help="the guest ran only this phase (SIGNET_VM_ONLY): check only its keys")
    args = parser.parse_args()
    started = time.time()
    work = args.work
    results = {}
    try:
        with open(os.path.join(work, "out", "results.env")) as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key:
                    results[key] = value
    except OSError:
        pass
    kernel, kernel_failures = kernel_report(results)
    rng = random.Random(args.seed)
    verity_log, verity_failures = replay_verity(work, results, args.drops, rng, args.verbose)
    kernel["verity_power_cut"] = {k: verity_log.get(k) for k in ("flush_points", "drop_points", "states_checked", "trees",
                                                                 "mixed", "broken_state", "unmountable", "unmountable_after_drops")}
    kernel_failures += verity_failures
    if args.only == "kernel":
        failures = ([f"qemu exit {args.qemu_status}"] if args.qemu_status != 0 else []) + kernel_failures
        report = dict(kernel, qemu_status=args.qemu_status, guest=results, ok=not failures, failures=failures)
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(json.dumps({k: v for k, v in report.items() if k != "guest"}), file=sys.stderr)
        for failure in failures:
            print(f"FAILED: {failure}", file=sys.stderr)
        return 0 if report["ok"] else 1
    pubkey = os.path.join(work, "job", "pkg", "pub.der")
    next_package = os.path.join(work, "job", "pkg", "r6.zip")
    scratch = "/dev/shm/signet-vm-replay"
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    logs = {"ext4v": verity_log}
    try:
        for tag, fs in (("ext4", "ext4"), ("xfs", "xfs"), ("ext4b", "ext4"), ("xfsb", "xfs")):
            log_path = os.path.join(work, f"{tag}-log.img")
            if results.get(f"recorded_{tag}") != "true":
                logs[tag] = {"fs": fs, "failures": [{"log": f"the guest did not record {tag}"}]}
                continue
            device_size = os.path.getsize(os.path.join(work, f"{tag}-data.img"))
            checker = Checker(fs, args.signet, pubkey, next_package, scratch, judge_twice=tag in ("ext4", "xfs"))
            print(f"replay: {tag}", file=sys.stderr)
            try:
                logs[tag] = replay(log_path, fs, checker, device_size, args.drops, rng, scratch, args.verbose,
                                   stop_when_caught=tag in ("ext4b", "xfsb"))
            except (LogError, RuntimeError) as error:
                logs[tag] = {"fs": fs, "failures": [{"log": str(error)}]}
            s = logs[tag]
            print(f"replay: {tag}: {s.get('flush_points')} flush points, {s.get('drop_points')} drop points, "
                  f"{s.get('states_checked')} states: {s.get('trees')}; mixed {s.get('mixed')}, "
                  f"broken state {s.get('broken_state')}, unmountable {s.get('unmountable')}, judged twice {s.get('judged_twice')}"
                  + (f"; caught at {s['caught_at']}, the rest not replayed" if s.get("caught_at") else ""),
                  file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    good = [logs.get(tag, {}) for tag in ("ext4", "xfs")]
    broken = [logs.get(tag, {}) for tag in ("ext4b", "xfsb")]

    def total(group, key):
        return sum(s.get(key) or 0 for s in group)

    def as_int(key):
        return number(results, key, int)

    def as_float(key):
        return number(results, key, float)

    exposure = as_float("exposure")
    report = {
        "flush_points": total(good, "flush_points"),
        "drop_points": total(good, "drop_points"),
        "states_checked": total(good, "states_checked"),
        "mixed": total(good, "mixed"),
        "broken_state": total(good, "broken_state"),
        "unmountable": total(good, "unmountable"),
        "unmountable_after_drops": total(good, "unmountable_after_drops"),
        # States that failed a first judgement and, built again from the log, passed a second
        # (see Checker.check): not failures, but counted and named so that a trend is seen.
        "judged_twice": total(good, "judged_twice"),
        "judged_twice_first": [f"{tag}: {point}" for tag in ("ext4", "xfs") for point in logs.get(tag, {}).get("judged_twice_first", [])],
        "broken_build_caught": any((s.get("mixed") or 0) + (s.get("broken_state") or 0) > 0 for s in broken),
        "broken_build": {s.get("log", tag): {k: s.get(k) for k in ("states_checked", "mixed", "broken_state", "trees", "caught_at")}
                         for tag, s in zip(("ext4b", "xfsb"), broken)},
        "bytes_written": {tag: logs.get(tag, {}).get("bytes_written") for tag in ("ext4", "xfs")},
        "timer_run": results.get("timer_triggered") == "true" and results.get("timer_service_result") == "success"
        and as_int("timer_installed_sequence") == 1,
        "timer_next_elapse": results.get("timer_next_elapse"),
        "update_run": results.get("second_run_status") == "0" and as_int("second_installed_sequence") == 2,
        "reused_under_sandbox": as_int("journal_reused") or 0,
        "up_to_date_run": results.get("third_run_status") == "0" and (as_int("journal_up_to_date") or 0) >= 1,
        "journal_lines": as_int("journal_lines") or 0,
        # Issue 48, point 13: libdispatch's "Failed to set thread priority" under the units.
        "journal_priority_noise": sum(as_int(key) or 0 for key in ("journal_priority_noise", "boot_check_priority_noise", "stuck_priority_noise")),
        "timeout_stopped": results.get("stuck_result") == "timeout" and results.get("stuck_unchanged") == "true",
        "timeout_seconds": as_int("stuck_seconds"),
        "exposure": exposure,
        # Issue 39: a pending release, left alone by the boot check in its own boot, rolled back
        # by it (the unit under systemd, in its sandbox) in a later one.
        "boot_check_rolled_back": results.get("pending_install_status") == "0" and as_int("boot_check_same_boot_sequence") == 3
        and results.get("boot_check_result") == "success" and as_int("boot_check_rolled_back_to") == 2
        and results.get("boot_check_state_ok") == "true",
        "boot_check_exposure": as_float("boot_check_exposure"),
        # Issue 65: the socket unit under systemd: made 0660 root:signet, the service started by a
        # first call; Status answered for the group, Install refused to it, Check answered for root.
        "serve_socket": results.get("serve_socket_enabled") == "0" and results.get("serve_socket_file") == "660:root:signet"
        and results.get("serve_idle_before") == "inactive" and as_int("serve_status_group") == 1
        and as_int("serve_install_group_denied") == 1 and as_int("serve_check_root") == 1 and results.get("serve_active_after") == "active",
        **kernel,
        "qemu_status": args.qemu_status,
        "seconds": {"guest_and_setup": args.elapsed_before, "replay": round(time.time() - started, 1)},
        "logs": logs,
        "guest": results,
    }
    failures = []
    if args.qemu_status != 0:
        failures.append(f"qemu exit {args.qemu_status}")
    for tag in ("ext4", "xfs", "ext4b", "xfsb"):
        for failure in logs.get(tag, {}).get("failures", []):
            if tag in ("ext4", "xfs") or "log" in failure:
                failures.append(f"{tag}: {failure}")
    for key in ("mixed", "broken_state", "unmountable"):
        if report[key]:
            failures.append(f"{key}: {report[key]}")
    if report["flush_points"] == 0:
        failures.append("no flush points replayed")
    for key in ("broken_build_caught", "timer_run", "update_run", "up_to_date_run", "timeout_stopped", "boot_check_rolled_back", "serve_socket"):
        if not report[key]:
            failures.append(f"{key} is false")
    if report["reused_under_sandbox"] <= 0:
        failures.append("the sandboxed update reused no unchanged file")
    if report["journal_lines"] <= 0:
        failures.append("the journal holds no line of Signet's")
    if report["journal_priority_noise"] != 0:
        failures.append(f"the units' journals hold {report['journal_priority_noise']} 'Failed to set thread priority' lines (0 required)")
    if exposure is None or exposure > 2.0:
        failures.append(f"systemd-analyze security: {exposure} (at most 2.0)")
    if report["boot_check_exposure"] is None or report["boot_check_exposure"] > 2.0:
        failures.append(f"systemd-analyze security of signet-boot-check@app.service: {report['boot_check_exposure']} (at most 2.0)")
    failures += kernel_failures
    report["ok"] = not failures
    report["failures"] = failures
    with open(args.report, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    summary = {k: report[k] for k in ("flush_points", "drop_points", "states_checked", "mixed", "broken_state", "judged_twice",
                                      "broken_build_caught", "timer_run", "timeout_stopped", "boot_check_rolled_back", "exposure",
                                      "ima_enforced", "ima_tamper_refused", "ima_exec_refused", "ima_update_ok", "verity_files",
                                      "verity_tamper_refused", "reverify_verity_ratio", "verity_power_cut", "ok")}
    print(json.dumps(summary), file=sys.stderr)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
