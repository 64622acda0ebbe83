import Foundation
import Testing
import SignetTestSupport

/// The hardening issue's command-line points: protections that an absent file must not switch
/// off, selectors that select nothing, outputs that would destroy inputs, empty secrets.
@Suite("Hardening: absent protections, selectors, outputs over inputs, empty secrets")
struct HardeningCLITests {
    @Test("a salt or seal key demands a seal: deleting or replacing the seal does not disable it")
    func sealRequired() throws {
        let work = try Workspace(), attacker = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let attackerPackage = attacker.directory.file("evil.zip")
        try TrustCLITests.pack(attacker, out: attackerPackage)
        let salt = try work.directory.write("salt", Data("device secret\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", salt]).status == 0)

        // The attacker adds their key and deletes the seal.
        try FileManager.default.copyItem(atPath: attacker.publicDER, toPath: trust + "/added.der")
        try FileManager.default.removeItem(atPath: trust + "/.signet-trust")
        let deleted = try CLI.run(["unpack", attackerPackage, "--dest", work.directory.file("app"), "--trust-dir", trust, "--trust-salt-file", salt, "--json"])
        #expect(deleted.status == 3, "\(deleted.stderr)")
        #expect((try deleted.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        #expect(deleted.stderr.contains("has no seal"))
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("app")))

        // Or writes a new seal of their own, without the salt they do not know.
        #expect(try CLI.run(["trust", "seal", trust]).status == 0)
        let unsalted = try CLI.run(["inspect", attackerPackage, "--trust-dir", trust, "--trust-salt-file", salt])
        #expect(unsalted.status == 3, "\(unsalted.stderr)")
        #expect(unsalted.stderr.contains("without a salt"))

        // The same with a seal key: the seal must be there.
        let sealer = try Workspace()
        try FileManager.default.removeItem(atPath: trust + "/.signet-trust")
        let noSeal = try CLI.run(["inspect", attackerPackage, "--trust-dir", trust, "--trust-seal-key", sealer.publicDER])
        #expect(noSeal.status == 3)
        #expect(noSeal.stderr.contains("--trust-seal-key requires one"))

        // An empty salt protects nothing: refused on both sides (exit 4).
        let empty = try work.directory.write("empty-salt", Data("\n".utf8), mode: 0o600)
        let sealEmpty = try CLI.run(["trust", "seal", trust, "--salt-file", empty, "--json"])
        #expect(sealEmpty.status == 4, "\(sealEmpty.stderr)")
        #expect((try sealEmpty.json()["error"] as? [String: Any])?["code"] as? String == "empty-passphrase")
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", empty]).status == 4)
    }

    /// README's device walk-through makes its salt with `head -c 32 /dev/urandom`: one time in
    /// 256 that starts with a newline, and most such salts hold one. Every byte must count.
    @Test("a binary salt is used whole: a leading or inner newline neither empties nor shortens it")
    func binarySalt() throws {
        let work = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let random = try randomBytes(32)
        let salt = [0x0A] + random.prefix(10) + [0x0D, 0x0A] + random.suffix(20)
        let saltFile = try work.directory.write("salt", Data(salt), mode: 0o600)
        let sealed = try CLI.run(["trust", "seal", trust, "--salt-file", saltFile])
        #expect(sealed.status == 0, "a salt that starts with a newline is not empty: \(sealed.stderr)")
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", saltFile]).status == 0)
        // A salt that differs only after the first newline is another salt.
        var other = salt
        other[other.count - 1] ^= 0x01
        let otherFile = try work.directory.write("other-salt", Data(other), mode: 0o600)
        let wrong = try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", otherFile, "--json"])
        #expect(wrong.status == 3, "\(wrong.stderr)")
        #expect((try wrong.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        // A text salt salts the same with or without its final line ending.
        let text = try work.directory.write("text-salt", Data("device secret\n".utf8), mode: 0o600)
        let bare = try work.directory.write("bare-salt", Data("device secret".utf8), mode: 0o600)
        let crlf = try work.directory.write("crlf-salt", Data("device secret\r\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", text]).status == 0)
        for file in [text, bare, crlf] {
            let result = try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", file])
            #expect(result.status == 0, "\(file): \(result.stderr)")
        }
        let twoLines = try work.directory.write("two-lines", Data("device secret\nmore\n".utf8), mode: 0o600)
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", twoLines]).status == 3,
                "a second line is part of the salt")
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

    @Test("sign and pack never write over the key or an input, whatever the name or link")
    func outputsOverInputs() throws {
        let work = try Workspace()
        let file = try work.directory.write("data.txt", Data("payload\n".utf8))
        let keyBefore = try contents(work.privatePEM)
        try FileManager.default.linkItem(atPath: work.privatePEM, toPath: work.directory.file("key-hardlink.pem"))
        try FileManager.default.createSymbolicLink(atPath: work.directory.file("key-link.pem"), withDestinationPath: work.privatePEM)
        let sign = ["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]
        for out in [work.privatePEM, "./keys/private_key.pem", work.directory.file("keys/../keys/private_key.pem"),
                    work.directory.file("key-hardlink.pem"), work.directory.file("key-link.pem"), file, work.passFile] {
            let result = try CLI.run(sign + ["--out", out, "--json"], directory: work.path)
            #expect(result.status == 2, "--out \(out): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("same file"), "\(result.stderr)")
        }
        #expect(try contents(work.privatePEM) == keyBefore)
        #expect(try contents(file) == Data("payload\n".utf8))
        // Two inputs whose signatures would be the same file, or an input that is another's signature.
        let twice = try CLI.run(["sign", file, "./data.txt", "--key", work.privatePEM, "--passphrase-file", work.passFile], directory: work.path)
        #expect(twice.status == 2, "\(twice.stderr)")
        let sigInput = try work.directory.write("data.txt.sig", Data("an input\n".utf8))
        let chained = try CLI.run(["sign", file, sigInput, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(chained.status == 2, "\(chained.stderr)")
        #expect(try contents(sigInput) == Data("an input\n".utf8))

        let pack = ["pack", file, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "a", "--version", "1"]
        for out in [work.privatePEM, work.directory.file("key-link.pem"), file] {
            let result = try CLI.run(pack + ["--out", out])
            #expect(result.status == 2, "pack --out \(out): \(result.stderr)")
        }
        #expect(try contents(work.privatePEM) == keyBefore)
        // A package inside the directory being packed, from an earlier run, is not packed over itself.
        try FileManager.default.createDirectory(atPath: work.directory.file("dist"), withIntermediateDirectories: true)
        try work.directory.write("dist/a.txt", Data("a\n".utf8))
        let packDist = ["pack", work.directory.file("dist"), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                        "--name", "a", "--version", "1", "--out", work.directory.file("dist/app.zip")]
        #expect(try CLI.run(packDist).status == 0)
        // The second run: the package exists (exit 5 without --force); with --force the old
        // package is not packed into the new one (skipped as zip and tar skip their archive).
        #expect(try CLI.run(packDist).status == 5)
        let again = try CLI.run(packDist + ["--force", "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect((try again.json()["files"] as? [[String: Any]])?.compactMap { $0["path"] as? String } == ["a.txt"])
    }

    @Test("a passphrase source that is given but empty is exit 4, and nothing is written")
    func emptyPassphrase() throws {
        let directory = try TemporaryDirectory()
        let empty = try directory.write("empty.txt", Data(), mode: 0o600)
        let blankLine = try directory.write("blank.txt", Data("\nsecond line\n".utf8), mode: 0o600)
        for (options, environment) in [(["--passphrase-file", empty], [String: String?]()), (["--passphrase-file", blankLine], [:]),
                                       (["--passphrase-env", "SIGNET_EMPTY"], ["SIGNET_EMPTY": ""])] {
            let out = directory.file("keys-\(options[1].count)")
            let result = try CLI.run(["keygen", "--out", out, "--bits", "2048", "--json"] + options, environment: environment)
            #expect(result.status == 4, "\(options): \(result.status) \(result.stderr)")
            #expect((try result.json()["error"] as? [String: Any])?["code"] as? String == "empty-passphrase")
            #expect(!FileManager.default.fileExists(atPath: out + "/private_key.pem"))
        }
        let days = try CLI.run(["keygen", "--out", directory.file("k"), "--days", "9223372036854775807"])
        #expect(days.status == 2, "an absurd validity is a usage error, not a trap: \(days.status) \(days.stderr)")
    }

    @Test("control characters in file names are escaped on every human-readable line")
    func controlCharactersEscaped() throws {
        let work = try Workspace()
        let evil = "evil\u{1b}[2J\rfake ok\n\u{202e}txt.exe"
        let file = try work.directory.write(evil, Data("x\n".utf8))
        func isClean(_ text: String) -> Bool {
            !text.unicodeScalars.contains { $0.value == 0x1b || $0.value == 0x0d || $0.value == 0x202e }
        }
        let sign = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(sign.status == 0, "\(sign.stderr)")
        #expect(isClean(sign.stdoutText) && sign.stdoutText.contains("evil\\x1b[2J\\rfake ok\\n\\u{202e}txt.exe"), "\(sign.stdoutText.debugDescription)")
        #expect(sign.stdoutText.split(separator: "\n").count == 1, "one file, one line")
        let verify = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", work.publicDER])
        #expect(verify.status == 0 && isClean(verify.stdoutText), "\(verify.stdoutText.debugDescription)")
        let missing = try CLI.run(["verify", file + "-gone", "--signature", file + ".sig", "--pubkey", work.publicDER])
        #expect(missing.status == 5 && isClean(missing.stderr), "\(missing.stderr.debugDescription)")
        let single = try CLI.run(["reverify", file, "--pubkey", work.publicDER])
        #expect(single.status == 1 && isClean(single.stdoutText), "\(single.stdoutText.debugDescription)")

        // A file added to an installed tree under such a name.
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        _ = try work.directory.write("app/" + evil, Data("added\n".utf8))
        let tree = try CLI.run(["reverify", app, "--pubkey", work.publicDER])
        #expect(tree.status == 1)
        #expect(isClean(tree.stdoutText) && tree.stdoutText.contains("added"), "\(tree.stdoutText.debugDescription)")
        let json = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--json"])
        let files = ((try json.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]]) ?? []
        #expect(files.contains { $0["path"] as? String == evil }, "JSON keeps the real name (escaped by JSON itself)")
    }

    @Test("pack refuses what a default unpack would refuse, naming the flag; the same flags on both allow it")
    func packHonoursUnpackLimits() throws {
        let work = try Workspace()
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "z", "--version", "1"]
        try FileManager.default.createDirectory(atPath: work.directory.file("zeros"), withIntermediateDirectories: true)
        // Under --chunk-threshold: a larger file is deflated in 8 KiB segments (issue 51), whose
        // sync flushes hold it to about 330:1, within the default --max-ratio.
        try work.directory.write("zeros/zeros.bin", Data(count: 3 << 20))
        let package = work.directory.file("zeros.zip")
        let refused = try CLI.run(["pack", work.directory.file("zeros"), "--out", package, "--json"] + key)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("--max-ratio"), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.path).filter { $0.hasPrefix(".") }.isEmpty, "nothing left behind")
        #expect(try CLI.run(["pack", work.directory.file("zeros"), "--out", package, "--max-ratio", "5000"] + key).status == 0)
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("a"), "--pubkey", work.publicDER]).status == 4)
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("b"), "--pubkey", work.publicDER, "--max-ratio", "5000"]).status == 0)
        #expect(try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--max-ratio", "5000"]).status == 0)

        // Too many files for the limit.
        try FileManager.default.createDirectory(atPath: work.directory.file("many"), withIntermediateDirectories: true)
        for name in ["1", "2", "3"] { try work.directory.write("many/\(name)", Data(name.utf8)) }
        let many = try CLI.run(["pack", work.directory.file("many"), "--out", work.directory.file("many.zip"), "--max-files", "2"] + key)
        #expect(many.status == 2 && many.stderr.contains("--max-files"), "\(many.stderr)")
        // A path whose signature entry name would pass 4,096 bytes.
        let long = work.directory.file("long")
        var relative = ""
        while relative.utf8.count < 4_000 {
            relative += (relative.isEmpty ? "" : "/") + String(repeating: "d", count: 200)
        }
        relative += "/" + String(repeating: "f", count: 4_088 - relative.utf8.count - 1)
        #expect(relative.utf8.count == 4_088)
        // Made relative to its top folder: the whole path is longer than PATH_MAX.
        try FileManager.default.createDirectory(atPath: long, withIntermediateDirectories: true)
        let made = try run("python3", ["-c", "import os, sys; os.chdir(sys.argv[1]); os.makedirs(os.path.dirname(sys.argv[2])); open(sys.argv[2], 'w').write('x')", long, relative])
        #expect(made.status == 0, "\(made.stderr)")
        let longPack = try CLI.run(["pack", work.directory.file("long"), "--out", work.directory.file("long.zip")] + key)
        #expect(longPack.status == 2 && longPack.stderr.contains("4087"), "\(longPack.status) \(longPack.stderr)")
    }

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
        let result = try run("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", CLI.binary, "unpack", package,
                                          "--dest", locked, "--pubkey", work.publicDER, "--json"])
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        #expect(!result.stderr.contains("NSCocoaErrorDomain") && !result.stderr.contains("Code=") && result.stderr.contains("permission denied"), "\(result.stderr)")
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
        let result = try run("sh", ["-c", "umask 077; exec \"$@\"", "sh", CLI.binary, "unpack", package, "--dest", app, "--pubkey", work.publicDER, "--state", state])
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

    @Test("sign writes all signatures or none: a target that cannot be written stops every one")
    func signAllOrNothing() throws {
        let work = try Workspace()
        let a = try work.directory.write("a.txt", Data("a\n".utf8)), b = try work.directory.write("b.txt", Data("b\n".utf8))
        try work.directory.write("a.txt.sig", Data("old signature\n".utf8))
        try FileManager.default.createDirectory(atPath: b + ".sig", withIntermediateDirectories: true)
        let result = try CLI.run(["sign", a, b, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        #expect(try contents(a + ".sig") == Data("old signature\n".utf8), "a.txt.sig untouched")
        let strays = try FileManager.default.contentsOfDirectory(atPath: work.path).filter { $0.hasPrefix(".") }
        #expect(strays.isEmpty, "no staged files left: \(strays)")
    }

    @Test("install, reverify and pack below a path longer than PATH_MAX, from a working directory above it")
    func longRelativePaths() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        var relative = ""
        while relative.utf8.count < 4_300 { relative += (relative.isEmpty ? "" : "/") + String(repeating: "p", count: 250) }
        // Made one folder at a time: the whole relative path is too long for mkdir -p.
        let made = try run("python3", ["-c", "import os, sys\nos.chdir(sys.argv[1])\nfor part in sys.argv[2].split('/'):\n    os.mkdir(part); os.chdir(part)", work.path, relative])
        #expect(made.status == 0, "\(made.stderr)")
        let dest = relative + "/app"
        let unpack = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER], directory: work.path)
        #expect(unpack.status == 0, "\(unpack.stderr)")
        let reverify = try CLI.run(["reverify", dest, "--pubkey", work.publicDER], directory: work.path)
        #expect(reverify.status == 0, "\(reverify.stdoutText) \(reverify.stderr)")
        let again = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER], directory: work.path)
        #expect(again.status == 0, "replacing it works too: \(again.stderr)")
        let pack = try CLI.run(["pack", dest + "/app.conf", "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "re", "--version", "1",
                                "--out", "repacked.zip"], directory: work.path)
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

    @Test("numbers at the extremes from the command line never trap")
    func extremeNumbers() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, extra: ["--expires", "9999-12-31T23:59:59Z"], out: package)
        for skew in ["86400", "0"] {
            let inspect = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--clock-skew", skew])
            #expect(inspect.status == 0, "--clock-skew \(skew): \(inspect.status) \(inspect.stderr)")
        }
        // Issue 37: a skew beyond a day would switch expiry off: refused, never wrapped.
        let beyond = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--clock-skew", "9223372036854775807"])
        #expect(beyond.status == 2 && beyond.stderr.contains("at most 86400"), "\(beyond.status) \(beyond.stderr)")
        let huge = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--max-total-size", "18446744073709551615", "--max-files", "9223372036854775807"])
        #expect(huge.status == 0, "\(huge.status) \(huge.stderr)")
        let epoch = try CLI.run(["pack", work.directory.file("src"), "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "e",
                                 "--version", "1", "--out", work.directory.file("e.zip")], environment: ["SOURCE_DATE_EPOCH": "99999999999999"])
        #expect(epoch.status == 2 && epoch.stderr.contains("SOURCE_DATE_EPOCH"), "\(epoch.status) \(epoch.stderr)")
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
        #expect(try CLI.run(["pack", work.directory.file("small"), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                             "--name", "app", "--version", "1", "--sequence", "1", "--out", small]).status == 0)
        try FileManager.default.createDirectory(atPath: work.directory.file("big"), withIntermediateDirectories: true)
        for index in 0..<40 { _ = try work.directory.writeRandom("big/f\(index).bin", count: 64 << 10) }
        let big = work.directory.file("big.zip")
        #expect(try CLI.run(["pack", work.directory.file("big"), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                             "--name", "app", "--version", "2", "--sequence", "2", "--out", big]).status == 0)
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
}
