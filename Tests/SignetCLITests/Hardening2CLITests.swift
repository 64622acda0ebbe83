import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 25: attacks on the device side that once passed.
@Suite("Hardening 2: retried downloads, planted partials, Unicode twins, relabelled trees, other products")
struct Hardening2CLITests {
    /// One nginx for the suite (issue 50: no server started per test); each test serves its own paths.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer() }

    /// Packs `files` (name → bytes) as package `name` `sequence` into `out`.
    static func pack(_ work: Workspace, _ files: [String: Data], name: String = "app", sequence: Int = 1, out: String, extra: [String] = []) throws {
        let tree = try TemporaryDirectory()
        for (path, data) in files {
            let full = tree.file(path)
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try data.write(to: URL(fileURLWithPath: full))
        }
        let packed = try CLI.run(["pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", name, "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out] + extra)
        guard packed.status == 0 else { throw SupportError("pack failed: \(packed.stderr)") }
    }

    static func randomData(_ count: Int) -> Data { Data(try! randomBytes(count)) }

    // MARK: Point 7: a retried download restarts its hash

    @Test("fetch --signature: a retry that starts over hashes only the new attempt (hostile suffix refused, honest retry verified)")
    func retriedFetchHash() throws {
        let work = try Workspace()
        let body = Self.randomData(300_000)
        let cut = 100_000
        // Hostile: the first K bytes, a cut; the retry is answered with 200 and only the rest.
        let hostile = try ScriptedServer(script: ["fw.bin": [.init(length: body.count, cutAfter: cut), .init(from: cut)]])
        try body.write(to: URL(fileURLWithPath: hostile.file("fw.bin")))
        #expect(try CLI.run(["sign", hostile.file("fw.bin"), "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let out = work.directory.file("fw.bin")
        let refused = try CLI.run(["fetch", hostile.url("fw.bin"), "--out", out, "--signature", hostile.url("fw.bin.sig"),
                                   "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
        #expect(refused.status == 1, "a suffix of the signed file must not verify: \(refused.status) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out), "nothing renamed into place")
        #expect(hostile.requests.filter { $0.hasPrefix("fw.bin ") }.count == 2, "\(hostile.requests)")

        // Honest: the connection drops once, the retry sends the whole file again.
        let honest = try ScriptedServer(script: ["fw.bin": [.init(length: body.count, cutAfter: cut), .init()]])
        try body.write(to: URL(fileURLWithPath: honest.file("fw.bin")))
        try FileManager.default.copyItem(atPath: hostile.file("fw.bin.sig"), toPath: honest.file("fw.bin.sig"))
        let verified = try CLI.run(["fetch", honest.url("fw.bin"), "--out", out, "--signature", honest.url("fw.bin.sig"),
                                    "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
        #expect(verified.status == 0, "a genuine file after one dropped connection verifies: \(verified.stderr)")
        #expect(try contents(out) == body)
        #expect(honest.requests.filter { $0.hasPrefix("fw.bin ") }.count == 2, "\(honest.requests)")
    }

    @Test("unpack URL and inspect URL after a dropped connection: the honest retry installs, the hostile suffix is refused")
    func retriedPackageDownloads() throws {
        let work = try Workspace()
        let staging = try TemporaryDirectory()
        let package = staging.file("app.zip")
        try Self.pack(work, ["a.bin": Self.randomData(150_000), "b.bin": Self.randomData(150_000)], out: package)
        let size = try contents(package).count
        let cut = size / 3
        for (honest, name) in [(true, "honest"), (false, "hostile")] {
            let retry: ScriptedServer.Answer = honest ? .init() : .init(from: cut)
            let server = try ScriptedServer(script: ["app.zip": [.init(length: size, cutAfter: cut), retry,
                                                                  .init(length: size, cutAfter: cut), retry]])
            try FileManager.default.copyItem(atPath: package, toPath: server.file("app.zip"))
            let dest = work.directory.file("dest-" + name)
            let unpack = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
            let inspect = try CLI.run(["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
            if honest {
                #expect(unpack.status == 0, "\(unpack.stderr)")
                #expect(inspect.status == 0, "\(inspect.stderr)")
            } else {
                #expect(unpack.status != 0 && !FileManager.default.fileExists(atPath: dest), "\(unpack.status) \(unpack.stderr)")
                #expect(inspect.status != 0, "\(inspect.stderr)")
            }
            // Nothing beside DIR: no download, and no lock beside a DIR that was never made.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: work.directory.path)
                .filter { $0.contains("signet-") && !isKeptBesideDestination($0) }
            #expect(leftovers.isEmpty, "\(leftovers)")
        }
    }
    // MARK: Point 8: sealed names compared as bytes

    @Test("a sealed trust directory: a key added under the KELVIN SIGN twin of a sealed name is caught (exit 3)")
    func sealTwins() throws {
        let work = try Workspace(), attacker = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/Key.der")
        let salt = try work.directory.write("salt", Data("device secret\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        let evil = attacker.directory.file("evil.zip")
        try TrustCLITests.pack(attacker, out: evil)
        // The attacker's key under "\u{212A}ey.der": canonically equal to "Key.der", another file.
        try FileManager.default.copyItem(atPath: attacker.publicDER, toPath: trust + "/\u{212A}ey.der")
        #expect(try FileManager.default.contentsOfDirectory(atPath: trust).filter { $0.hasSuffix(".der") }.count == 2)
        let dest = work.directory.file("app")
        let refused = try CLI.run(["unpack", evil, "--dest", dest, "--trust-dir", trust, "--trust-salt-file", salt, "--json"])
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect((try? refused.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        #expect(refused.stderr.contains("was added"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dest))
        // inspect reads the trust directory the same way.
        let inspect = try CLI.run(["inspect", evil, "--trust-dir", trust, "--trust-salt-file", salt])
        #expect(inspect.status == 3, "\(inspect.stderr)")
    }
    // MARK: Point 10: planted partial downloads and lock files

    /// Runs `arguments` as uid/gid `uid` (setpriv); nil when not root.
    static func asUser(_ uid: Int, _ executable: String, _ arguments: [String]) throws -> ProcessResult? {
        guard geteuid() == 0 else { return nil }
        return try run("setpriv", ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", executable] + arguments)
    }

    @Test("a partial download planted by another user in a shared folder is never used: root replaces it, another user is refused")
    func plantedPartials() throws {
        guard geteuid() == 0 else { print("skipped: needs root to act as other users"); return }
        let work = try Workspace()
        let body = Self.randomData(200_000)
        let server = try ScriptedServer(script: [:])
        try body.write(to: URL(fileURLWithPath: server.file("fw.bin")))
        #expect(try CLI.run(["sign", server.file("fw.bin"), "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        // A shared sticky folder, as /tmp is.
        let shared = work.directory.file("shared")
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        chmod(work.directory.path, 0o755)
        chmod(shared, 0o1777)
        // Another user plants the partial: mode 0666, with the first bytes of the file.
        let planted = shared + "/.fw.bin.signet-download"
        let plant = try Self.asUser(65534, "/bin/sh", ["-c", "umask 0; head -c 1000 /dev/zero > '\(planted)'; chmod 666 '\(planted)'"])
        #expect(plant?.status == 0, "\(plant?.stderr ?? "")")
        let out = shared + "/fw.bin"
        let fetched = try CLI.run(["fetch", server.url("fw.bin"), "--out", out, "--signature", server.url("fw.bin.sig"),
                                   "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(try contents(out) == body)
        let info = try FileManager.default.attributesOfItem(atPath: out)
        #expect((info[.ownerAccountID] as? Int) == 0, "the file is root's, not the planting user's: \(info)")
        #expect(((info[.posixPermissions] as? Int) ?? 0) & 0o022 == 0, "not writable by others")
        #expect(!FileManager.default.fileExists(atPath: planted))

        // A user who cannot remove another user's file in a sticky folder is refused (exit 5).
        let again = try Self.asUser(65534, "/bin/sh", ["-c", "umask 0; head -c 1000 /dev/zero > '\(planted)'"])
        #expect(again?.status == 0)
        try FileManager.default.moveItem(atPath: planted, toPath: shared + "/.fw2.bin.signet-download")
        let denied = try Self.asUser(65533, CLI.binary, ["fetch", server.url("fw.bin"), "--out", shared + "/fw2.bin", "--allow-http", "--json"])
        #expect(denied?.status == 5, "\(denied?.status ?? -1) \(denied?.stderr ?? "")")
        #expect(denied?.stderr.contains("not a download this user made") == true, "\(denied?.stderr ?? "")")
        #expect(!FileManager.default.fileExists(atPath: shared + "/fw2.bin"))
    }

    @Test("inspect URL downloads into a private folder: a planted file at the old predictable name is never read")
    func inspectPrivateFolder() throws {
        let work = try Workspace()
        let server = try ScriptedServer(script: [:])
        try Self.pack(work, ["a.txt": Data("genuine\n".utf8)], sequence: 7, out: server.file("app.zip"))
        let tmp = work.directory.file("tmp")
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
        // An older signed package planted where inspect once downloaded to, with a record that
        // claims it is a partial download of the URL.
        let old = work.directory.file("old.zip")
        try Self.pack(work, ["a.txt": Data("old\n".utf8)], sequence: 3, out: old)
        let url = server.url("app.zip")
        let hash = try run("bash", ["-c", "printf %s '\(url)' | sha256sum | head -c 16"]).stdoutText
        let planted = tmp + "/signet-download-" + hash
        try FileManager.default.copyItem(atPath: old, toPath: planted)
        let inspected = try CLI.run(["inspect", url, "--pubkey", work.publicDER, "--allow-http", "--json"], environment: ["TMPDIR": tmp])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        #expect((try inspected.json()["sequence"] as? Int) == 7, "the served package, not the planted one: \(inspected.stdoutText)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp) == ["signet-download-" + hash], "nothing of inspect's is left")
    }

    @Test("a lock file planted and held by another user never puts words in Signet's mouth; a refused first install leaves no lock")
    func plantedLock() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try Self.pack(work, ["a.txt": Data("a\n".utf8)], out: package)
        let lock = work.directory.file(".dest.signet-lock")
        if geteuid() == 0 {
            chmod(work.directory.path, 0o777)
            // Another user makes the lock file, writes a process id into it and holds it.
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            // sh and flock(1), not python3: a python3 under /root (pyenv) cannot run as nobody.
            holder.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c",
                                "exec 9> '\(lock)' && printf '4242\\n' >&9 && flock --exclusive 9 && exec sleep 30"]
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

    // MARK: Points 3, 4, 5: leftovers, --dest ., the download waits

    @Test("nothing is left after a TLS refusal or an HTTP error; a finished fetch carries no partial-download attribute")
    func noLeftovers() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        _ = try server.directory.writeRandom("www/file.bin", count: 100_000)
        try Self.pack(work, ["a.txt": Data("a\n".utf8)], out: server.www + "/app.zip")
        let dir = work.directory.path
        func leftovers() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix(".") && $0.contains("signet-") } }
        // TLS refused: the server's chain is not under this root.
        let fetchRefused = try CLI.run(["fetch", server.url("file.bin"), "--out", dir + "/file.bin", "--tls-ca", server.otherRoot])
        #expect(fetchRefused.status == 3, "\(fetchRefused.stderr)")
        let unpackRefused = try CLI.run(["unpack", server.url("app.zip"), "--dest", dir + "/app", "--pubkey", work.publicDER, "--tls-ca", server.otherRoot])
        #expect(unpackRefused.status == 3, "\(unpackRefused.stderr)")
        let notFound = try CLI.run(["unpack", server.url("missing.zip"), "--dest", dir + "/app", "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(notFound.status == 5, "\(notFound.stderr)")
        #expect(try leftovers() == [])
        // A finished fetch: the file has no user.signet.download.
        let fetched = try CLI.run(["fetch", server.url("file.bin"), "--out", dir + "/file.bin", "--tls-ca", server.root])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        let attributes = try run("getfattr", ["-d", "-m", "-", dir + "/file.bin"]).stdoutText
        #expect(!attributes.contains("user.signet.download"), "\(attributes)")
        #expect(try leftovers() == [])
    }

    @Test("--dest . from inside an installed tree updates it; a second unpack URL waits for the first (--wait) and names its process")
    func destDotAndDownloadWait() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try Self.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: v1)
        try Self.pack(work, ["a.txt": Data("two\n".utf8), "big.bin": Self.randomData(600_000)], sequence: 2, out: v2)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let dot = try CLI.run(["unpack", v2, "--dest", ".", "--pubkey", work.publicDER], directory: dest)
        #expect(dot.status == 0, "\(dot.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "two\n")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // nginx sends /slow/ at 200 KiB/s: the first download takes about 3 s.
        try FileManager.default.copyItem(atPath: v2, toPath: server.www + "/slow/v2.zip")
        let fresh = work.directory.file("fresh")
        let first = Process()
        first.executableURL = URL(fileURLWithPath: CLI.binary)
        first.arguments = ["unpack", server.url("slow/v2.zip"), "--dest", fresh, "--pubkey", work.publicDER, "--tls-ca", server.root]
        first.standardError = FileHandle.nullDevice
        first.standardOutput = FileHandle.nullDevice
        try first.run()
        // The first holds DIR's lock once its pid is in the lock file (it reads the package in
        // place with range requests: there is no download file to wait for).
        let lockFile = work.directory.file(".fresh.signet-lock")
        let deadline = Date().addingTimeInterval(60)
        while (try? contents(lockFile))?.isEmpty ?? true && first.isRunning && Date() < deadline { usleep(10_000) }
        let busy = try CLI.run(["unpack", server.url("slow/v2.zip"), "--dest", fresh, "--pubkey", work.publicDER, "--tls-ca", server.root, "--wait", "0"])
        #expect(busy.status == 5, "\(busy.stderr)")
        #expect(busy.stderr.contains("process \(first.processIdentifier)"), "\(busy.stderr)")
        let waited = try CLI.run(["unpack", server.url("slow/v2.zip"), "--dest", fresh, "--pubkey", work.publicDER, "--tls-ca", server.root, "--wait", "60"])
        first.waitUntilExit()
        #expect(first.terminationStatus == 0)
        #expect(waited.status == 0, "waits for the first, then installs (the same sequence again): \(waited.stderr)")
        #expect(try String(contentsOfFile: fresh + "/a.txt", encoding: .utf8) == "two\n")
    }
    // MARK: Points 1, 9, 13: another product, a relabelled tree, reverify's expected package

    static func errorCode(_ result: ProcessResult) -> String? {
        (try? result.json()["error"] as? [String: Any])?["code"] as? String
    }

    @Test("another product's validly signed package does not replace an installed tree (exit 1, other-package) unless --change-package; nor across --state or from a bare package")
    func otherProduct() throws {
        let work = try Workspace()
        let app = work.directory.file("app.zip"), other = work.directory.file("other.zip")
        try Self.pack(work, ["a.txt": Data("app\n".utf8)], name: "app", sequence: 5, out: app)
        try Self.pack(work, ["a.txt": Data("other\n".utf8)], name: "other", sequence: 9, out: other)
        let dest = work.directory.file("dest"), state = work.directory.file("state.json")
        #expect(try CLI.run(["unpack", app, "--dest", dest, "--pubkey", work.publicDER, "--state", state]).status == 0)
        let refused = try CLI.run(["unpack", other, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(Self.errorCode(refused) == "other-package")
        #expect(refused.stderr.contains("'app'") && refused.stderr.contains("'other'"), "names both: \(refused.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "app\n")
        // A bare package (no name) over a tree from a signed manifest: refused the same way.
        let bare = try DocsGapsCLITests.barePackage(work)
        let bareRefused = try CLI.run(["unpack", bare, "--dest", dest, "--bare", "--pubkey", work.publicDER, "--json"])
        #expect(bareRefused.status == 1 && Self.errorCode(bareRefused) == "other-package", "\(bareRefused.stderr)")
        // The state remembers the destination's product even when the tree is gone.
        try FileManager.default.removeItem(atPath: dest)
        let gone = try CLI.run(["unpack", other, "--dest", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(gone.status == 1 && Self.errorCode(gone) == "other-package", "\(gone.stderr)")
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
        #expect(rolled.status == 1 && Self.errorCode(rolled) == "rollback", "\(rolled.stderr)")
    }

    @Test("a tree relabelled as bare (manifest signature removed, .signet/bare added) fails reverify and unpack's rollback check still holds")
    func relabelledTree() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try Self.pack(work, ["a.txt": Data("one\n".utf8), "b.txt": Data("b\n".utf8)], sequence: 1, out: v1)
        try Self.pack(work, ["a.txt": Data("two\n".utf8), "b.txt": Data("b\n".utf8)], sequence: 2, out: v2)
        let dest = work.directory.file("dest"), state = work.directory.file("state.json")
        #expect(try CLI.run(["unpack", v2, "--dest", dest, "--pubkey", work.publicDER, "--state", state]).status == 0)
        try FileManager.default.removeItem(atPath: dest + "/.signet/manifest.json.sig")
        try Data("signet-bare/1\n".utf8).write(to: URL(fileURLWithPath: dest + "/.signet/bare"))
        // A file removed and one added: a bare check would not notice either.
        try FileManager.default.removeItem(atPath: dest + "/b.txt")
        let checked = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--json"])
        #expect(checked.status == 1, "\(checked.stdoutText) \(checked.stderr)")
        let tree = (try? checked.json()["trees"] as? [[String: Any]])?.first
        #expect((tree?["error"] as? [String: Any])?["code"] as? String == "relabelled-tree", "\(checked.stdoutText)")
        let rollback = try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(rollback.status == 1 && Self.errorCode(rollback) == "rollback", "the manifest is still there: \(rollback.stderr)")
        try FileManager.default.removeItem(atPath: dest + "/.signet/manifest.json")
        let relabelled = try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(relabelled.status == 1 && Self.errorCode(relabelled) == "relabelled-tree", "\(relabelled.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "two\n")
        // With every file's user.signet.meta stripped too, the state outside DIR still knows.
        for file in ["a.txt"] { _ = try run("setfattr", ["-x", "user.signet.meta", dest + "/" + file]) }
        try? FileManager.default.removeItem(atPath: dest + "/.signet/signatures")
        let stateCheck = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(stateCheck.status == 1, "\(stateCheck.stdoutText)")
        let stateTree = (try? stateCheck.json()["trees"] as? [[String: Any]])?.first
        #expect((stateTree?["error"] as? [String: Any])?["code"] as? String == "relabelled-tree", "\(stateCheck.stdoutText)")
        let stateRollback = try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(stateRollback.status == 1 && Self.errorCode(stateRollback) == "rollback", "\(stateRollback.stderr)")
    }

    @Test("reverify --state and --expect-name: an older signed release or another product in place of the tree fails")
    func reverifyExpectations() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip"), other = work.directory.file("other.zip")
        try Self.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: v1)
        try Self.pack(work, ["a.txt": Data("two\n".utf8)], sequence: 2, out: v2)
        try Self.pack(work, ["a.txt": Data("other\n".utf8)], name: "other", sequence: 3, out: other)
        let dest = work.directory.file("dest"), state = work.directory.file("state.json")
        #expect(try CLI.run(["unpack", v2, "--dest", dest, "--pubkey", work.publicDER, "--state", state]).status == 0)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state, "--expect-name", "app"]).status == 0)
        // The whole tree replaced by the older signed release (as an attacker with write access would).
        #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--allow-downgrade"]).status == 0)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0, "without the state, an older release passes")
        let older = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(older.status == 1)
        #expect(((try? older.json()["trees"] as? [[String: Any]])?.first?["error"] as? [String: Any])?["code"] as? String == "rollback", "\(older.stdoutText)")
        // Another product.
        #expect(try CLI.run(["unpack", other, "--dest", dest, "--pubkey", work.publicDER, "--change-package"]).status == 0)
        let otherCheck = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state])
        #expect(otherCheck.status == 1 && otherCheck.stdoutText.contains("another product"), "\(otherCheck.stdoutText) \(otherCheck.stderr)")
        let expect = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--expect-name", "app", "--json"])
        #expect(expect.status == 1)
        #expect(((try? expect.json()["trees"] as? [[String: Any]])?.first?["error"] as? [String: Any])?["code"] as? String == "other-package")
        // A state file that does not exist is an error (exit 5), not an empty state.
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state + ".missing"]).status == 5)
    }
    // MARK: Point 2: secrets never echoed

    @Test("a secret given where its source belongs is never repeated: --passphrase-env, --passphrase-file, PKCS#11 URIs, salt files")
    func secretsNeverEchoed() throws {
        let work = try Workspace()
        let file = try work.directory.write("f.txt", Data("payload\n".utf8))
        let secret = "correct horse battery staple"
        let pin = "918273645"
        let runs: [[String]] = [
            ["sign", file, "--key", work.privatePEM, "--passphrase-env", secret],
            ["sign", file, "--key", work.privatePEM, "--passphrase-env", secret, "--json"],
            ["sign", file, "--key", work.privatePEM, "--passphrase-file", secret],
            ["sign", file, "--key", work.privatePEM, "--passphrase-file", secret, "--json"],
            ["keygen", "--out", work.directory.file("k2"), "--passphrase-env", secret],
            ["sign", file, "--key", "pkcs11:token=release;object=k;pin-value=\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k?pin-value=\(pin)", "--json"],
            ["sign", file, "--key", "pkcs11:token=release;object=k;\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k;x-unknown=\(pin);bogus=\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k?pin-source=file:/nonexistent/\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k?pin-source=\(pin)&bogus=\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k;pin-source=\(pin)"],
            ["trust", "seal", work.directory.path, "--salt-file", secret],
            ["inspect", file, "--pubkey", work.publicDER, "--trust-salt-file", secret],
        ]
        for arguments in runs {
            let result = try CLI.run(arguments, environment: ["SIGNET_PKCS11_MODULE": "/nonexistent/module.so"])
            #expect(result.status != 0, "\(arguments)")
            let output = result.stdoutText + result.stderr
            #expect(!output.contains(secret) && !output.contains(pin), "\(arguments): \(output)")
        }
        // The refusal says what to do.
        let named = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-env", secret])
        #expect(named.status == 2 && named.stderr.contains("not a valid variable name"), "\(named.stderr)")
        let missing = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", secret, "--json"])
        #expect(missing.status == 5 && missing.stderr.contains("does not exist"), "\(missing.stderr)")
    }
    // MARK: Point 12 (and 14): modes, new folders, files added under .signet/

    @Test("reverify reports a changed mode (files and folders) as mode-changed, --repair restores it; new folders and .signet/ additions are added")
    func modesAndAdditions() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try Self.pack(work, ["bin/tool": Data("#!/bin/sh\n".utf8), "etc/app.conf": Data("x = 1\n".utf8)], out: package)
        let dest = work.directory.file("dest")
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
        chmod(dest + "/bin/tool", 0o4777)
        chmod(dest + "/etc/app.conf", 0o666)
        chmod(dest + "/etc", 0o777)
        try FileManager.default.createDirectory(atPath: dest + "/empty", withIntermediateDirectories: true)
        try Data("planted\n".utf8).write(to: URL(fileURLWithPath: dest + "/.signet/extra.txt"))
        let checked = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--json"])
        #expect(checked.status == 1, "\(checked.stdoutText)")
        let files = ((try? checked.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]]) ?? []
        func verdict(_ path: String) -> String? { files.first { $0["path"] as? String == path }?["verdict"] as? String }
        #expect(verdict("bin/tool") == "mode-changed", "\(files)")
        #expect(verdict("etc/app.conf") == "mode-changed")
        #expect(verdict("etc/") == "mode-changed")
        #expect(verdict("empty/") == "added")
        #expect(verdict(".signet/extra.txt") == "added")
        let human = try CLI.run(["reverify", dest, "--pubkey", work.publicDER])
        #expect(human.stdoutText.contains("has mode 4777, not the signed manifest's 0644"), "\(human.stdoutText)")
        let repaired = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--repair", "--json"])
        #expect(repaired.status == 1, "the additions remain: \(repaired.stdoutText)")
        func mode(_ path: String) throws -> Int { (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1 }
        #expect(try mode(dest + "/bin/tool") == 0o644, "the packed file was 0644")
        #expect(try mode(dest + "/etc/app.conf") == 0o644)
        #expect(try mode(dest + "/etc") == 0o755)
        try FileManager.default.removeItem(atPath: dest + "/empty")
        try FileManager.default.removeItem(atPath: dest + "/.signet/extra.txt")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
    }
    // MARK: Point 14: the signature record is believed only once its publisher signature verifies

    @Test("garbage written to both a file's user.signet.sig and its slot in .signet/signatures no longer passes the tree check")
    func recordBound() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try Self.pack(work, ["a.txt": Data("alpha\n".utf8), "b.txt": Data("beta\n".utf8)], out: package)
        let zipped = try run("unzip", ["-l", package]).stdoutText
        #expect(zipped.contains(".signet/signatures.sig"), "pack signs the record: \(zipped)")
        let dest = work.directory.file("dest")
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        #expect(FileManager.default.fileExists(atPath: dest + "/.signet/signatures.sig"))
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
        // The same garbage in a.txt's attribute and in its slot of the record (the first file).
        let record = try contents(dest + "/.signet/signatures")
        let header = record.firstIndex(of: 0x0A)! + 1
        let length = (record.count - header) / 2
        let garbage = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) })
        var rewritten = record
        rewritten.replaceSubrange(header..<(header + length), with: garbage)
        try rewritten.write(to: URL(fileURLWithPath: dest + "/.signet/signatures"))
        let hex = "0x" + garbage.map { String(format: "%02x", $0) }.joined()
        #expect(try run("setfattr", ["-n", "user.signet.sig", "-v", hex, dest + "/a.txt"]).status == 0)
        let checked = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--json"])
        #expect(checked.status == 1, "\(checked.stdoutText)")
        let files = ((try? checked.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]]) ?? []
        let a = files.first { $0["path"] as? String == "a.txt" }
        #expect(a?["verdict"] as? String != "ok", "\(files)")
        #expect(files.first { $0["path"] as? String == "b.txt" }?["verdict"] as? String == "ok", "b.txt is untouched")

        // One file: a damaged attribute on genuine content says so (the record is restored first).
        try record.write(to: URL(fileURLWithPath: dest + "/.signet/signatures"))
        let single = try CLI.run(["reverify", dest + "/a.txt", "--pubkey", work.publicDER, "--json"])
        #expect(single.status == 1)
        let entry = (try? single.json()["files"] as? [[String: Any]])?.first
        #expect(entry?["verdict"] as? String == "attributes-lost", "\(single.stdoutText)")
        #expect((entry?["detail"] as? String)?.contains("is the signed content") == true, "\(single.stdoutText)")
        // Changed content is still modified.
        try Data("alpha, changed\n".utf8).write(to: URL(fileURLWithPath: dest + "/b.txt"))
        let changed = try CLI.run(["reverify", dest + "/b.txt", "--pubkey", work.publicDER, "--json"])
        #expect((try? changed.json()["files"] as? [[String: Any]])?.first?["verdict"] as? String == "modified", "\(changed.stdoutText)")
    }
    // MARK: Point 14: TLS names and anchors, huge headers, an overall deadline

    @Test("TLS: a leaf without subjectAltName (CN=localhost only) is refused; --tls-ca takes CA certificates only; a 200 KB header and --max-time are explained")
    func tlsAndLimits() throws {
        let nginx = try Self.shared.get()
        let work = try TemporaryDirectory()
        let d = nginx.directory.path
        // A leaf for localhost with the name only in its CN, issued by the test intermediate.
        let made = try run("bash", ["-c", """
            set -e; cd '\(d)'
            openssl req -newkey rsa:2048 -nodes -keyout cn.key -out cn.csr -subj "/CN=localhost" 2>/dev/null
            printf "extendedKeyUsage=serverAuth\\n" > cn.ext
            openssl x509 -req -in cn.csr -CA int.pem -CAkey int.key -CAcreateserial -out cn.pem -days 30 -extfile cn.ext 2>/dev/null
            cat cn.pem int.pem > cn-chain.pem
            """])
        #expect(made.status == 0, "\(made.stderr)")
        let cnOnly = try ScriptedServer(script: [:], tls: (nginx.directory.file("cn-chain.pem"), nginx.directory.file("cn.key")))
        try Data("x".utf8).write(to: URL(fileURLWithPath: cnOnly.file("f.txt")))
        let refused = try CLI.run(["fetch", cnOnly.url("f.txt"), "--out", work.file("f.txt"), "--tls-ca", nginx.root])
        #expect(refused.status == 3 && refused.stderr.contains("subjectAltName"), "\(refused.status) \(refused.stderr)")
        // The same chain with a SAN is accepted (the refusal is about the name, not the chain).
        try Data("y".utf8).write(to: URL(fileURLWithPath: nginx.www + "/f.txt"))
        #expect(try CLI.run(["fetch", nginx.url("f.txt"), "--out", work.file("g.txt"), "--tls-ca", nginx.root]).status == 0)

        // A server certificate given as a trust anchor: refused, pointing at --tls-cert.
        let leafAsCA = try CLI.run(["fetch", nginx.url("f.txt"), "--out", work.file("h.txt"), "--tls-ca", nginx.leaf])
        #expect(leafAsCA.status == 4 && leafAsCA.stderr.contains("--tls-cert"), "\(leafAsCA.status) \(leafAsCA.stderr)")
        #expect(try CLI.run(["fetch", nginx.url("f.txt"), "--out", work.file("i.txt"), "--tls-ca", nginx.intermediate]).status == 0,
                "an intermediate CA may anchor the chain (documented)")

        // A response header of 200 KB.
        let big = try ScriptedServer(script: ["f.txt": [.init(headers: ["X-Big": String(repeating: "a", count: 200_000)])]])
        try Data("z".utf8).write(to: URL(fileURLWithPath: big.file("f.txt")))
        let header = try CLI.run(["fetch", big.url("f.txt"), "--out", work.file("j.txt"), "--allow-http", "--retries", "0"])
        #expect(header.status == 5 && header.stderr.contains("larger than libcurl accepts"), "\(header.status) \(header.stderr)")

        // An overall deadline: nginx sends /slow/ at 200 KiB/s, 3 MB would take 15 s.
        _ = try nginx.directory.writeRandom("www/slow/big.bin", count: 3_000_000)
        let started = Date()
        let slow = try CLI.run(["fetch", nginx.url("slow/big.bin"), "--out", work.file("big.bin"), "--tls-ca", nginx.root, "--max-time", "2"])
        #expect(slow.status == 5 && slow.stderr.contains("--max-time 2"), "\(slow.status) \(slow.stderr)")
        #expect(Date().timeIntervalSince(started) < 12)
        #expect(FileManager.default.fileExists(atPath: work.file(".big.bin.signet-download")), "what arrived is kept")
    }
}
