import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// What an install does to DIR and beside it whatever happens: folders and files it may not read,
/// locks others hold or plant, other products, paths past PATH_MAX, full or read-only
/// filesystems, trees it cannot remove. DIR is as it was, or the new release; nothing is left.
@Suite("Destinations: what Signet replaces, locks, and leaves when it cannot")
struct DestinationCLITests {
    @Test("a destination the user may not read is exit 5 with Signet's message, no Foundation text")
    func unreadableDestination() throws {
        guard getuid() == 0 else {
            print("skipped: needs root to act as nobody with setpriv")
            return
        }
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        chmod(work.path, 0o755)
        chmod(work.keys, 0o755)
        chmod(package, 0o644)
        let locked = work.directory.file("locked")
        try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: true)
        try work.directory.write("locked/mine.txt", Data("root's\n".utf8))
        chmod(locked, 0o700)
        let result = try run(
            "setpriv",
            [
                "--reuid=nobody", "--regid=nogroup", "--clear-groups", CLI.binary, "unpack", package,
                "--dest", locked, "--pubkey", work.publicDER, "--json"
            ])
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        #expect(
            !result.stderr.contains("NSCocoaErrorDomain") && !result.stderr.contains("Code=") && result.stderr.contains("permission denied"), "\(result.stderr)"
        )
        #expect((try result.json()["error"] as? [String: Any])?["code"] as? String == "permission-denied")
    }

    @Test("an installed tree whose certificates cannot be read is an error (exit 5), never a chain quietly dropped")
    func unreadableCertificates() throws {
        guard getuid() == 0 else {
            print("skipped: needs root to act as nobody with setpriv")
            return
        }
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, extra: ["--cert", work.certificate], out: package)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        chmod(work.path, 0o755)
        chmod(work.keys, 0o755)
        let asNobody = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", CLI.binary, "reverify", dest, "--pubkey", work.publicDER, "--json"]
        #expect(try run("setpriv", asNobody).status == 0, "readable: verifies")
        chmod(dest + "/.signet/certs", 0o000)
        let result = try run("setpriv", asNobody)
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        let error = try #require(try result.json()["error"] as? [String: Any], "\(result.stdoutText)")
        #expect(error["code"] as? String == "permission-denied")
        #expect(error["errno"] as? Int == 13, "EACCES, with the call that failed: \(error)")
        #expect(error["call"] != nil)
        chmod(dest + "/.signet/certs", 0o755)
    }

    @Test("unpack ignores the umask: folders 0755, files the manifest's 0644/0755; --state leaves no lock file beside it")
    func modesAndStateLock() throws {
        let work = try Workspace()
        try FileManager.default.createDirectory(atPath: work.directory.file("src/bin/deep"), withIntermediateDirectories: true)
        try work.directory.write("src/bin/deep/tool", Data("#!/bin/sh\n".utf8), mode: 0o755)
        try work.directory.write("src/app.conf", Data("x\n".utf8))
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let app = work.directory.file("app"), state = work.directory.file("state.json")
        let result = try run(
            "sh", ["-c", "umask 077; exec \"$@\"", "sh", CLI.binary, "unpack", package, "--dest", app, "--pubkey", work.publicDER, "--state", state])
        #expect(result.status == 0, "\(result.stderr)")
        func mode(_ path: String) throws -> Int { (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1 }
        #expect(try mode(app) == 0o755)
        #expect(try mode(app + "/bin") == 0o755)
        #expect(try mode(app + "/bin/deep") == 0o755)
        #expect(try mode(app + "/.signet") == 0o755)
        #expect(try mode(app + "/bin/deep/tool") == 0o755)
        #expect(try mode(app + "/app.conf") == 0o644)
        #expect(FileManager.default.fileExists(atPath: state))
        #expect(!FileManager.default.fileExists(atPath: state + ".lock"), "the state file locks itself")
        let siblings = try FileManager.default.contentsOfDirectory(atPath: work.path).filter { $0.hasPrefix(".") }.sorted()
        #expect(siblings == [".app.signet-lock", ".app.signet-release"], "the documented lock file and release record beside DIR, nothing else: \(siblings)")
    }

    @Test("install, reverify and pack below a path longer than PATH_MAX, from a working directory above it")
    func longRelativePaths() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        var relative = ""
        while relative.utf8.count < 4_300 { relative += (relative.isEmpty ? "" : "/") + String(repeating: "p", count: 250) }
        // Made one folder at a time: the whole relative path is too long for mkdir -p.
        let made = try run(
            "python3",
            ["-c", "import os, sys\nos.chdir(sys.argv[1])\nfor part in sys.argv[2].split('/'):\n    os.mkdir(part); os.chdir(part)", work.path, relative])
        #expect(made.status == 0, "\(made.stderr)")
        let dest = relative + "/app"
        let unpack = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER], directory: work.path)
        #expect(unpack.status == 0, "\(unpack.stderr)")
        let reverify = try CLI.run(["reverify", dest, "--pubkey", work.publicDER], directory: work.path)
        #expect(reverify.status == 0, "\(reverify.stdoutText) \(reverify.stderr)")
        let again = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER], directory: work.path)
        #expect(again.status == 0, "replacing it works too: \(again.stderr)")
        let pack = try CLI.run(
            [
                "pack", dest + "/app.conf", "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "re", "--version", "1",
                "--out", "repacked.zip"
            ], directory: work.path)
        #expect(pack.status == 0, "\(pack.stderr)")
    }

    @Test("a replaced tree that cannot be removed is warned about, reported in JSON, and removed by the next unpack")
    func leftoverReported() throws {
        let work = try Workspace()
        try FileManager.default.createDirectory(atPath: work.directory.file("src/busy"), withIntermediateDirectories: true)
        try work.directory.write("src/busy/file.txt", Data("x\n".utf8))
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        // A mount inside the installed tree: the old tree moves with it and cannot be removed.
        guard let mount = try ScratchMount.mount("tmpfs", options: "size=1m", at: app + "/busy-mount", untested: "a leftover old tree") else { return }
        defer { mount.unmount() }
        // --force: the same release again is otherwise "up to date", with nothing swapped.
        // --keep-previous no: the replaced tree is removed rather than kept for a rollback.
        let replaced = try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER, "--force", "--keep-previous", "no", "--json"])
        #expect(replaced.status == 0, "the install itself succeeded: \(replaced.stderr)")
        let leftover = try #require(try replaced.json()["leftover"] as? String)
        #expect(replaced.stderr.contains("signet: warning:") && replaced.stderr.contains("could not be removed"), "\(replaced.stderr)")
        #expect(FileManager.default.fileExists(atPath: leftover))
        #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER]).status == 0, "the new tree is whole")
        #expect(try run("umount", [leftover + "/busy-mount"]).status == 0)
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: leftover), "the next unpack removed it")
    }

    @Test("a replaced tree with a read-only folder is removed by an unprivileged unpack (nothing left, no warning)")
    func readOnlyFolderRemoved() throws {
        guard getuid() == 0 else {
            print("skipped: needs root to act as nobody with setpriv")
            return
        }
        let work = try Workspace()
        try FileManager.default.createDirectory(atPath: work.directory.file("src/sub"), withIntermediateDirectories: true)
        try work.directory.write("src/sub/file.txt", Data("x\n".utf8))
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        for path in [work.path, work.keys] { chmod(path, 0o755) }
        chmod(package, 0o644)
        let home = work.directory.file("nobody")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        chown(home, 65534, 65534)
        let unpack = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", CLI.binary, "unpack", package, "--dest", home + "/app", "--pubkey", work.publicDER]
        #expect(try run("setpriv", unpack).status == 0)
        #expect(try run("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "chmod", "0555", home + "/app/sub"]).status == 0)
        let again = try run("setpriv", unpack)
        #expect(again.status == 0 && !again.stderr.contains("warning"), "\(again.status) \(again.stderr)")
        let left = try FileManager.default.contentsOfDirectory(atPath: home).filter { $0 != "app" && !isKeptBesideDestination($0) }
        #expect(left.isEmpty, "the old tree with its 0555 folder was removed: \(left)")
    }

    @Test("no space, no inodes, a read-only filesystem: exit 5, DIR exactly as it was, nothing left")
    func environmentFailuresLeaveDestination() throws {
        let work = try Workspace()
        try FileManager.default.createDirectory(atPath: work.directory.file("small"), withIntermediateDirectories: true)
        try work.directory.write("small/version.txt", Data("1\n".utf8))
        let small = work.directory.file("small.zip")
        #expect(
            try CLI.run([
                "pack", work.directory.file("small"), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                "--name", "app", "--version", "1", "--sequence", "1", "--out", small
            ]).status == 0)
        try FileManager.default.createDirectory(atPath: work.directory.file("big"), withIntermediateDirectories: true)
        for index in 0..<40 { _ = try work.directory.writeRandom("big/f\(index).bin", count: 64 << 10) }
        let big = work.directory.file("big.zip")
        #expect(
            try CLI.run([
                "pack", work.directory.file("big"), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                "--name", "app", "--version", "2", "--sequence", "2", "--out", big
            ]).status == 0)
        for (options, what) in [("size=1m", "no-space"), ("size=64m,nr_inodes=24", "no-inodes"), ("size=64m", "read-only")] {
            guard let mount = try ScratchMount.mount("tmpfs", options: options, at: work.directory.file("mnt-" + what), untested: what) else { return }
            defer { mount.unmount() }
            let app = mount.path + "/app"
            #expect(try CLI.run(["unpack", small, "--dest", app, "--pubkey", work.publicDER]).status == 0, "\(what): the small tree fits")
            if what == "read-only" { #expect(try run("mount", ["-o", "remount,ro", mount.path]).status == 0) }
            let result = try CLI.run(["unpack", big, "--dest", app, "--pubkey", work.publicDER, "--json"])
            if what == "read-only" { _ = try run("mount", ["-o", "remount,rw", mount.path]) }
            #expect(result.status == 5, "\(what): \(result.status) \(result.stderr)")
            #expect(try String(decoding: contents(app + "/version.txt"), as: UTF8.self) == "1\n", "\(what): DIR unchanged")
            #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER]).status == 0, "\(what): DIR is still the whole old tree")
            let left = try FileManager.default.contentsOfDirectory(atPath: mount.path).filter { $0 != "app" && !isKeptBesideDestination($0) }
            #expect(left.isEmpty, "\(what): nothing left: \(left)")
        }
    }

    @Test("a lock file planted and held by another user never puts words in Signet's mouth; a refused first install leaves no lock")
    func plantedLock() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("a\n".utf8)], out: package)
        let lock = work.directory.file(".dest.signet-lock")
        if geteuid() == 0 {
            chmod(work.directory.path, 0o777)
            // Another user makes the lock file, writes a process id into it and holds it.
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            // sh and flock(1), not python3: a python3 under /root (pyenv) cannot run as nobody.
            holder.arguments = [
                "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c",
                "exec 9> '\(lock)' && printf '4242\\n' >&9 && flock --exclusive 9 && exec sleep 30"
            ]
            try holder.run()
            defer { holder.terminate(); kill(holder.processIdentifier, SIGKILL); holder.waitUntilExit() }
            let deadline = Date().addingTimeInterval(10)
            while !FileManager.default.fileExists(atPath: lock) && Date() < deadline { usleep(20_000) }
            usleep(200_000)
            // The other user really holds it: a non-blocking flock from here is refused.
            let held = try run("flock", ["--exclusive", "--nonblock", lock, "true"])
            try #require(held.status != 0, "the planted lock must be held by the other user: \(held.stderr)")
            // The key from a folder only root writes: the 0777 folder would (rightly) make it untrustworthy.
            let keys = try TemporaryDirectory()
            try FileManager.default.copyItem(atPath: work.publicDER, toPath: keys.file("public_key.der"))
            let installed = try CLI.run(["unpack", package, "--dest", work.directory.file("dest"), "--pubkey", keys.file("public_key.der"), "--wait", "0"])
            #expect(installed.status == 0, "the planted lock is not Signet's: \(installed.stderr)")
            #expect(!installed.stderr.contains("4242"))
            let owner = try FileManager.default.attributesOfItem(atPath: lock)[.ownerAccountID] as? Int
            #expect(owner == 0, "the lock beside DIR is Signet's own now")
        }
        // A refused install into a DIR that did not exist leaves no lock beside it.
        let other = try Workspace()
        let refused = try CLI.run(["unpack", package, "--dest", work.directory.file("never"), "--pubkey", other.publicDER])
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file(".never.signet-lock")))
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("never")))
    }

    @Test("--dest . from inside an installed tree updates it; a second unpack URL waits for the first (--wait) and names its process")
    func destDotAndDownloadWait() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: v1)
        try CLIHelpers.pack(work, ["a.txt": Data("two\n".utf8), "big.bin": CLIHelpers.randomData(600_000)], sequence: 2, out: v2)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let dot = try CLI.run(["unpack", v2, "--dest", ".", "--pubkey", work.publicDER], directory: dest)
        #expect(dot.status == 0, "\(dot.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "two\n")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // The first download pauses after 100 KB until the test lets it go on (a server that
        // pauses, not a throttled one): it holds DIR's lock all that while.
        let server = try ScriptedServer(script: ["v2.zip": [.init(pauses: [.init(after: 100_000)]), .init()]])
        try FileManager.default.copyItem(atPath: v2, toPath: server.file("v2.zip"))
        let fresh = work.directory.file("fresh")
        let arguments = ["unpack", server.url("v2.zip"), "--dest", fresh, "--pubkey", work.publicDER, "--allow-http"]
        func start(_ extra: [String]) throws -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CLI.binary)
            process.arguments = arguments + extra
            process.standardError = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            return process
        }
        let first = try start([])
        #expect(server.awaitPause(), "the first download is in flight")
        let lockFile = work.directory.file(".fresh.signet-lock")
        let deadline = Date().addingTimeInterval(30)
        while (try? contents(lockFile))?.isEmpty ?? true && first.isRunning && Date() < deadline { usleep(10_000) }
        let busy = try CLI.run(arguments + ["--wait", "0"])
        #expect(busy.status == 5, "\(busy.stderr)")
        #expect(busy.stderr.contains("process \(first.processIdentifier)"), "\(busy.stderr)")
        let waiting = try start(["--wait", "60"])
        // (The second is started before the first may go on: it finds the lock held and waits.)
        usleep(100_000)
        #expect(waiting.isRunning, "it waits while the first holds the lock")
        try server.release()
        first.waitUntilExit()
        waiting.waitUntilExit()
        #expect(first.terminationStatus == 0)
        #expect(waiting.terminationStatus == 0, "waits for the first, then installs (the same sequence again)")
        #expect(try String(contentsOfFile: fresh + "/a.txt", encoding: .utf8) == "two\n")
    }

    @Test(
        "another product's validly signed package does not replace an installed tree (exit 1, other-package) unless --change-package; nor across --state or from a bare package"
    )
    func otherProduct() throws {
        let work = try Workspace()
        let app = work.directory.file("app.zip"), other = work.directory.file("other.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("app\n".utf8)], name: "app", sequence: 5, out: app)
        try CLIHelpers.pack(work, ["a.txt": Data("other\n".utf8)], name: "other", sequence: 9, out: other)
        let dest = work.directory.file("dest"), state = work.directory.file("state.json")
        #expect(try CLI.run(["unpack", app, "--dest", dest, "--pubkey", work.publicDER, "--state", state]).status == 0)
        let refused = try CLI.run(["unpack", other, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(CLIHelpers.errorCode(refused) == "other-package")
        #expect(refused.stderr.contains("'app'") && refused.stderr.contains("'other'"), "names both: \(refused.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "app\n")
        // A bare package (no name) over a tree from a signed manifest: refused the same way.
        let bare = try CLIHelpers.barePackage(work)
        let bareRefused = try CLI.run(["unpack", bare, "--dest", dest, "--bare", "--pubkey", work.publicDER, "--json"])
        #expect(bareRefused.status == 1 && CLIHelpers.errorCode(bareRefused) == "other-package", "\(bareRefused.stderr)")
        // The state remembers the destination's product even when the tree is gone.
        try FileManager.default.removeItem(atPath: dest)
        let gone = try CLI.run(["unpack", other, "--dest", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(gone.status == 1 && CLIHelpers.errorCode(gone) == "other-package", "\(gone.stderr)")
        #expect(gone.stderr.contains(state), "says where it is recorded: \(gone.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dest))
        // Asked for: the destination changes product, and the state records it.
        let changed = try CLI.run(["unpack", other, "--dest", dest, "--pubkey", work.publicDER, "--state", state, "--change-package"])
        #expect(changed.status == 0, "\(changed.stderr)")
        let recorded = try JSONSerialization.jsonObject(with: try contents(state)) as? [String: Any]
        let destinations = recorded?["destinations"] as? [String: [String: Any]]
        let entry = destinations?.values.first
        #expect(recorded?["format"] as? String == "signet-state/2")
        let stateText = String(decoding: try contents(state), as: UTF8.self)
        #expect(entry?["name"] as? String == "other" && entry?["changed_from"] as? String == "app", "\(stateText)")
        #expect((recorded?["packages"] as? [String: Any])?["app"] as? Int == 5)
        // The first state format is still read.
        let old = try work.directory.write("old-state.json", Data("{\"app\": 7}\n".utf8))
        let rolled = try CLI.run(["unpack", app, "--dest", work.directory.file("d2"), "--pubkey", work.publicDER, "--state", old, "--json"])
        #expect(rolled.status == 1 && CLIHelpers.errorCode(rolled) == "rollback", "\(rolled.stderr)")
    }

    @Test("point 6: a read-only DIR under the systemd unit names the ReadWritePaths= drop-in")
    func readOnlyUnderSystemd() throws {
        let work = try Workspace()
        let package = try CLIHelpers.package(work)
        let readOnly = work.directory.file("ro")
        try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: true)
        #expect(try SignetTestSupport.run("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", readOnly]).status == 0)
        defer { _ = try? SignetTestSupport.run("umount", [readOnly]) }
        let dest = readOnly + "/app"

        // Outside systemd: the filesystem is read-only.
        let plain = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER], environment: ["INVOCATION_ID": nil])
        #expect(plain.status == 5 && plain.stderr.contains("remount it read-write"), "\(plain.stderr)")

        // As systemd runs the unit: $INVOCATION_ID set, in the unit's cgroup.
        let (root, mountedHere) = try CLIHelpers.cgroup2Root(work)
        defer { if mountedHere { _ = try? SignetTestSupport.run("umount", [root]) } }
        let cgroup = root + "/signet-test-\(getpid()).slice/signet-update@app.service"
        try FileManager.default.createDirectory(atPath: cgroup, withIntermediateDirectories: true)
        defer { _ = rmdir(cgroup); _ = rmdir((cgroup as NSString).deletingLastPathComponent) }
        let script = "echo $$ > '\(cgroup)/cgroup.procs' && exec \"$@\""
        let unit = try SignetTestSupport.run(
            "sh", ["-c", script, "sh", CLI.binary, "unpack", package, "--dest", dest, "--pubkey", work.publicDER],
            environment: ["INVOCATION_ID": "0123456789abcdef0123456789abcdef"])
        #expect(unit.status == 5, "\(unit.stderr)")
        #expect(unit.stderr.contains("systemctl edit signet-update@app.service") && unit.stderr.contains("ReadWritePaths=\(readOnly)"), "\(unit.stderr)")
        #expect(!unit.stderr.contains("remount"), "\(unit.stderr)")
    }

    @Test("--case-insensitive-dest refuses paths one case-insensitive filesystem would merge, before writing")
    func caseInsensitive() throws {
        let work = try Workspace()
        for (name, files) in [
            ("two-files", ["Readme.txt", "README.TXT"]), ("file-and-folder", ["Docs", "docs/x.txt"]), ("nfd", ["Caf\u{e9}.txt", "cafe\u{301}.TXT"])
        ] {
            let root = work.directory.file(name)
            for file in files {
                let path = root + "/" + file
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data(file.utf8).write(to: URL(fileURLWithPath: path))
            }
            let package = work.directory.file(name + ".zip")
            let packed = try CLI.run([
                "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", name, "--version", "1", "--out", package
            ])
            guard packed.status == 0 else {
                // NFC/NFD twins are refused by pack itself.
                #expect(name == "nfd", "\(packed.stderr)")
                continue
            }
            let dest = work.directory.file("dest-" + name)
            // A case-sensitive filesystem takes it as it is; the flag refuses it, writing nothing.
            let refused = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--case-insensitive-dest"])
            #expect(refused.status == 4, "\(name): \(refused.stderr)")
            #expect(refused.stderr.contains("case-insensitive"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dest))
            #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        }
        // Folders that differ only in case merge without loss: allowed.
        let root = work.directory.file("folders")
        for file in ["Img/a.png", "img/b.png"] {
            try FileManager.default.createDirectory(atPath: (root + "/" + file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(file.utf8).write(to: URL(fileURLWithPath: root + "/" + file))
        }
        let package = work.directory.file("folders.zip")
        #expect(
            try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "f", "--version", "1", "--out", package]).status
                == 0)
        #expect(
            try CLI.run(["unpack", package, "--dest", work.directory.file("dest-folders"), "--pubkey", work.publicDER, "--case-insensitive-dest"]).status == 0)
    }

}
