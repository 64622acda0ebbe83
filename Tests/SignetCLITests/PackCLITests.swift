import Foundation
import Testing
import SignetTestSupport

@Suite("signet pack / inspect, run as a binary")
struct PackCLITests {
    static func tree(_ work: Workspace) throws -> String {
        let root = work.directory.file("dist")
        try FileManager.default.createDirectory(atPath: root + "/img", withIntermediateDirectories: true)
        try Data(String(repeating: "config line\n", count: 200).utf8).write(to: URL(fileURLWithPath: root + "/app.conf"))
        try work.directory.writeRandom("dist/img/logo.png", count: 3000)
        return root
    }

    @Test("pack then inspect: unverified view, verified, untrusted (3), tampered (1), truncated (4)")
    func packInspect() throws {
        let work = try Workspace()
        let root = try Self.tree(work)
        let package = work.directory.file("app.zip")
        let packed = try CLI.run([
            "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile,
            "--name", "app", "--version", "1.2.3", "--sequence", "5", "--out", package, "--json"
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        let report = try packed.json()
        #expect(report["key_id"] as? String == work.keyID)
        #expect((report["files"] as? [[String: Any]])?.map { $0["path"] as? String } == ["app.conf", "img/logo.png"])
        #expect((report["files"] as? [[String: Any]])?.last?["compression"] as? String == "stored")

        let plain = try CLI.run(["inspect", package])
        #expect(plain.status == 0)
        #expect(plain.stdoutText.contains("not checked"))
        #expect(plain.stdoutText.contains("sequence:  5"))

        let verified = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--json"])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(try verified.json()["verdict"] as? String == "valid")
        #expect(try verified.json()["signer"] as? String == work.keyID)

        let other = try Workspace()
        let untrusted = try CLI.run(["inspect", package, "--pubkey", other.publicDER, "--json"])
        #expect(untrusted.status == 3)
        #expect((try untrusted.json()["error"] as? [String: Any])?["code"] as? String == "untrusted-signer")

        // Change one stored byte of a resource (the PNG is stored, so its bytes are in the archive as is).
        var bytes = Array(try contents(package))
        let png = Array(try contents(root + "/img/logo.png"))
        let at = try #require(bytes.firstRange(of: png.prefix(64))).lowerBound + 100
        bytes[at] ^= 0xff
        let tampered = try work.directory.write("tampered.zip", Data(bytes))
        let bad = try CLI.run(["inspect", tampered, "--pubkey", work.publicDER])
        #expect(bad.status == 4 || bad.status == 1, "a flipped byte is a CRC error (4) or a hash mismatch (1): \(bad.stderr)")
        #expect(bad.stderr.contains("img/logo.png"), "the message names the entry: \(bad.stderr)")

        let truncated = try work.directory.write("truncated.zip", Data(bytes.prefix(bytes.count / 2)))
        let cut = try CLI.run(["inspect", truncated, "--pubkey", work.publicDER, "--json"])
        #expect(cut.status == 4)
        #expect((try cut.json()["error"] as? [String: Any])?["code"] as? String == "malformed-archive")
    }

    @Test("pack's memory grows with the file count by little more than the manifest and the zip directory")
    func packMemoryPerFile() throws {
        let work = try Workspace()
        func tree(_ name: String, files: Int) throws -> String {
            let root = work.directory.file(name)
            for index in 0..<files {
                let directory = "\(root)/d\(index / 250)"
                if index % 250 == 0 { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
                try Data("resource \(index)\n".utf8).write(to: URL(fileURLWithPath: "\(directory)/file-\(index).txt"))
            }
            return root
        }
        let (small, large) = (500, 4_500)
        func pack(_ root: String, _ extra: [String]) throws -> Int {
            let out = root + ".zip"
            defer { unlink(out) }
            return try CLI.peakRSS(
                [
                    "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                    "--name", "many", "--version", "1", "--out", out
                ] + extra)
        }
        let roots = (try tree("small", files: small), try tree("large", files: large))
        for extra in [[], ["--store"]] {
            let perFile = Double(try pack(roots.1, extra) - pack(roots.0, extra)) * 1024 / Double(large - small)
            print("signet pack \(extra): peak RSS grows by \(Int(perFile)) bytes per file")
            // Per file, pack keeps its manifest line (paths, digest, the JSON: ~0.45 KiB in memory),
            // libzip's records of the resource and its signature entry (the central directory it
            // writes last: ~0.7 KiB) and two small sources. Measured: ~1.6 KiB stored, ~1.9 KiB
            // deflated. Before the ledger, pack also kept every signature, per-file closures and
            // a libzip reader entry per deflated file: 2.4-3.1 KiB.
            guard !CLI.underAddressSanitizer else { continue } // redzones and quarantine per allocation
            #expect(perFile < 2.5 * 1024, "\(extra): \(Int(perFile)) bytes per file")
        }
    }

    @Test("pack refuses what it must, with usage errors (2) and environment errors (5)")
    func packRefusals() throws {
        let work = try Workspace()
        let root = try Self.tree(work)
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        let out = work.directory.file("p.zip")
        #expect(try CLI.run(["pack", root] + key + ["--version", "1", "--out", out]).status == 2)
        #expect(try CLI.run(["pack", root] + key + ["--name", "n", "--version", "1", "--out", out, "--expires", "tomorrow"]).status == 2)
        #expect(try CLI.run(["pack", root] + key + ["--name", "n", "--version", "1", "--out", out, "--store", "--compression-level", "9"]).status == 2)
        symlink("/etc/passwd", root + "/passwd")
        let link = try CLI.run(["pack", root] + key + ["--name", "n", "--version", "1", "--out", out])
        #expect(link.status == 2)
        #expect(link.stderr.contains("symbolic link"))
        unlink(root + "/passwd")
        let missing = try CLI.run(["pack", root, work.directory.file("nope")] + key + ["--name", "n", "--version", "1", "--out", out])
        #expect(missing.status == 5)
        #expect(!FileManager.default.fileExists(atPath: out), "a failed pack leaves no package")
    }

    @Test("a pack that runs out of space fails with exit 5, names the package, and leaves nothing behind")
    func packOnFullDisk() throws {
        let work = try Workspace()
        guard let mount = try ScratchMount.mount("tmpfs", options: "size=1m", at: work.directory.file("small"), untested: "the full-disk path") else { return }
        defer { mount.unmount() }
        let small = mount.path
        // 3 MiB of random bytes (stored: deflate cannot shrink them) into 1 MiB of space.
        let big = try work.directory.writeRandom("big.bin", count: 3 << 20)
        let out = small + "/p.zip"
        let failed = try CLI.run([
            "pack", big, "--key", work.privatePEM, "--passphrase-file", work.passFile,
            "--name", "n", "--version", "1", "--out", out
        ])
        #expect(failed.status == 5, "\(failed.stderr)")
        #expect(failed.stderr.contains(out) && failed.stderr.contains("no space left"), "\(failed.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: small).isEmpty, "no package and no temporary file are left")
    }

    @Test("unpack: installs with attributes; exit 3 untrusted, 1 rollback, 5 foreign directory; JSON report")
    func unpack() throws {
        let work = try Workspace()
        let root = try Self.tree(work)
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        let v2 = work.directory.file("v2.zip"), v1 = work.directory.file("v1.zip")
        #expect(try CLI.run(["pack", root] + key + ["--name", "app", "--version", "2", "--sequence", "2", "--out", v2]).status == 0)
        #expect(try CLI.run(["pack", root] + key + ["--name", "app", "--version", "1", "--sequence", "1", "--out", v1]).status == 0)
        let dest = work.directory.file("opt/app")

        let other = try Workspace()
        let untrusted = try CLI.run(["unpack", v2, "--dest", dest, "--pubkey", other.publicDER])
        #expect(untrusted.status == 3, "\(untrusted.stderr)")
        #expect(untrusted.stderr.contains("nothing was installed"))
        #expect(!FileManager.default.fileExists(atPath: dest))

        let installed = try CLI.run(["unpack", v2, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(installed.status == 0, "\(installed.stderr)")
        let report = try installed.json()
        #expect(report["attributes"] as? String == "xattr")
        #expect(report["sequence"] as? Int == 2)
        #expect((report["files"] as? [String])?.sorted() == ["app.conf", "img/logo.png"])
        let attribute = try SignetTestSupport.run("getfattr", ["-n", "user.signet.sig", "--only-values", dest + "/app.conf"])
        #expect(attribute.stdout == (try RecordedSignatures(dest).signature(of: "app.conf")))

        let rollback = try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--json"])
        #expect(rollback.status == 1)
        #expect((try rollback.json()["error"] as? [String: Any])?["code"] as? String == "rollback")
        #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER, "--allow-downgrade"]).status == 0)

        let foreign = work.directory.file("home")
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: false)
        try work.directory.write("home/notes.txt", Data("mine".utf8))
        let refused = try CLI.run(["unpack", v2, "--dest", foreign, "--pubkey", work.publicDER])
        #expect(refused.status == 5)
        #expect(refused.stderr.contains("--force"))
        #expect(try CLI.run(["unpack", v2, "--dest", dest, "--pubkey", work.publicDER, "--max-files", "1"]).status == 4)
        #expect(try CLI.run(["unpack", v2, "--dest", dest]).status == 2, "a trusted key is required")
    }

    /// glibc stats /etc/localtime on every mktime/localtime when TZ is unset, and libzip converts
    /// each entry's DOS time when it reads or writes an archive: two system calls per file that
    /// a 50,000-file inspect spent a quarter of its time on. The binary names the zone once.
    @Test("pack, inspect and unpack of 300 files make no time-zone system call per file (TZ unset)")
    func noTimeZoneCallPerFile() throws {
        let work = try Workspace()
        let root = work.directory.file("many")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for index in 0..<300 { try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: root + "/f\(index).txt")) }
        let package = work.directory.file("many.zip")
        func stats(_ arguments: [String]) throws -> Int {
            let log = work.directory.file("strace-\(arguments[0]).log")
            // LeakSanitizer cannot run under ptrace (CI's sanitizer build): leaks are checked
            // by every other test, not by this one.
            let traced = try run(
                "strace", ["-f", "-qq", "-o", log, "-e", "trace=stat,newfstatat,statx", CLI.binary] + arguments,
                environment: sanitizerOptions(adding: "detect_leaks=0").merging(["TZ": nil]) { $1 })
            #expect(traced.status == 0, "\(arguments[0]): \(traced.stderr)")
            return try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").filter { $0.contains("/etc/localtime") }.count
        }
        let packed = try stats([
            "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "many", "--version", "1", "--out", package
        ])
        let inspected = try stats(["inspect", package, "--pubkey", work.publicDER])
        let unpacked = try stats(["unpack", package, "--dest", work.directory.file("out"), "--pubkey", work.publicDER])
        #expect(packed < 10 && inspected < 10 && unpacked < 10, "stat of /etc/localtime: pack \(packed), inspect \(inspected), unpack \(unpacked)")
    }

    @Test("sign and pack never write over the key or an input, whatever the name or link")
    func outputsOverInputs() throws {
        let work = try Workspace()
        let file = try work.directory.write("data.txt", Data("payload\n".utf8))
        let keyBefore = try contents(work.privatePEM)
        try FileManager.default.linkItem(atPath: work.privatePEM, toPath: work.directory.file("key-hardlink.pem"))
        try FileManager.default.createSymbolicLink(atPath: work.directory.file("key-link.pem"), withDestinationPath: work.privatePEM)
        let sign = ["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]
        for out in [
            work.privatePEM, "./keys/private_key.pem", work.directory.file("keys/../keys/private_key.pem"),
            work.directory.file("key-hardlink.pem"), work.directory.file("key-link.pem"), file, work.passFile
        ] {
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
        let packDist = [
            "pack", work.directory.file("dist"), "--key", work.privatePEM, "--passphrase-file", work.passFile,
            "--name", "a", "--version", "1", "--out", work.directory.file("dist/app.zip")
        ]
        #expect(try CLI.run(packDist).status == 0)
        // The second run: the package exists (exit 5 without --force); with --force the old
        // package is not packed into the new one (skipped as zip and tar skip their archive).
        #expect(try CLI.run(packDist).status == 5)
        let again = try CLI.run(packDist + ["--force", "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect((try again.json()["files"] as? [[String: Any]])?.compactMap { $0["path"] as? String } == ["a.txt"])
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
        let made = try run(
            "python3",
            ["-c", "import os, sys; os.chdir(sys.argv[1]); os.makedirs(os.path.dirname(sys.argv[2])); open(sys.argv[2], 'w').write('x')", long, relative])
        #expect(made.status == 0, "\(made.stderr)")
        let longPack = try CLI.run(["pack", work.directory.file("long"), "--out", work.directory.file("long.zip")] + key)
        #expect(longPack.status == 2 && longPack.stderr.contains("4087"), "\(longPack.status) \(longPack.stderr)")
    }

    /// Point 12: `pack` did not notice a file rewritten in place (same size) while it was read:
    /// the package was self-consistent but could hold a torn mix of two versions.
    @Test("pack refuses a resource rewritten in place while it is read (same size), and packs it once it is left alone")
    func packTornFile() throws {
        let work = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: work.file("tree"), withIntermediateDirectories: true)
        try CLIHelpers.bigFile(work.file("tree/image.bin"), size: 96 << 20)
        let key = URL(fileURLWithPath: CLIHelpers.examplePublicKey).deletingLastPathComponent().path
        let arguments = [
            "pack", work.file("tree"), "--key", key + "/private_key.pem", "--passphrase-file", key + "/passphrase.txt",
            "--name", "img", "--version", "1", "--store", "--out", work.file("img.zip")
        ]
        // A writer rewrites one byte in place, again and again, for as long as pack runs.
        let script = pythonScript("rewrite_while_running.py")
        let torn = try run("python3", ["-c", script, work.file("tree/image.bin"), CLI.binary] + arguments)
        #expect(torn.stdoutText.hasPrefix("5\n") && torn.stdoutText.contains("changed while it was being packed"), "\(torn.stdoutText)")
        #expect(!FileManager.default.fileExists(atPath: work.file("img.zip")))
        #expect(try CLI.run(arguments).status == 0)
    }

    @Test("--structured 'config/*.json' stays in config/ ('*' does not cross '/'); 'config/**/*.json' goes down; --exclude alike")
    func gitignorePatterns() throws {
        let work = try Workspace()
        let root = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: root + "/config/mod0", withIntermediateDirectories: true)
        try Data(#"{"a": 1}"#.utf8).write(to: URL(fileURLWithPath: root + "/config/app.json"))
        try Data(#"{"b": 2}"#.utf8).write(to: URL(fileURLWithPath: root + "/config/mod0/cfg0.json"))
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1"]
        func structured(_ pattern: String) throws -> [String] {
            let package = work.directory.file("p-\(UUID().uuidString).zip")
            let packed = try CLI.run(["pack", root] + key + ["--structured", pattern, "--out", package, "--json"])
            #expect(packed.status == 0, "\(packed.stderr)")
            return try #require(try packed.json()["files"] as? [[String: Any]]).filter { $0["structured"] is String }.compactMap { $0["path"] as? String }
        }
        #expect(try structured("config/*.json") == ["config/app.json"])
        #expect(try structured("config/**/*.json") == ["config/app.json", "config/mod0/cfg0.json"])
        #expect(try structured("*.json") == ["config/app.json", "config/mod0/cfg0.json"])
        #expect(try structured("mod0") == ["config/mod0/cfg0.json"])

        // reverify --exclude: a changed file in config/mod0 is still found with 'config/*.json'.
        let package = work.directory.file("app.zip")
        #expect(try CLI.run(["pack", root] + key + ["--out", package]).status == 0)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        try Data(#"{"b": 3}"#.utf8).write(to: URL(fileURLWithPath: app + "/config/mod0/cfg0.json"))
        #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--exclude", "config/*.json"]).status == 1)
        #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--exclude", "config/**/cfg*.json"]).status == 0)
        let help = try CLI.run(["help", "pack"])
        #expect(help.stdoutText.contains(".gitignore"), "\(help.stdoutText)")
    }

    @Test(
        "one overwrite rule: sign, pack, fetch, keygen and key show refuse an existing output (exit 5, nothing written) unless --force; pack skips its own output inside a packed folder"
    )
    func overwriteRule() throws {
        let work = try Workspace()
        let file = try work.directory.write("app.tar", Data("release\n".utf8))
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        #expect(try CLI.run(["sign", file] + key).status == 0)
        let signature = try contents(file + ".sig")
        // An existing output: refused before any work, the old file untouched.
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: file))
        let again = try CLI.run(["sign", file] + key)
        #expect(again.status == 5 && again.stderr.contains("already exists") && again.stderr.contains("--force"), "\(again.stderr)")
        #expect(try contents(file + ".sig") == signature)
        let out = work.directory.file("other.sig")
        try Data("keep".utf8).write(to: URL(fileURLWithPath: out))
        #expect(try CLI.run(["sign", file, "--out", out] + key).status == 5)
        #expect(try contents(out) == Data("keep".utf8))
        #expect(try CLI.run(["sign", file, "--force"] + key).status == 0)
        #expect(try contents(file + ".sig") != signature)
        #expect(try CLI.run(["verify", file, "--pubkey", work.publicDER]).status == 0)

        // pack, run twice from inside the folder it packs: the second run needs --force, and the
        // package is not packed into itself.
        let src = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try Data("a\n".utf8).write(to: URL(fileURLWithPath: src + "/a.txt"))
        let pack = ["pack", ".", "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", "r.zip", "--json"]
        #expect(try CLI.run(pack, directory: src).status == 0)
        let refused = try CLI.run(pack, directory: src)
        #expect(refused.status == 5 && refused.stderr.contains("'r.zip' already exists"), "\(refused.stderr)")
        let forced = try CLI.run(pack + ["--force"], directory: src)
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect((try forced.json()["files"] as? [[String: Any]])?.compactMap { $0["path"] as? String } == ["a.txt"], "\(forced.stdoutText)")

        // key show --pubout and keygen follow the same rule.
        let pubout = try CLI.run(["key", "show", work.privatePEM, "--passphrase-file", work.passFile, "--pubout", work.publicDER])
        #expect(pubout.status == 5 && pubout.stderr.contains("--force"), "\(pubout.stderr)")
        let keygen = try CLI.run(["keygen", "--out", work.keys, "--bits", "2048", "--passphrase-file", work.passFile])
        #expect(keygen.status == 5 && keygen.stderr.contains("--force"), "\(keygen.stderr)")
        let before = try contents(work.privatePEM)
        #expect(try CLI.run(["keygen", "--out", work.keys, "--bits", "2048", "--passphrase-file", work.passFile, "--force"]).status == 0)
        #expect(try contents(work.privatePEM) != before)

        // fetch refuses before downloading anything (no server is needed to prove it).
        let fetched = work.directory.file("fetched.bin")
        try Data("mine".utf8).write(to: URL(fileURLWithPath: fetched))
        let fetch = try CLI.run(["fetch", "https://127.0.0.1:9/nothing", "--out", fetched])
        #expect(fetch.status == 5 && fetch.stderr.contains("already exists"), "\(fetch.stderr)")
        #expect(try contents(fetched) == Data("mine".utf8))
    }

    @Test("point 8: pack --exclude leaves files and folders out; detached signatures packed as resources are warned about")
    func packExclude() throws {
        let work = try Workspace()
        let root = work.directory.file("dist")
        try FileManager.default.createDirectory(atPath: root + "/bin", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/tmp/deep", withIntermediateDirectories: true)
        for name in ["app.conf", "bin/tool", "bin/helper"] { _ = try work.directory.write("dist/" + name, Data("\(name)\n".utf8)) }
        _ = try work.directory.write("dist/tmp/deep/scratch", Data("x".utf8))
        #expect(
            try CLI.run(["sign", root + "/app.conf", root + "/bin/tool", root + "/bin/helper", "--key", work.privatePEM, "--passphrase-file", work.passFile])
                .status == 0)
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--sequence", "3"]

        let all = try CLI.run(["pack", root] + key + ["--out", work.directory.file("all.zip"), "--json"])
        #expect(all.status == 0, "\(all.stderr)")
        #expect(((try all.json()["files"]) as? [Any])?.count == 7)
        #expect(all.stderr.contains("3 resources are detached signatures of another resource") && all.stderr.contains("--exclude '*.sig'"), "\(all.stderr)")

        let out = work.directory.file("app.zip")
        let some = try CLI.run(["pack", root] + key + ["--exclude", "*.sig", "--exclude", "tmp/", "--out", out, "--json"])
        #expect(some.status == 0, "\(some.stderr)")
        #expect(!some.stderr.contains("detached"), "\(some.stderr)")
        let paths = ((try some.json()["files"]) as? [[String: Any]])?.compactMap { $0["path"] as? String }
        #expect(paths == ["app.conf", "bin/helper", "bin/tool"], "\(String(describing: paths))")
        // What unzip sees: the three resources and Signet's own entries, nothing excluded.
        let listed = try SignetTestSupport.run("unzip", ["-Z1", out]).stdoutText.split(separator: "\n").map(String.init)
        #expect(!listed.contains { $0.hasPrefix("tmp/") || (!$0.hasPrefix(".signet/") && $0.hasSuffix(".sig")) }, "\(listed)")
        #expect(try CLI.run(["unpack", out, "--dest", work.directory.file("app"), "--pubkey", work.publicDER]).status == 0)

        // Anchored patterns as elsewhere: 'bin/helper' only that file; nothing left is exit 2.
        let one = try CLI.run(
            ["pack", root] + key + ["--exclude", "*.sig", "--exclude", "/bin/helper", "--exclude", "tmp", "--out", work.directory.file("one.zip"), "--json"])
        #expect(((try one.json()["files"]) as? [[String: Any]])?.compactMap { $0["path"] as? String } == ["app.conf", "bin/tool"])
        let none = try CLI.run(["pack", root] + key + ["--exclude", "*", "--out", work.directory.file("none.zip")])
        #expect(none.status == 2 && none.stderr.contains("--exclude leaves no file"), "\(none.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("none.zip")))
    }

    @Test("point 9: pack says where the sequence came from, in text and JSON")
    func sequenceSource() throws {
        let work = try Workspace()
        let root = try PackCLITests.tree(work)
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--force"]
        let out = ["--out", work.directory.file("app.zip")]
        let now = Int(Date().timeIntervalSince1970)

        let timed = try CLI.run(["pack", root] + key + out, environment: ["SOURCE_DATE_EPOCH": nil])
        #expect(
            timed.status == 0 && timed.stdoutText.contains("is the current Unix time (no --sequence given)")
                && timed.stdoutText.contains("--sequence N"), "\(timed.stdoutText)")
        let timedJSON = try CLI.run(["pack", root] + key + out + ["--json"], environment: ["SOURCE_DATE_EPOCH": nil]).json()
        #expect(timedJSON["sequence_source"] as? String == "time")
        #expect(((timedJSON["sequence"] as? Int) ?? 0) >= now)

        let epoch = try CLI.run(["pack", root] + key + out, environment: ["SOURCE_DATE_EPOCH": "1700000000"])
        #expect(epoch.stdoutText.contains("sequence 1700000000 is SOURCE_DATE_EPOCH"), "\(epoch.stdoutText)")
        let epochJSON = try CLI.run(["pack", root] + key + out + ["--json"], environment: ["SOURCE_DATE_EPOCH": "1700000000"]).json()
        #expect(epochJSON["sequence_source"] as? String == "source-date-epoch" && epochJSON["sequence"] as? Int == 1_700_000_000)

        let given = try CLI.run(["pack", root] + key + out + ["--sequence", "142"])
        #expect(given.status == 0 && !given.stdoutText.contains("no --sequence"), "\(given.stdoutText)")
        let givenJSON = try CLI.run(["pack", root] + key + out + ["--sequence", "143", "--json"]).json()
        #expect(givenJSON["sequence_source"] as? String == "option" && givenJSON["sequence"] as? Int == 143)
    }

    @Test("inspect --bare lists the files and whether each is signed; with a key it verifies each, as unpack --bare does")
    func inspectBare() throws {
        let work = try Workspace()
        let package = try CLIHelpers.barePackage(work)
        let plain = try CLI.run(["inspect", package])
        #expect(plain.status == 1 && plain.stderr.contains("--bare"), "no manifest (exit 1), and the hint: \(plain.stderr)")
        let listed = try CLI.run(["inspect", package, "--bare", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let files = try #require(try listed.json()["files"] as? [[String: Any]])
        #expect(files.map { "\($0["path"]!):\($0["signed"]!)" } == ["a.txt:1", "sub/b.txt:1"])
        #expect(try listed.json()["verdict"] as? String == "not-checked")
        let verified = try CLI.run(["inspect", package, "--bare", "--pubkey", work.publicDER])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdoutText.contains("verified:  yes"))
        // Another key: exit 1 naming the file; an unsigned file: exit 1 with or without keys.
        let other = try Workspace()
        let wrong = try CLI.run(["inspect", package, "--bare", "--pubkey", other.publicDER, "--json"])
        #expect(wrong.status == 1)
        #expect((try wrong.json()["error"] as? [String: Any])?["entry"] as? String == "a.txt")
        let withUnsigned = try CLIHelpers.barePackage(work, unsigned: true, name: "unsigned.zip")
        #expect(try CLI.run(["inspect", withUnsigned, "--bare"]).status == 1)
        let refused = try CLI.run(["inspect", withUnsigned, "--bare", "--pubkey", work.publicDER])
        #expect(refused.status == 1 && refused.stderr.contains("'c.txt' has no signature"), "\(refused.stderr)")
    }

    @Test("tiny files that deflate would enlarge are stored; compressible ones are deflated")
    func tinyFilesStored() throws {
        let work = try Workspace()
        let root = work.directory.file("tiny")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data("Hello from Signet!\n".utf8).write(to: URL(fileURLWithPath: root + "/hello.txt"))
        try Data().write(to: URL(fileURLWithPath: root + "/empty"))
        try Data(String(repeating: "key = value\n", count: 40).utf8).write(to: URL(fileURLWithPath: root + "/repeat.conf"))
        let package = work.directory.file("tiny.zip")
        let packed = try CLI.run([
            "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "t", "--version", "1", "--out", package, "--json"
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        let inspected = try CLI.run(["inspect", package, "--json"])
        let files = try #require(try inspected.json()["files"] as? [[String: Any]])
        var methods: [String: String] = [:]
        for file in files {
            methods[file["path"] as! String] = file["compression"] as? String
            if file["compression"] as? String == "deflated" {
                #expect((file["compressed_size"] as! Int) < (file["size"] as! Int), "deflated only where it shrinks: \(file)")
            }
        }
        #expect(methods == ["empty": "stored", "hello.txt": "stored", "repeat.conf": "deflated"])
        // Info-ZIP reads both.
        #expect(try SignetTestSupport.run("unzip", ["-tq", package]).status == 0)
    }
}
