import Foundation
import Testing
import SignetTestSupport

@Suite("signet reverify / status, run as a binary")
struct ReverifyCLITests {
    /// Packs and installs a small tree; returns the installed directory.
    static func install(_ work: Workspace, ima: Bool = false) throws -> String {
        let root = try PackCLITests.tree(work)
        let package = work.directory.file("app.zip")
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        #expect(try CLI.run(["pack", root] + key + ["--name", "app", "--version", "2.0", "--sequence", "20", "--out", package]).status == 0)
        let dest = work.directory.file("opt/app")
        let unpacked = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER] + (ima ? ["--ima", "user"] : []))
        #expect(unpacked.status == 0, "\(unpacked.stderr)")
        return dest
    }

    @Test("a tree: ok (0), a tampered file named (1), --repair restores a stripped attribute, JSON counts")
    func tree() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        let ok = try CLI.run(["reverify", app, "--pubkey", work.publicDER])
        #expect(ok.status == 0, "\(ok.stdoutText) \(ok.stderr)")
        #expect(ok.stdoutText.contains("OK \(app): app 2.0 (sequence 20): 2 ok"))

        try work.directory.write("opt/app/app.conf", Data("tampered\n".utf8))
        #expect(try SignetTestSupport.run("setfattr", ["-x", "user.signet.sig", app + "/img/logo.png"]).status == 0)
        let bad = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--json"])
        #expect(bad.status == 1)
        let tree = try #require((try bad.json()["trees"] as? [[String: Any]])?.first)
        #expect(tree["counts"] as? [String: Int] == ["modified": 1, "attributes-lost": 1])
        // One name for where the lost signature is restored from (issue 29): the tree's record.
        let lost = try #require((tree["files"] as? [[String: Any]])?.first { $0["verdict"] as? String == "attributes-lost" })
        #expect(lost["signature"] as? String == "record")
        #expect((lost["detail"] as? String)?.contains("--repair restores it from .signet/signatures") == true, "\(lost)")
        let help = try CLI.run(["help", "reverify"])
        #expect(help.stdoutText.contains("DIR/.signet/signatures") && !help.stdoutText.contains(".signet/sigs/ after"), "\(help.stdoutText)")
        let human = try CLI.run(["reverify", app, "--pubkey", work.publicDER])
        #expect(human.stdoutText.contains("modified        app.conf"))
        #expect(human.stdoutText.contains("attributes-lost img/logo.png"))

        let repaired = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--repair", "--exclude", "*.conf"])
        #expect(repaired.status == 0, "\(repaired.stdoutText)")
        #expect(repaired.stdoutText.contains("repaired"))
        #expect(repaired.stdoutText.contains("restored from .signet/signatures"), "\(repaired.stdoutText)")
        #expect(try SignetTestSupport.run("getfattr", ["-n", "user.signet.sig", app + "/img/logo.png"]).status == 0)

        let other = try Workspace()
        #expect(try CLI.run(["reverify", app, "--pubkey", other.publicDER]).status == 3)
        #expect(try CLI.run(["reverify", work.directory.path, "--pubkey", work.publicDER]).status == 2, "not an installed tree")
        #expect(try CLI.run(["reverify", app]).status == 2, "a trusted key is required")
    }

    @Test("files and status: where a file came from, verified or not")
    func filesAndStatus() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        let file = app + "/img/logo.png"
        #expect(try CLI.run(["reverify", file, "--pubkey", work.publicDER]).status == 0)
        let status = try CLI.run(["status", file, "--pubkey", work.publicDER, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let entry = try #require((try status.json()["files"] as? [[String: Any]])?.first)
        #expect(entry["package"] as? String == "app")
        #expect(entry["version"] as? String == "2.0")
        #expect(entry["sequence"] as? Int == 20)
        #expect(entry["package_path"] as? String == "img/logo.png")
        #expect(entry["key_id"] as? String == work.keyID)
        #expect(entry["verdict"] as? String == "ok")
        let unchecked = try CLI.run(["status", file])
        #expect(unchecked.status == 0)
        #expect(unchecked.stdoutText.contains("not checked"))
        let plain = try CLI.run(["status", try work.directory.write("plain.txt", Data("x".utf8))])
        #expect(plain.status == 1)
        #expect(plain.stdoutText.contains("not installed by Signet"))
        // A file that cannot be opened is reported as such (not as "not installed"), and the
        // other files are still shown.
        let missing = try CLI.run(["status", work.directory.file("absent.png"), file, "--json"])
        #expect(missing.status == 5, "a missing file is an environment error")
        let shown = try #require(try missing.json()["files"] as? [[String: Any]])
        #expect(shown.map { $0["verdict"] as? String } == ["unreadable", "not-checked"])
        #expect((shown.first?["detail"] as? String)?.contains("no such file") == true)
        let link = work.directory.file("link.png")
        symlink(file, link)
        let linked = try CLI.run(["reverify", link, "--pubkey", work.publicDER, "--json"])
        #expect(linked.status == 4, "a link given as a file is malformed input: never followed")
        #expect((try linked.json()["files"] as? [[String: Any]])?.first?["verdict"] as? String == "unreadable")
    }

    @Test("unpack --ima user: evmctl ima_verify accepts the files")
    func ima() throws {
        let work = try Workspace()
        let app = try Self.install(work, ima: true)
        let evmctl = try which("evmctl")
        let verified = try SignetTestSupport.run(evmctl, ["ima_verify", "--xattr-user", "--key", work.certificate, app + "/app.conf"])
        #expect(verified.status == 0, "\(verified.stdoutText) \(verified.stderr)")
    }

    @Test(
        "an app in a package of its own (examples/reverify-app) builds against the SignetReverify product, links neither libzip nor libcurl, and re-verifies as signet does"
    )
    func reverifyOnlyApp() throws {
        // Built as a user builds it: its own Package.swift, this checkout as a path dependency.
        let built = try SignetTestSupport.run(UpdateCLITests.repository + "/scripts/example-app.sh", [], timeout: 900)
        try #require(built.status == 0, "\(built.stderr)")
        let app = built.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        // What the dynamic linker loads: libcurl is never linked by Signet (it is dlopened on a
        // first download), libzip is, by the archive layer; neither may reach this app. libcrypto
        // must: the check would pass vacuously for a binary ldd cannot read.
        let linked = try SignetTestSupport.run("ldd", [app])
        #expect(linked.status == 0, "\(linked.stderr)")
        let libraries = linked.stdoutText.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(libraries.contains { $0.hasPrefix("libcrypto.so") }, "\(linked.stdoutText)")
        #expect(!libraries.contains { $0.hasPrefix("libzip.so") || $0.hasPrefix("libcurl") }, "\(linked.stdoutText)")
        // The signet binary does link libzip: the same check tells them apart.
        #expect(try SignetTestSupport.run("ldd", [CLI.binary]).stdoutText.contains("libzip.so"))

        let work = try Workspace()
        let tree = try Self.install(work)
        let ok = try SignetTestSupport.run(app, [work.publicDER, tree])
        #expect(ok.status == 0 && ok.stdoutText.contains("2 files, ok"), "\(ok.stdoutText) \(ok.stderr)")
        try work.directory.write("opt/app/app.conf", Data("tampered\n".utf8))
        let bad = try SignetTestSupport.run(app, [work.publicDER, tree])
        #expect(bad.status == 1 && bad.stdoutText.contains("modified app.conf"), "\(bad.stdoutText) \(bad.stderr)")
    }

    @Test("--only that selects nothing in the manifest, or leaves the tree, is a usage error (exit 2)")
    func onlySelectors() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try FileManager.default.createDirectory(atPath: work.directory.file("src/bin"), withIntermediateDirectories: true)
        try work.directory.write("src/bin/tool", Data("#!/bin/sh\n".utf8))
        try work.directory.write("src/app.conf", Data("setting = 1\n".utf8))
        try TrustCLITests.pack(work, out: package)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        try Data("tampered\n".utf8).write(to: URL(fileURLWithPath: app + "/app.conf"))
        for selector in ["hello", "../..", "/etc", "bin/../..", ""] {
            let result = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--only", selector, "--json"])
            #expect(result.status == 2, "--only '\(selector)': \(result.status) \(result.stdoutText)")
            #expect((try? result.json()["error"] as? [String: Any])?["code"] as? String == "usage", "--only '\(selector)'")
        }
        let nothing = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--exclude", "*"])
        #expect(nothing.status == 2, "excluding every file checks nothing: \(nothing.status) \(nothing.stderr)")
        let bin = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--only", "bin/", "--json"])
        #expect(bin.status == 0, "the untouched subtree verifies: \(bin.stdoutText)")
        let whole = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--only", "app.conf"])
        #expect(whole.status == 1, "a selected file that was modified is reported")
    }

    @Test("a tree relabelled as bare (manifest signature removed, .signet/bare added) fails reverify and unpack's rollback check still holds")
    func relabelledTree() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("one\n".utf8), "b.txt": Data("b\n".utf8)], sequence: 1, out: v1)
        try CLIHelpers.pack(work, ["a.txt": Data("two\n".utf8), "b.txt": Data("b\n".utf8)], sequence: 2, out: v2)
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
        #expect(rollback.status == 1 && CLIHelpers.errorCode(rollback) == "rollback", "the manifest is still there: \(rollback.stderr)")
        try FileManager.default.removeItem(atPath: dest + "/.signet/manifest.json")
        let relabelled = try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(relabelled.status == 1 && CLIHelpers.errorCode(relabelled) == "relabelled-tree", "\(relabelled.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "two\n")
        // With every file's user.signet.meta stripped too, the state outside DIR still knows.
        for file in ["a.txt"] { _ = try run("setfattr", ["-x", "user.signet.meta", dest + "/" + file]) }
        try? FileManager.default.removeItem(atPath: dest + "/.signet/signatures")
        let stateCheck = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(stateCheck.status == 1, "\(stateCheck.stdoutText)")
        let stateTree = (try? stateCheck.json()["trees"] as? [[String: Any]])?.first
        #expect((stateTree?["error"] as? [String: Any])?["code"] as? String == "relabelled-tree", "\(stateCheck.stdoutText)")
        let stateRollback = try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(stateRollback.status == 1 && CLIHelpers.errorCode(stateRollback) == "rollback", "\(stateRollback.stderr)")
    }

    @Test("reverify --state and --expect-name: an older signed release or another product in place of the tree fails")
    func reverifyExpectations() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip"), other = work.directory.file("other.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: v1)
        try CLIHelpers.pack(work, ["a.txt": Data("two\n".utf8)], sequence: 2, out: v2)
        try CLIHelpers.pack(work, ["a.txt": Data("other\n".utf8)], name: "other", sequence: 3, out: other)
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

    // MARK: Point 12 (and 14): modes, new folders, files added under .signet/

    @Test("reverify reports a changed mode (files and folders) as mode-changed, --repair restores it; new folders and .signet/ additions are added")
    func modesAndAdditions() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try CLIHelpers.pack(work, ["bin/tool": Data("#!/bin/sh\n".utf8), "etc/app.conf": Data("x = 1\n".utf8)], out: package)
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
        try CLIHelpers.pack(work, ["a.txt": Data("alpha\n".utf8), "b.txt": Data("beta\n".utf8)], out: package)
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

    /// Point 5: `rollback` checked each listed file's type, size, mode and SHA-256 and looked
    /// for extra files outside `.signet/`, no more: a previous tree with a folder of mode 0777
    /// owned by nobody rolled back with exit 0, and `reverify` then called it FAILED.
    @Test(
        "rollback refuses a previous tree reverify would refuse: folder mode and owner, file owner, a lost signature attribute, an extra entry under .signet/; DIR unchanged each time"
    )
    func rollbackRefusesWhatReverifyRefuses() throws {
        let f = try ReleasesCLITests.Fixture()
        #expect(try f.unpack(try f.pack(1)).status == 0)
        try f.write("config.txt", "release 2\n")
        #expect(try f.unpack(try f.pack(2)).status == 0)
        let previous = f.previous
        let tampers: [(String, () throws -> Void, () throws -> Void)] = [
            ("folder 0777", { chmod(previous + "/lib", 0o777) }, { chmod(previous + "/lib", 0o755) }),
            ("folder owned by nobody", { chown(previous + "/lib", 65534, 65534) }, { chown(previous + "/lib", 0, 0) }),
            ("file owned by nobody", { chown(previous + "/config.txt", 65534, 65534) }, { chown(previous + "/config.txt", 0, 0) }),
            (
                "signature attribute removed",
                {
                    let saved = try run("getfattr", ["--absolute-names", "--only-values", "-n", "user.signet.sig", previous + "/config.txt"]).stdout
                    try saved.write(to: URL(fileURLWithPath: f.work.directory.file("saved.sig")))
                    #expect(try run("setfattr", ["-x", "user.signet.sig", previous + "/config.txt"]).status == 0)
                },
                {
                    let saved = try Data(contentsOf: URL(fileURLWithPath: f.work.directory.file("saved.sig")))
                    #expect(
                        try run("setfattr", ["-n", "user.signet.sig", "-v", "0x" + saved.map { String(format: "%02x", $0) }.joined(), previous + "/config.txt"])
                            .status == 0)
                }
            ),
            (
                "extra entry under .signet", { try Data("x".utf8).write(to: URL(fileURLWithPath: previous + "/.signet/extra")) },
                { try FileManager.default.removeItem(atPath: previous + "/.signet/extra") }
            )
        ]
        for (name, tamper, undo) in tampers {
            try tamper()
            let result = try CLI.run(["rollback", f.dest, "--state", f.state, "--json"])
            #expect(
                result.status == 1 && (try? result.json()["error"] as? [String: Any])?["code"] as? String == "rollback-refused", "\(name): \(result.stdoutText)"
            )
            #expect(f.text("config.txt") == "release 2\n", "\(name): DIR changed")
            try undo()
        }
        let back = try CLI.run(["rollback", f.dest, "--state", f.state])
        #expect(back.status == 0, "\(back.stderr)")
        #expect(f.text("config.txt") == "release 1\n")
        #expect(try f.reverify() == 0)
    }

    @Test(
        "reverify TREE with an unreadable folder: the folder and its listed files are unreadable, everything else is checked; reverify FILE of an unreadable file gives its verdict"
    )
    func unreadableFolders() throws {
        guard getuid() == 0 else {
            print("skipped: needs root to act as nobody with setpriv")
            return
        }
        let work = try Workspace()
        let root = work.directory.file("src")
        for (path, text) in [("a/x.txt", "x"), ("a/deep/y.txt", "y"), ("b/z.txt", "z"), ("top.txt", "t")] {
            try FileManager.default.createDirectory(atPath: (root + "/" + path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: root + "/" + path))
        }
        let package = work.directory.file("app.zip")
        #expect(
            try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", package])
                .status == 0)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        chmod(work.path, 0o755)
        chmod(work.keys, 0o755)
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary, "reverify"]
        #expect(try SignetTestSupport.run("setpriv", asNobody + [app, "--pubkey", work.publicDER]).status == 0, "all readable: ok")

        chmod(app + "/a", 0o000)
        try Data("changed".utf8).write(to: URL(fileURLWithPath: app + "/b/z.txt"))
        let result = try SignetTestSupport.run("setpriv", asNobody + [app, "--pubkey", work.publicDER, "--json"])
        chmod(app + "/a", 0o755)
        #expect(result.status == 1, "\(result.status) \(result.stderr)")
        let tree = try #require((try result.json()["trees"] as? [[String: Any]])?.first, "\(result.stdoutText)")
        let verdicts = Dictionary(
            uniqueKeysWithValues: try #require(tree["files"] as? [[String: Any]]).map { ($0["path"] as! String, $0["verdict"] as! String) })
        #expect(verdicts["a/"] == "unreadable" && verdicts["a/x.txt"] == "unreadable" && verdicts["a/deep/y.txt"] == "unreadable", "\(verdicts)")
        #expect(verdicts["b/z.txt"] == "modified" && verdicts["top.txt"] == "ok", "the rest is still checked: \(verdicts)")

        chmod(app + "/top.txt", 0o000)
        let file = try SignetTestSupport.run("setpriv", asNobody + [app + "/top.txt", "--pubkey", work.publicDER])
        chmod(app + "/top.txt", 0o644)
        #expect(file.status == 5, "\(file.status) \(file.stderr)")
        #expect(
            file.stdoutText.contains("unreadable") && file.stdoutText.contains("top.txt") && file.stdoutText.contains("permission denied"),
            "\(file.stdoutText) \(file.stderr)")
    }

    @Test("--quiet prints nothing on success and what failed on failure; reverify --summary counts a copied tree's verdicts in a few lines")
    func quietAndSummary() throws {
        let work = try Workspace()
        let src = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        for index in 0..<12 { try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: src + "/f\(index).txt")) }
        let package = work.directory.file("app.zip")
        let packed = try CLI.run([
            "pack", src, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", package, "--quiet"
        ])
        #expect(packed.status == 0 && packed.stdout.isEmpty && packed.stderr.isEmpty, "\(packed.stdoutText) \(packed.stderr)")
        let app = work.directory.file("app")
        let unpacked = try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER, "--quiet"])
        #expect(unpacked.status == 0 && unpacked.stdout.isEmpty, "\(unpacked.stdoutText)")
        let clean = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--quiet"])
        #expect(clean.status == 0 && clean.stdout.isEmpty, "\(clean.stdoutText)")
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: app + "/f3.txt"))
        let failed = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--quiet"])
        #expect(failed.status == 1 && failed.stdoutText.contains("modified        f3.txt"), "a failure still says what failed: \(failed.stdoutText)")

        // A tree copied with cp -r: the attributes are gone (and with them the record's use).
        let copy = work.directory.file("copy")
        #expect(try SignetTestSupport.run("cp", ["-r", app, copy]).status == 0)
        let summary = try CLI.run(["reverify", copy, "--pubkey", work.publicDER, "--summary"])
        #expect(summary.status == 1)
        let lines = summary.stdoutText.split(separator: "\n")
        #expect(lines.count == 3, "one line per verdict and the result: \(summary.stdoutText)")
        #expect(summary.stdoutText.contains("attributes-lost 11: f0.txt, f1.txt, f10.txt, f11.txt, f2.txt, and 6 more"), "\(summary.stdoutText)")
        #expect(summary.stdoutText.contains("modified        1: f3.txt"), "\(summary.stdoutText)")
        // In JSON too (issue 49, point 14): five files of each verdict, every count.
        let json = try CLI.run(["reverify", copy, "--pubkey", work.publicDER, "--summary", "--json"])
        let full = try CLI.run(["reverify", copy, "--pubkey", work.publicDER, "--json"])
        let tree = (try json.json()["trees"] as? [[String: Any]])?.first
        let files = tree?["files"] as? [[String: Any]] ?? []
        #expect(files.count == 6 && (tree?["counts"] as? [String: Int])?["attributes-lost"] == 11, "\(json.stdoutText)")
        #expect(json.stdout.count < full.stdout.count, "\(json.stdout.count) vs \(full.stdout.count)")
    }

    @Test("a tree installed with --bare is re-verified (modified, added, missing) and upgraded like others")
    func bareTrees() throws {
        let work = try Workspace()
        let package = try CLIHelpers.barePackage(work)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--bare", "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let ok = try CLI.run(["reverify", dest, "--pubkey", work.publicDER])
        #expect(ok.status == 0, "\(ok.stdoutText) \(ok.stderr)")
        #expect(ok.stdoutText.contains("bare package") && ok.stdoutText.contains("2 ok"))
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: dest + "/a.txt"))
        try Data("new\n".utf8).write(to: URL(fileURLWithPath: dest + "/new.txt"))
        try FileManager.default.removeItem(atPath: dest + "/sub/b.txt")
        let bad = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--json"])
        #expect(bad.status == 1)
        let verdicts = try #require((try bad.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]])
            .map { "\($0["path"]!)=\($0["verdict"]!)" }
        #expect(verdicts == ["a.txt=modified", "new.txt=added", "sub/b.txt=missing"])
        let status = try CLI.run(["status", dest + "/a.txt"])
        #expect(status.stdoutText.contains("a bare package"), "\(status.stdoutText)")
        // The next bare release, then a signed package, replace it without --force.
        let next = try CLIHelpers.barePackage(work, name: "bare-2.zip", text: "alpha 2\n")
        let again = try CLI.run(["unpack", next, "--bare", "--dest", dest, "--pubkey", work.publicDER])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "alpha 2\n")
        #expect(!FileManager.default.fileExists(atPath: dest + "/new.txt"), "replaced as a whole")
        let signed = work.directory.file("signed.zip")
        #expect(
            try CLI.run([
                "pack", try PackCLITests.tree(work), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                "--name", "app", "--version", "1", "--out", signed
            ]).status == 0)
        let upgraded = try CLI.run(["unpack", signed, "--dest", dest, "--pubkey", work.publicDER])
        #expect(upgraded.status == 0, "\(upgraded.stderr)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
    }

    @Test("status of a file on a filesystem without user attributes says where it came from")
    func statusFromSidecar() throws {
        let work = try Workspace()
        guard let mount = try ScratchMount.mount("ramfs", options: "size=16m", at: work.directory.file("ramfs"), untested: "status from a sidecar") else {
            return
        }
        defer { mount.unmount() }
        let package = work.directory.file("app.zip")
        #expect(
            try CLI.run([
                "pack", try PackCLITests.tree(work), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                "--name", "app", "--version", "2.5", "--sequence", "25", "--out", package
            ]).status == 0)
        let dest = mount.path + "/app"
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let status = try CLI.run(["status", dest + "/app.conf", "--pubkey", work.publicDER, "--json"])
        #expect(status.status == 0, "\(status.stdoutText) \(status.stderr)")
        let entry = try #require((try status.json()["files"] as? [[String: Any]])?.first)
        #expect(entry["installed_by_signet"] as? Bool == true)
        #expect(entry["package"] as? String == "app")
        #expect(entry["version"] as? String == "2.5")
        #expect(entry["sequence"] as? Int == 25)
        #expect(entry["package_path"] as? String == "app.conf")
        #expect(entry["key_id"] as? String == work.keyID)
        #expect(entry["verdict"] as? String == "ok")
    }

}
