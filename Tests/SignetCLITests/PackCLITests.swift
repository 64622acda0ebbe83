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
        let packed = try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", "app", "--version", "1.2.3", "--sequence", "5", "--out", package, "--json"])
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
            return try CLI.peakRSS(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                    "--name", "many", "--version", "1", "--out", out] + extra)
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
            guard !CLI.underAddressSanitizer else { continue }   // redzones and quarantine per allocation
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
        let failed = try CLI.run(["pack", big, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", "n", "--version", "1", "--out", out])
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
            let traced = try run("strace", ["-f", "-qq", "-o", log, "-e", "trace=stat,newfstatat,statx", CLI.binary] + arguments,
                                 environment: sanitizerOptions(adding: "detect_leaks=0").merging(["TZ": nil]) { $1 })
            #expect(traced.status == 0, "\(arguments[0]): \(traced.stderr)")
            return try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").filter { $0.contains("/etc/localtime") }.count
        }
        let packed = try stats(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "many", "--version", "1", "--out", package])
        let inspected = try stats(["inspect", package, "--pubkey", work.publicDER])
        let unpacked = try stats(["unpack", package, "--dest", work.directory.file("out"), "--pubkey", work.publicDER])
        #expect(packed < 10 && inspected < 10 && unpacked < 10, "stat of /etc/localtime: pack \(packed), inspect \(inspected), unpack \(unpacked)")
    }
}
