#!/usr/bin/env python3
"""Tests of replay.py's log reader and replayer on logs built here in the kernel's format
(run by the Swift test VMReplayTests; `python3 scripts/vm/test_replay.py` alone works too).

A log the guest wrote is still input from outside this process: every count, sector and length
in it is checked, and a damaged log is refused by name rather than replayed wrong.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402

SECTOR = 512


def build_log(entries, sector_size=SECTOR, count=None):
    """A log: entries are (sector, data-or-count, flags, mark)."""
    body = b""
    for sector, data, flags, mark in entries:
        if flags & replay.MARK:
            text = mark.encode()
            header = struct.pack("<QQQQ", 0, 0, flags, len(text)) + text
            body += header.ljust(sector_size, b"\0")
        elif flags & replay.DISCARD:
            body += struct.pack("<QQQQ", sector, data, flags, 0).ljust(sector_size, b"\0")
        else:
            sectors = len(data) // sector_size
            body += struct.pack("<QQQQ", sector, sectors, flags, 0).ljust(sector_size, b"\0") + data
    n = len(entries) if count is None else count
    superblock = struct.pack("<QQQI", replay.MAGIC, 1, n, sector_size).ljust(sector_size, b"\0")
    return superblock + body


class ReplayTests(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def write(self, name, data):
        path = os.path.join(self.folder.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_reads_writes_flushes_marks_and_discards(self):
        a, b = b"A" * SECTOR, b"B" * (2 * SECTOR)
        log = self.write("log", build_log([
            (0, a, 0, None),
            (0, b"", replay.FLUSH, None),
            (0, None, replay.MARK, "empty"),
            (4, b, replay.FUA, None),
            (1, 3, replay.DISCARD, None),
            (0, b"", replay.FLUSH, None),
        ]))
        size, entries = replay.read_log(log, 16 * SECTOR)
        self.assertEqual(size, SECTOR)
        self.assertEqual([e.flags for e in entries], [0, replay.FLUSH, replay.MARK, replay.FUA, replay.DISCARD, replay.FLUSH])
        self.assertEqual(entries[2].mark, "empty")
        image = self.write("image", b"\xff" * (16 * SECTOR))
        replayer = replay.Replayer(log, size)
        fd = os.open(image, os.O_RDWR)
        try:
            for entry in entries:
                replayer.apply(entry, fd)
        finally:
            os.close(fd)
            replayer.close()
        with open(image, "rb") as f:
            content = f.read()
        self.assertEqual(content[0:SECTOR], a)
        self.assertEqual(content[SECTOR:4 * SECTOR], bytes(3 * SECTOR), "a discard reads as zeros")
        self.assertEqual(content[4 * SECTOR:6 * SECTOR], b)
        self.assertEqual(content[6 * SECTOR:], b"\xff" * (10 * SECTOR), "nothing else is touched")

    def test_refuses_damaged_logs(self):
        good = build_log([(0, b"A" * SECTOR, 0, None)])
        cases = {
            "not a log": b"\0" * SECTOR * 2,
            "an entry count beyond the file": build_log([(0, b"A" * SECTOR, 0, None)], count=1 << 40),
            "data cut short": good[:-100],
            "a write past the device": build_log([(15, b"A" * (2 * SECTOR), 0, None)]),
            "a sector number that overflows": build_log([((1 << 64) - 1, b"A" * SECTOR, 0, None)]),
            "a mark longer than its sector": build_log([(0, None, replay.MARK, "x" * 600)])[:SECTOR]
            + struct.pack("<QQQQ", 0, 0, replay.MARK, 600).ljust(SECTOR, b"\0"),
            "an odd sector size": struct.pack("<QQQI", replay.MAGIC, 1, 0, 513).ljust(SECTOR, b"\0"),
        }
        for name, data in cases.items():
            with self.subTest(name):
                log = self.write("bad", data)
                with self.assertRaises(replay.LogError):
                    replay.read_log(log, 16 * SECTOR)


    def test_a_failed_state_is_built_again_and_judged_once_more(self):
        """A state counts as good only when a second judgement, from a rebuilt image, finds it
        whole; one that fails twice is a failure carrying the filesystem checker's words."""
        source = self.write("state", b"S" * SECTOR)

        class Scripted(replay.Checker):
            def __init__(self, verdicts, judge_twice=True):
                self.fs, self.judge_twice, self.verdicts, self.judged = "ext4", judge_twice, list(verdicts), []

            def judge(self, image, allowed):
                with open(image, "rb") as f:
                    self.judged.append((os.path.basename(image), f.read()))
                tree = self.verdicts.pop(0)
                return {"tree": tree, "state_ok": tree != "unreadable", "next_update_ok": tree != "unreadable",
                        "detail": "" if tree != "unreadable" else "[Errno 74] Bad message"}

            def fsck(self, image):
                return "e2fsck exit 4: Directory inode 12, block #0: directory passes checks but fails checksum"

        def rebuild(target):
            replay.copy_image(source, target)

        image = self.write("probe", b"S" * SECTOR)
        # Whole the first time: judged once.
        checker = Scripted(["r1"])
        self.assertEqual(checker.check(image, ("r1", "r2"), rebuild, dropped=False)["tree"], "r1")
        self.assertEqual(len(checker.judged), 1)
        # Unreadable, then whole from a rebuilt image: good, and marked as judged twice.
        checker = Scripted(["unreadable", "r2"])
        outcome = checker.check(image, ("r1", "r2"), rebuild, dropped=False)
        self.assertEqual((outcome["tree"], outcome.get("judged_twice")), ("r2", "unreadable"))
        self.assertEqual(checker.judged[1], ("probe.again", b"S" * SECTOR), "the second judgement reads a rebuilt image")
        self.assertFalse(os.path.exists(image + ".again"), "the rebuilt image is removed")
        # Failed twice: a failure, with both judgements and the checker's words.
        checker = Scripted(["unreadable", "unreadable"])
        outcome = checker.check(image, ("r1", "r2"), rebuild, dropped=False)
        self.assertEqual(outcome["tree"], "unreadable")
        self.assertNotIn("judged_twice", outcome)
        self.assertIn("first judgement: unreadable", outcome["detail"])
        self.assertIn("fails checksum", outcome["detail"])
        # A mixed tree is judged twice as well; the broken builds' logs are not.
        self.assertEqual(Scripted(["r3", "r3"]).check(image, ("r1", "r2"), rebuild, dropped=False)["tree"], "r3")
        checker = Scripted(["r3"], judge_twice=False)
        self.assertEqual(checker.check(image, ("r1", "r2"), rebuild, dropped=False)["tree"], "r3")
        self.assertEqual(len(checker.judged), 1)
        # A filesystem that does not mount after dropped writes is not a state to judge again.
        checker = Scripted(["unmountable"])
        self.assertEqual(checker.check(image, ("r1", "r2"), rebuild, dropped=True)["tree"], "unmountable")
        self.assertEqual(len(checker.judged), 1)


    def test_a_broken_builds_log_stops_at_its_first_caught_state(self):
        """The broken builds' logs answer one question, whether the replay catches them: the
        first failed state ends their replay, and the marks never reached are not a failure."""
        a = b"A" * SECTOR
        log = self.write("log", build_log([
            (0, a, 0, None), (0, b"", replay.FLUSH, None),
            (0, None, replay.MARK, "empty"),
            (1, a, 0, None), (0, b"", replay.FLUSH, None),
            (2, a, 0, None), (0, b"", replay.FLUSH, None),
        ]))

        class Mixed:
            judged = 0

            def check(self, image, allowed, rebuild, dropped):
                Mixed.judged += 1
                return {"tree": "mixed", "state_ok": False, "next_update_ok": False, "detail": "scripted"}

        scratch = tempfile.mkdtemp(dir=self.folder.name)
        summary = replay.replay(log, "ext4", Mixed(), 16 * SECTOR, 0, replay.random.Random(1), scratch, False, stop_when_caught=True)
        self.assertEqual((Mixed.judged, summary["mixed"], summary["caught_at"]), (1, 1, "entry 4: flush"))
        self.assertFalse([f for f in summary["failures"] if "log" in f], "the marks not reached are no failure")
        # A good build's log is replayed whole, and its missing marks are a failure.
        Mixed.judged = 0
        summary = replay.replay(log, "ext4", Mixed(), 16 * SECTOR, 0, replay.random.Random(1), scratch, False)
        self.assertEqual(Mixed.judged, 2)
        self.assertTrue([f for f in summary["failures"] if "log" in f])


class VerityCheckerTests(unittest.TestCase):
    """The judge of the --verity log (replay.VerityChecker) on real ext4 images made here with
    the verity feature: mkfs.ext4 -d fills them, debugfs sets the fs-verity flag on the files
    (this machine's kernel then refuses to open them, as it refuses the guest's)."""

    def setUp(self):
        if os.geteuid() != 0 or not shutil.which("debugfs"):
            self.skipTest("needs root (loop mounts) and debugfs")
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.releases = {"r1": {"a.txt": (0o644, b"one\n"), "bin/x": (0o755, b"#!/bin/sh\necho 1\n"), "c.dat": (0o644, b"same")},
                         "r2": {"a.txt": (0o644, b"two\n"), "bin/x": (0o755, b"#!/bin/sh\necho 2\n"), "c.dat": (0o644, b"same")}}
        folders = {}
        for tree, files in self.releases.items():
            folders[tree] = os.path.join(self.folder.name, tree)
            self.fill(folders[tree], files)
        scratch = os.path.join(self.folder.name, "scratch")
        os.makedirs(scratch)
        self.checker = replay.VerityChecker(folders, scratch)

    @staticmethod
    def fill(folder, files, attribute=True):
        for path, (mode, data) in files.items():
            full = os.path.join(folder, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
            os.chmod(full, mode)
            if attribute:
                os.setxattr(full, "user.signet.sig", b"\x01" * 16)

    def image(self, files, sequence, recorded, verity=True):
        """An image whose app/ holds files (None: no app/), its manifest saying sequence, and the
        state file recording recorded; each file an fs-verity file where verity says so."""
        source = tempfile.mkdtemp(dir=self.folder.name)
        if files is not None:
            self.fill(os.path.join(source, "app"), files)
            os.makedirs(os.path.join(source, "app", ".signet"))
            with open(os.path.join(source, "app", ".signet", "manifest.json"), "w") as f:
                json.dump({"sequence": sequence}, f)
            with open(os.path.join(source, ".app.signet-release"), "w") as f:
                json.dump({"format": "signet-release/1"}, f)
        if recorded is not None:
            with open(os.path.join(source, "state.json"), "w") as f:
                json.dump({"destinations": {self.checker.dir: {"sequence": recorded}}}, f)
        image = source + ".img"
        made = subprocess.run(["mkfs.ext4", "-q", "-b", "4096", "-O", "verity", "-d", source, image, "16M"], capture_output=True, text=True)
        self.assertEqual(made.returncode, 0, made.stderr)
        for path in files or {}:
            if verity is True or path in (verity or ()):
                subprocess.run(["debugfs", "-w", "-R", f"set_inode_field /app/{path} flags 0x180000", image], capture_output=True, check=True)
        return image

    def test_judges_a_tree_it_cannot_open(self):
        r1, r2 = self.releases["r1"], self.releases["r2"]
        outcome = self.checker.judge(self.image(r1, 1, 1), ("r1", "r2"))
        self.assertEqual((outcome["tree"], outcome["state_ok"]), ("r1", True), outcome["detail"])
        outcome = self.checker.judge(self.image(r2, 2, 1), ("r1", "r2"))
        self.assertEqual((outcome["tree"], outcome["state_ok"]), ("r2", True), outcome["detail"])
        outcome = self.checker.judge(self.image(None, 0, None), ("empty", "r1"))
        self.assertEqual((outcome["tree"], outcome["state_ok"]), ("empty", True), outcome["detail"])

    def test_finds_what_is_wrong(self):
        r1, r2 = self.releases["r1"], self.releases["r2"]
        cases = {
            "mixed": (dict(r1, **{"a.txt": r2["a.txt"]}), 1, 1, True, "files differ"),
            "a file more": (dict(r1, extra=(0o644, b"x")), 1, 1, True, "extra"),
            "a mode": (dict(r1, **{"bin/x": (0o644, r1["bin/x"][1])}), 1, 1, True, "bin/x: mode 0o644"),
            "not fs-verity": (r1, 1, 1, ("a.txt", "c.dat"), "bin/x: not an fs-verity file"),
            "another manifest": (r1, 2, 1, True, "manifest.json says sequence 2"),
        }
        for name, (files, sequence, recorded, verity, detail) in cases.items():
            with self.subTest(name):
                outcome = self.checker.judge(self.image(files, sequence, recorded, verity), ("r1", "r2"))
                self.assertEqual(outcome["tree"], "mixed")
                self.assertIn(detail, outcome["detail"])
        # A state file recording a later release than the tree holds.
        outcome = self.checker.judge(self.image(r1, 1, 2), ("r1", "r2"))
        self.assertEqual((outcome["tree"], outcome["state_ok"]), ("r1", False))
        self.assertIn("state records 2", outcome["detail"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
