import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 39: unchanged files shared with the installed tree (hard links), the previous release
/// kept beside DIR, `rollback`, hooks and the health check, pending releases, `confirm`, the
/// boot check and `status DIR`.
@Suite("Releases a device can come back from")
struct ReleasesCLITests {
    /// A source tree and a way to pack releases of it.
    struct Fixture {
        let work: Workspace
        let tree: String
        let dest: String
        let state: String

        init() throws {
            work = try Workspace()
            tree = work.directory.file("tree")
            dest = work.directory.file("app")
            state = work.directory.file("state.json")
            try FileManager.default.createDirectory(atPath: tree + "/lib", withIntermediateDirectories: true)
            for index in 0..<20 { try write("lib/f\(index).txt", "file \(index)\n") }
            try write("bin.sh", "#!/bin/sh\necho release\n")
            chmod(tree + "/bin.sh", 0o755)
            try write("config.txt", "release 1\n")
        }

        func write(_ relative: String, _ text: String) throws {
            try Data(text.utf8).write(to: URL(fileURLWithPath: tree + "/" + relative))
        }

        /// Packs the tree as sequence `sequence`.
        func pack(_ sequence: Int) throws -> String {
            let package = work.directory.file("app-\(sequence).zip")
            let result = try CLI.run([
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app",
                "--version", "\(sequence).0", "--sequence", "\(sequence)", "--out", package
            ])
            #expect(result.status == 0, "\(result.stderr)")
            return package
        }

        func unpack(_ package: String, _ extra: [String] = []) throws -> ProcessResult {
            try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--state", state] + extra)
        }

        func reverify() throws -> Int32 {
            try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state, "--expect-name", "app"]).status
        }

        func text(_ relative: String) -> String? { try? String(contentsOfFile: dest + "/" + relative, encoding: .utf8) }

        var previous: String { work.directory.file(".app.signet-previous") }
    }

    static func identity(_ path: String) -> [UInt64]? {
        var info = stat()
        return lstat(path, &info) == 0 ? [UInt64(info.st_ino), UInt64(info.st_nlink)] : nil
    }

    @Test("an update shares unchanged files with the installed tree (same inode); changed content, a changed mode or an edited file is written anew")
    func sharing() throws {
        let f = try Fixture()
        #expect(try f.unpack(try f.pack(1)).status == 0)
        let kept = Self.identity(f.dest + "/lib/f0.txt")
        let modeChanged = Self.identity(f.dest + "/lib/f1.txt")
        let edited = Self.identity(f.dest + "/lib/f2.txt")
        // Edited in place on the device: not shared (it no longer hashes), restored from the package.
        try Data("edited on the device\n".utf8).write(to: URL(fileURLWithPath: f.dest + "/lib/f2.txt"))
        try f.write("config.txt", "release 2\n")
        chmod(f.tree + "/lib/f1.txt", 0o755)
        let result = try f.unpack(try f.pack(2), ["--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let json = try result.json()
        // 22 files: config.txt changed, f1 changed mode, f2 edited: 19 shared.
        #expect(json["files_shared"] as? Int == 19, "\(json)")
        #expect(json["previous_kept"] as? Bool == true)
        #expect(Self.identity(f.dest + "/lib/f0.txt")?[0] == kept?[0], "an unchanged file is the same inode")
        #expect(Self.identity(f.dest + "/lib/f0.txt")?[1] == 2, "shared with the kept previous release")
        #expect(Self.identity(f.dest + "/lib/f1.txt")?[0] != modeChanged?[0], "a file whose mode changes is not shared")
        #expect(Self.identity(f.dest + "/lib/f2.txt")?[0] != edited?[0])
        #expect(f.text("lib/f2.txt") == "file 2\n" && f.text("config.txt") == "release 2\n")
        #expect(try f.reverify() == 0)
        // The file's own record keeps the release that wrote it; status names the tree's.
        let status = try CLI.run(["status", f.dest + "/lib/f0.txt", "--json"]).json()
        let entry = (status["files"] as? [[String: Any]])?.first
        #expect(entry?["sequence"] as? Int == 2, "\(status)")

        // --keep-previous=no: the replaced tree and the previous one kept before are removed.
        try f.write("config.txt", "release 3\n")
        let three = try f.unpack(try f.pack(3), ["--keep-previous", "no", "--json"])
        #expect(three.status == 0, "\(three.stderr)")
        #expect(try three.json()["previous_kept"] as? Bool == false)
        #expect(!FileManager.default.fileExists(atPath: f.previous))
        #expect(Self.identity(f.dest + "/lib/f0.txt")?[1] == 1)
        #expect(try f.reverify() == 0)
    }

    @Test("rollback swaps the previous release back, records the other as bad; refused without one or when a shared file was edited in place")
    func rollback() throws {
        let f = try Fixture()
        let one = try f.pack(1)
        #expect(try f.unpack(one).status == 0)
        // No previous release yet: refused, DIR unchanged.
        let none = try CLI.run(["rollback", f.dest, "--json"])
        let noneJSON = try none.json()
        #expect(none.status == 1 && (noneJSON["error"] as? [String: Any])?["code"] as? String == "rollback-refused", "\(none.stdoutText)")
        try f.write("config.txt", "release 2\n")
        let two = try f.pack(2)
        #expect(try f.unpack(two).status == 0)
        let status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect(
            (status["current"] as? [String: Any])?["sequence"] as? Int == 2 && (status["previous"] as? [String: Any])?["sequence"] as? Int == 1, "\(status)")

        let back = try CLI.run(["rollback", f.dest, "--state", f.state])
        #expect(back.status == 0 && back.stdoutText.contains("rolled back"), "\(back.stdoutText) \(back.stderr)")
        #expect(f.text("config.txt") == "release 1\n")
        #expect(!FileManager.default.fileExists(atPath: f.previous))
        // Rolled back on purpose: the state accepts it, but a server cannot push the release back.
        #expect(try f.reverify() == 0)
        let again = try f.unpack(two, ["--json"])
        #expect(again.status == 1, "\(again.stdoutText)")
        let againJSON = try again.json()
        #expect((againJSON["error"] as? [String: Any])?["code"] as? String == "bad-release")
        #expect(again.stderr.contains("--retry-bad") && !again.stderr.contains("--force"), "\(again.stderr)")
        #expect(try f.unpack(two, ["--force"]).status == 1, "--force is not a retry (issue 49)")
        // The release DIR holds again: up to date (not a rollback, not bad).
        let current = try f.unpack(one)
        #expect(current.status == 0 && current.stdoutText.contains("up to date"), "\(current.stdoutText) \(current.stderr)")

        // A higher sequence installs; a file shared with the previous release edited in place
        // makes the rollback refuse, naming it, with DIR unchanged.
        try f.write("config.txt", "release 3\n")
        #expect(try f.unpack(try f.pack(3)).status == 0)
        let fd = open(f.dest + "/lib/f5.txt", O_WRONLY | O_APPEND)
        #expect(fd >= 0)
        _ = "tampered".withCString { write(fd, $0, 8) }
        close(fd)
        let tree = Self.identity(f.dest)
        let refused = try CLI.run(["rollback", f.dest])
        #expect(refused.status == 1 && refused.stderr.contains("lib/f5.txt") && refused.stderr.contains("hard link"), "\(refused.stderr)")
        #expect(Self.identity(f.dest) == tree && f.text("config.txt") == "release 3\n")
    }

    @Test(
        "Signet killed (SIGKILL) inside the post-install command: the hook dies with it (PR_SET_PDEATHSIG), status says the post-install did not finish, the next run ends what the hook left (its process group) and runs it again"
    )
    func postInstallKilled() throws {
        let f = try Fixture()
        let one = try f.pack(1)
        let marks = f.work.directory.file("marks")
        try FileManager.default.createDirectory(atPath: marks, withIntermediateDirectories: true)
        // The hook records itself and a background child of its group, then kills Signet, its
        // parent, with SIGKILL: no handler runs, nothing is recorded after the hook.
        let killer = "sh -c 'echo $$ > \(marks)/hook; sleep 300 & echo $! > \(marks)/child; kill -KILL $PPID; wait'"
        // (Through bash, which reports the signal: the runner takes a SIGKILL for its own time-out.)
        let killed = try run(
            "bash",
            [
                "-c", "\"$@\"; echo $?", "signet", CLI.binary, "unpack", one, "--dest", f.dest, "--pubkey", f.work.publicDER,
                "--state", f.state, "--post-install", killer
            ])
        #expect(
            killed.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == "137", "signet was killed (128 + 9): \(killed.stdoutText) \(killed.stderr)")
        #expect(f.text("config.txt") == "release 1\n", "the swap happened before the hook")
        func pid(_ name: String) throws -> pid_t {
            try #require(pid_t(try String(contentsOfFile: "\(marks)/\(name)", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        func alive(_ process: pid_t) -> Bool {
            // A zombie is not alive: /proc/PID/stat's state is Z.
            guard kill(process, 0) == 0, let stat = try? String(contentsOfFile: "/proc/\(process)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            return !stat[stat.index(after: close)...].hasPrefix(" Z")
        }
        let hook = try pid("hook"), child = try pid("child")
        // The hook itself went with Signet (its parent-death signal); poll briefly, bounded.
        for _ in 0..<100 where alive(hook) { usleep(10_000) }
        #expect(!alive(hook), "the hook does not outlive Signet")
        #expect(alive(child), "a process the hook left in the background is there until the next run")
        let status = try CLI.run(["status", f.dest, "--json"])
        #expect(try status.json()["post_install_unfinished"] is String, "\(status.stdoutText)")
        let text = try CLI.run(["status", f.dest])
        #expect(text.stdoutText.contains("post-install not finished") && !text.stdoutText.contains("confirmed"), "\(text.stdoutText)")
        // The next run: the group ended, the command run again, the record cleared.
        let again = try f.unpack(one, ["--post-install", "sh -c 'echo again > \(marks)/again'", "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect((try again.json()["hooks"] as? [[String: Any]])?.map { $0["hook"] as? String } == ["post-install"], "\(again.stdoutText)")
        #expect(FileManager.default.fileExists(atPath: "\(marks)/again"))
        for _ in 0..<100 where alive(child) { usleep(10_000) }
        #expect(!alive(child), "the group the killed run left is ended")
        let cleared = try CLI.run(["status", f.dest, "--json"])
        #expect(try cleared.json()["post_install_unfinished"] is NSNull, "\(cleared.stdoutText)")
        kill(child, SIGKILL)

        // The same through `update`: DIR already holds the channel's release, and the run
        // finishes the hook (the package's manifest read again, nothing else fetched).
        let p = try UpdateCLITests.Publisher("releases-post-install")
        try p.release(1)
        let update = ["update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca", p.server.root]
        let killedUpdate = try run("bash", ["-c", "\"$@\"; echo $?", "signet", CLI.binary] + update + ["--post-install", killer])
        #expect(killedUpdate.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines) == "137", "\(killedUpdate.stdoutText) \(killedUpdate.stderr)")
        let leftChild = try pid("child")
        let finished = try CLI.run(update + ["--post-install", "sh -c 'echo update > \(marks)/update'", "--json"])
        #expect(finished.status == 0 && FileManager.default.fileExists(atPath: "\(marks)/update"), "\(finished.stdoutText) \(finished.stderr)")
        #expect((try finished.json()["hooks"] as? [[String: Any]])?.first?["hook"] as? String == "post-install", "\(finished.stdoutText)")
        for _ in 0..<100 where alive(leftChild) { usleep(10_000) }
        #expect(!alive(leftChild))
        kill(leftChild, SIGKILL)
    }

    @Test(
        "rollback refuses only the release it rolled away from: one between the running release and it, never installed here, installs; the refused one does not"
    )
    func rollbackRefusesOnlyWhatWasInstalled() throws {
        let f = try Fixture()
        let one = try f.pack(1)
        try f.write("config.txt", "release 2\n")
        let two = try f.pack(2)
        try f.write("config.txt", "release 3\n")
        let three = try f.pack(3)
        #expect(try f.unpack(one).status == 0)
        #expect(try f.unpack(three).status == 0)
        #expect(try CLI.run(["rollback", f.dest, "--state", f.state]).status == 0 && f.text("config.txt") == "release 1\n")
        let status = try CLI.run(["status", f.dest, "--json"]).json()
        let bad = try #require((status["bad"] as? [[String: Any]])?.first)
        #expect(bad["sequences"] as? [Int] == [3], "\(status)")
        let text = try CLI.run(["status", f.dest]).stdoutText
        #expect(text.contains("bad:      app sequence 3 —"), "\(text)")
        let refused = try f.unpack(three)
        #expect(refused.status == 1 && refused.stderr.contains("refused"), "\(refused.stderr)")
        let between = try f.unpack(two, ["--allow-downgrade"])
        #expect(between.status == 0 && f.text("config.txt") == "release 2\n", "release 2 was never installed here: \(between.stderr)")
    }

    @Test("hooks run without a shell in a clean environment; a failed or slow health check swaps the previous release back")
    func healthCheck() throws {
        let f = try Fixture()
        let log = f.work.directory.file("hook.log")
        let post = "sh -c 'echo \"$SIGNET_EVENT $SIGNET_OLD_SEQUENCE>$SIGNET_NEW_SEQUENCE ${HOME:-nohome} ${SECRET:-clean}\" >> \(log)'"
        #expect(try f.unpack(try f.pack(1), ["--post-install", post]).status == 0)
        try f.write("config.txt", "release 2\n")
        let passing = try CLI.run(
            [
                "unpack", try f.pack(2), "--dest", f.dest, "--pubkey", f.work.publicDER, "--state", f.state,
                "--post-install", post, "--health-check", "sh -c 'echo healthy; test -f \"$SIGNET_DEST/config.txt\"'", "--json"
            ],
            environment: ["SECRET": "leaked"])
        #expect(passing.status == 0, "\(passing.stderr)")
        let hooks = try passing.json()["hooks"] as? [[String: Any]] ?? []
        #expect(hooks.map { $0["hook"] as? String } == ["post-install", "health-check"] && hooks[1]["output"] as? String == "healthy\n", "\(hooks)")
        #expect(try String(contentsOfFile: log, encoding: .utf8) == "install >1 nohome clean\ninstall 1>2 nohome clean\n")

        // Failing: swapped back, recorded as bad, the post-install command runs again.
        try f.write("config.txt", "release 3\n")
        let three = try f.pack(3)
        let failing = try f.unpack(three, ["--post-install", post, "--health-check", "sh -c 'echo broken >&2; exit 7'", "--json"])
        #expect(failing.status == 1)
        let error = try failing.json()["error"] as? [String: Any]
        #expect(error?["code"] as? String == "health-check-failed" && (error?["message"] as? String ?? "").contains("broken"), "\(String(describing: error))")
        #expect(f.text("config.txt") == "release 2\n")
        #expect(try String(contentsOfFile: log, encoding: .utf8).hasSuffix("install 2>3 nohome clean\nrollback 3>2 nohome clean\n"))
        #expect(try f.reverify() == 0)
        #expect(try f.unpack(three).status == 1, "a release that failed its health check is not installed again")

        // Too slow: killed at its timeout (with what it started), and rolled back.
        try f.write("config.txt", "release 4\n")
        let start = Date()
        let slow = try f.unpack(try f.pack(4), ["--health-check", "sh -c 'sleep 60 & sleep 60'", "--health-timeout", "1s"])
        #expect(slow.status == 1 && slow.stderr.contains("timed out"), "\(slow.stderr)")
        #expect(Date().timeIntervalSince(start) < 30)
        #expect(f.text("config.txt") == "release 2\n")

        // A command that is not one: a usage error before anything is done.
        #expect(try f.unpack(three, ["--health-check", "sh -c 'unterminated"]).status == 2)
        #expect(try f.unpack(three, ["--health-check", "true", "--keep-previous", "no"]).status == 2)
    }

    @Test("a pending release is rolled back by the boot check after a restart, not in the boot it was installed in, nor once confirmed")
    func pendingAndConfirm() throws {
        let f = try Fixture()
        #expect(try f.unpack(try f.pack(1)).status == 0)
        try f.write("config.txt", "release 2\n")
        #expect(try f.unpack(try f.pack(2), ["--pending"]).status == 0)
        var status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect(status["pending"] as? Bool == true, "\(status)")
        // The same boot: nothing to do.
        let same = try CLI.run(["rollback", "--boot-check", f.dest])
        #expect(same.status == 0 && same.stdoutText.contains("nothing to roll back"), "\(same.stdoutText)")
        #expect(f.text("config.txt") == "release 2\n")
        // A mistyped DIR (issue 49, point 6): refused, exit 1, nothing made beside it; the real
        // DIR's release is still pending (it exited 0 with "nothing to confirm").
        let typo = f.dest + "-typo"
        let mistyped = try CLI.run(["confirm", typo, "--json"])
        #expect(mistyped.status == 1 && UpdateCLITests.code(mistyped) == "not-installed", "\(mistyped.stdoutText)")
        let beside = try FileManager.default.contentsOfDirectory(atPath: (f.dest as NSString).deletingLastPathComponent).filter { $0.contains("typo") }
        #expect(beside.isEmpty, "\(beside)")
        #expect(try CLI.run(["status", f.dest, "--json"]).json()["pending"] as? Bool == true)
        // Confirmed: stays across restarts; again: nothing to confirm, exit 0.
        let confirmed = try CLI.run(["confirm", f.dest, "--json"])
        let confirmedJSON = try confirmed.json()
        #expect(confirmed.status == 0 && (confirmedJSON["confirmed"] as? [String: Any])?["sequence"] as? Int == 2)
        status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect(status["pending"] as? Bool == false)
        let twice = try CLI.run(["confirm", f.dest])
        #expect(twice.status == 0 && twice.stdoutText.contains("nothing to confirm"), "\(twice.stdoutText)")

        // Pending again, then a restart (the record's boot id is another boot's): rolled back.
        try f.write("config.txt", "release 3\n")
        #expect(try f.unpack(try f.pack(3), ["--pending"]).status == 0)
        let record = f.work.directory.file(".app.signet-release")
        let text = try String(contentsOfFile: record, encoding: .utf8)
        let rebooted = text.replacingOccurrences(of: #""boot_id" : "[^"]*""#, with: #""boot_id" : "an-earlier-boot""#, options: .regularExpression)
        #expect(rebooted != text)
        try Data(rebooted.utf8).write(to: URL(fileURLWithPath: record))
        let boot = try CLI.run(["rollback", "--boot-check", f.dest, "--state", f.state, "--json"])
        let bootJSON = try boot.json()
        #expect(boot.status == 0 && bootJSON["rolled_back"] as? Bool == true, "\(boot.stdoutText) \(boot.stderr)")
        #expect(f.text("config.txt") == "release 2\n")
        #expect(try f.reverify() == 0)
        status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect(((status["last_rollback"] as? [String: Any])?["by"] as? String) == "boot-check", "\(status)")
        #expect(((status["bad"] as? [[String: Any]])?.first?["sequence"] as? Int) == 3)

        // A release replacing one that was never confirmed: the pending one is dropped, and the
        // previous release stays the last confirmed one.
        try f.write("config.txt", "release 4\n")
        #expect(try f.unpack(try f.pack(4), ["--pending"]).status == 0)
        try f.write("config.txt", "release 5\n")
        #expect(try f.unpack(try f.pack(5)).status == 0)
        status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect((status["previous"] as? [String: Any])?["sequence"] as? Int == 2 && status["pending"] as? Bool == false, "\(status)")
        #expect(try CLI.run(["rollback", f.dest, "--state", f.state]).status == 0)
        #expect(f.text("config.txt") == "release 2\n")
    }

    @Test("README, When a release is bad: the block runs as written (rollback, a failing health check, pending and confirm)")
    func readme() throws {
        let work = try TemporaryDirectory()
        let d = work.path
        let bin = work.file("bin")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try ReadmeBlocksTests.script(bin + "/systemctl", "echo \"systemctl $*\" >> \"\(d)/calls.txt\"")
        let setup = """
            set -e
            signet keygen --out keys --bits 2048 > /dev/null 2>&1
            mkdir -p dist && echo 'release 1.4.2' > dist/app.conf && echo 'library' > dist/lib.so
            signet pack dist --key keys/private_key.pem --name app --version 1.4.2 --sequence 142 --out app-1.4.2.zip > /dev/null
            for v in 1.5.0 1.5.1 1.5.2; do
              echo "release $v" > dist/app.conf
              signet pack dist --key keys/private_key.pem --name app --version $v --sequence $(echo $v | tr -d .) --out app-$v.zip > /dev/null
            done
            signet unpack app-1.4.2.zip --dest opt/app --pubkey keys/public_key.der > /dev/null
            """
        #expect(try run("bash", ["-c", setup], environment: ReadmeBlocksTests.environment(), directory: d).status == 0)
        let text = try ReadmeBlocksTests.block("release-bad").replacingOccurrences(of: "/opt/", with: d + "/opt/")
        let ran = try ReadmeBlocksTests.runBlock(text, in: d, environment: ReadmeBlocksTests.environment([bin]))
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("rolled back \(d)/opt/app from app 1.5.0 (sequence 150) to app 1.4.2 (sequence 142)"), "\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("1.5.1 was refused: exit 1") && ran.stderr.contains("health check failed"), "\(ran.stdoutText) \(ran.stderr)")
        #expect(ran.stdoutText.contains("confirmed app 1.5.2 (sequence 152)"), "\(ran.stdoutText)")
        let status = try CLI.run(["status", d + "/opt/app", "--json"]).json()
        #expect((status["current"] as? [String: Any])?["sequence"] as? Int == 152 && status["pending"] as? Bool == false, "\(status)")
        #expect((status["previous"] as? [String: Any])?["sequence"] as? Int == 142)
        #expect(((status["bad"] as? [[String: Any]])?.first?["sequence"] as? Int) == 151, "\(status)")
        #expect(try String(contentsOfFile: d + "/calls.txt", encoding: .utf8) == "systemctl enable signet-boot-check@app.service\n")
    }

    @Test("kill -9 at each step of a rollback, and inside a health check: DIR is one release, the record agrees, and the next command completes")
    func killed() throws {
        let f = try Fixture()
        #expect(try f.unpack(try f.pack(1)).status == 0)
        try f.write("config.txt", "release 2\n")
        #expect(try f.unpack(try f.pack(2)).status == 0)
        // strace delivers SIGKILL as the call is entered (with error=, it is not made at all).
        func rollbackKilled(_ inject: String) throws -> String {
            let call = String(inject.prefix { $0 != ":" })
            return try run(
                "bash",
                [
                    "-c", "strace \"$@\"; echo $?", "strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + call, "-e", "inject=" + inject,
                    CLI.binary, "rollback", f.dest, "--state", f.state
                ]
            ).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // Before the exchange: DIR still holds release 2, the previous release is intact, the
        // state (written first) is consistent with it; the rollback made again completes.
        let beforeExchange = try rollbackKilled("renameat2:signal=SIGKILL:error=EINTR")
        #expect(beforeExchange == "137")
        #expect(f.text("config.txt") == "release 2\n")
        #expect(try f.reverify() == 0)
        #expect(try CLI.run(["status", f.dest, "--json"]).json()["previous"] is [String: Any])
        #expect(try CLI.run(["rollback", f.dest, "--state", f.state]).status == 0)
        #expect(f.text("config.txt") == "release 1\n")
        #expect(try f.reverify() == 0)

        // While the release swapped out is removed: DIR holds release 1, the record (written
        // before the removal) names no previous release; the next install replaces what is left.
        try f.write("config.txt", "release 3\n")
        #expect(try f.unpack(try f.pack(3)).status == 0)
        let whileRemoving = try rollbackKilled("unlinkat:signal=SIGKILL:when=3")
        #expect(whileRemoving == "137")
        #expect(f.text("config.txt") == "release 1\n")
        #expect(try f.reverify() == 0)
        let status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect(status["previous"] is NSNull && ((status["bad"] as? [[String: Any]])?.first?["sequence"] as? Int) == 3, "\(status)")
        #expect(try CLI.run(["rollback", f.dest]).status == 1, "no previous release is pinned")
        try f.write("config.txt", "release 4\n")
        #expect(try f.unpack(try f.pack(4)).status == 0)
        let left = try FileManager.default.contentsOfDirectory(atPath: f.work.directory.path).filter {
            $0.hasPrefix(".app.signet-") && !isKeptBesideDestination($0)
        }
        #expect(left.isEmpty, "\(left)")
        #expect(try CLI.run(["status", f.dest, "--json"]).json()["previous"] is [String: Any])

        // Killed inside its health check (the check kills signet itself): the new release stays,
        // whole, with the previous one kept, recorded as unchecked: the next run checks it again
        // though DIR is up to date (and here it fails, so release 4 is swapped back).
        try f.write("config.txt", "release 5\n")
        let five = try f.pack(5)
        let crashed = try run(
            "bash",
            [
                "-c", "\"$@\"; echo $?", "bash", CLI.binary, "unpack", five, "--dest", f.dest, "--pubkey", f.work.publicDER,
                "--state", f.state, "--health-check", "sh -c 'kill -9 $PPID; sleep 5'"
            ])
        #expect(crashed.stdoutText.hasSuffix("137\n"), "killed by SIGKILL: \(crashed.stdoutText) \(crashed.stderr)")
        #expect(f.text("config.txt") == "release 5\n")
        #expect(try f.reverify() == 0)
        let passing = try f.unpack(five, ["--health-check", "true", "--json"])
        let passingJSON = try passing.json()
        #expect(passing.status == 0 && passingJSON["up_to_date"] as? Bool == true && (passingJSON["hooks"] as? [Any])?.count == 1, "\(passing.stdoutText)")
        // Passed: not checked again.
        let quiet = try f.unpack(five, ["--health-check", "false", "--json"])
        let quietJSON = try quiet.json()
        #expect(quiet.status == 0 && (quietJSON["hooks"] as? [Any])?.isEmpty == true, "\(quiet.stdoutText)")
        // Killed again, then the check fails on the next run: release 4 comes back.
        let again = try run(
            "bash",
            [
                "-c", "\"$@\"; echo $?", "bash", CLI.binary, "unpack", five, "--dest", f.dest, "--pubkey", f.work.publicDER,
                "--state", f.state, "--force", "--health-check", "sh -c 'kill -9 $PPID; sleep 5'"
            ])
        #expect(again.stdoutText.hasSuffix("137\n"), "\(again.stdoutText) \(again.stderr)")
        let failing = try f.unpack(five, ["--health-check", "false", "--json"])
        let failingJSON = try failing.json()
        #expect(failing.status == 1 && (failingJSON["error"] as? [String: Any])?["code"] as? String == "health-check-failed", "\(failing.stdoutText)")
        #expect(f.text("config.txt") == "release 4\n")
        #expect(try f.reverify() == 0)
    }

    @Test("signet update takes the same from its config file: a post-install command, a health check that swaps the previous release back")
    func updateConfig() throws {
        let p = try UpdateCLITests.Publisher("releases-config")
        try p.release(1)
        let log = p.work.directory.file("hook.log")
        let path = p.work.directory.file("app.conf")
        func config(healthCheck: String) throws {
            let text =
                p.configLines + """
                    post-install = "sh -c 'echo $SIGNET_EVENT $SIGNET_NEW_SEQUENCE >> \(log)'"
                    health-check = "\(healthCheck)"
                    health-timeout = "20s"
                    keep-previous = "yes"

                    """
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        }
        try config(healthCheck: "true")
        let first = try CLI.run(["update", "--config", path, "--json"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect((try first.json()["hooks"] as? [[String: Any]])?.count == 2)
        try p.release(2)
        try config(healthCheck: "sh -c 'exit 4'")
        let second = try CLI.run(["update", "--config", path, "--json"])
        #expect(second.status == 1 && UpdateCLITests.code(second) == "health-check-failed", "\(second.stdoutText)")
        #expect(p.installedText() == "release 1\n")
        #expect(try String(contentsOfFile: log, encoding: .utf8) == "install 1\ninstall 2\nrollback 1\n")
        // The channel still names release 2: held back, and the hourly run succeeds (issue 49,
        // point 5: it failed with bad-release until a higher sequence was published).
        let third = try CLI.run(["update", "--config", path, "--json"])
        let thirdJSON = try third.json()
        #expect(third.status == 0 && (thirdJSON["refused"] as? [String: Any])?["sequence"] as? Int == 2, "\(third.stdoutText)")
        #expect(thirdJSON["updated"] as? Bool == false && thirdJSON["update_available"] as? Bool == false, "\(thirdJSON)")
        let text = try CLI.run(["update", "--config", path])
        #expect(
            text.status == 0 && text.stdoutText.contains("held back") && text.stdoutText.contains("--retry-bad") && !text.stdoutText.contains("--force"),
            "\(text.stdoutText)")
        // status names the bad range above the running release, never "and lower" of it.
        let status = try CLI.run(["status", p.dest]).stdoutText
        #expect(status.contains("bad:      app sequence 2 — ") && !status.contains("and lower"), "\(status)")
        #expect(p.installedText() == "release 1\n")
        // --force is what it says (replace a DIR Signet did not install), not a retry.
        try config(healthCheck: "true")
        let forced = try CLI.run(["update", "--config", path, "--force", "--json"])
        let forcedRefused = try forced.json()["refused"] as? [String: Any]
        #expect(forced.status == 0 && forcedRefused != nil && p.installedText() == "release 1\n", "\(forced.stdoutText)")
        // --retry-bad installs it; the JSON says what DIR holds now, and what it replaced (point 14).
        let retried = try CLI.run(["update", "--config", path, "--retry-bad", "--json"])
        let retriedJSON = try retried.json()
        #expect(retried.status == 0 && p.installedText() == "release 2\n", "\(retried.stderr)")
        #expect(
            (retriedJSON["installed"] as? [String: Any])?["sequence"] as? Int == 2 && (retriedJSON["replaced"] as? [String: Any])?["sequence"] as? Int == 1,
            "\(retriedJSON)")
    }

    @Test(
        "issue 49, point 10: a rollback by hand or by its config runs the post-install command (event rollback); without --state, reverify --state accepts it; a DIR Signet did not install is refused without a --force hint"
    )
    func rollbackRunsPostInstall() throws {
        let f = try Fixture()
        let log = f.work.directory.file("events.log")
        let hook = "sh -c 'echo $SIGNET_EVENT $SIGNET_OLD_SEQUENCE $SIGNET_NEW_SEQUENCE >> \(log)'"
        #expect(try f.unpack(try f.pack(1)).status == 0)
        try f.write("config.txt", "release 2\n")
        #expect(try f.unpack(try f.pack(2)).status == 0)
        // By hand, without --state: the app hears of it, and reverify --state accepts DIR.
        let back = try CLI.run(["rollback", f.dest, "--post-install", hook, "--json"])
        let hooks = try back.json()["hooks"] as? [[String: Any]]
        #expect(back.status == 0 && hooks?.count == 1, "\(back.stdoutText) \(back.stderr)")
        #expect(try String(contentsOfFile: log, encoding: .utf8) == "rollback 2 1\n")
        #expect(try f.reverify() == 0)
        // By its config (what the boot unit runs): the config's post-install.
        try f.write("config.txt", "release 3\n")
        #expect(try f.unpack(try f.pack(3)).status == 0)
        let config = f.work.directory.file("app.conf")
        try Data(
            """
            repository = "https://updates.example.com/app/metadata/"
            tuf-metadata = "\(f.work.directory.file("metadata"))"
            channel = "stable"
            dest = "\(f.dest)"
            state = "\(f.state)"
            post-install = "\(hook)"

            """.utf8
        ).write(to: URL(fileURLWithPath: config))
        let byConfig = try CLI.run(["rollback", "--config", config])
        #expect(byConfig.status == 0 && byConfig.stdoutText.contains("post-install: exit 0"), "\(byConfig.stdoutText) \(byConfig.stderr)")
        #expect(try String(contentsOfFile: log, encoding: .utf8) == "rollback 2 1\nrollback 3 1\n")
        // A mistyped DIR: refused as what it is, no --force (rollback has none).
        let other = f.work.directory.file("other")
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: other + "/x"))
        let wrong = try CLI.run(["rollback", other])
        #expect(wrong.status == 1 && wrong.stderr.contains("holds no release Signet installed") && !wrong.stderr.contains("--force"), "\(wrong.stderr)")
    }

    @Test("a swap that fails leaves the record as it was: a release that was pending stays pending")
    func failedSwapKeepsPending() throws {
        let f = try Fixture()
        #expect(try f.unpack(try f.pack(1)).status == 0)
        try f.write("config.txt", "release 2\n")
        #expect(try f.unpack(try f.pack(2), ["--pending"]).status == 0)
        try f.write("config.txt", "release 3\n")
        let three = try f.pack(3)
        // The exchange fails (EIO injected into renameat2): exit 5, DIR still release 2, pending.
        // (LeakSanitizer cannot run under ptrace: off for this one traced run of an ASan build.)
        let failed = try run(
            "strace",
            [
                "-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat2", "-e", "inject=renameat2:error=EIO",
                CLI.binary, "unpack", three, "--dest", f.dest, "--pubkey", f.work.publicDER, "--state", f.state, "--pending"
            ],
            environment: sanitizerOptions(adding: "detect_leaks=0"))
        #expect(failed.status == 5, "\(failed.stderr)")
        #expect(f.text("config.txt") == "release 2\n")
        let status = try CLI.run(["status", f.dest, "--json"]).json()
        #expect(status["pending"] as? Bool == true && (status["current"] as? [String: Any])?["sequence"] as? Int == 2, "\(status)")
    }
}
