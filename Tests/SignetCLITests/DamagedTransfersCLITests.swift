import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The update loop against damaged large entries, flaky links, other servers and
/// other users.
@Suite("Damaged and interrupted transfers: large damaged entries, links cut inside entries, runs cut mid-update, encodings", .serialized)
struct DamagedTransfersCLITests {
    /// One nginx for the suite.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("DamagedTransfersCLITests") }

    /// 9 MiB of random bytes (stored: random data does not deflate) or of words (deflated).
    static func largeResource(deflated: Bool) -> Data {
        let size = 9 << 20
        if !deflated {
            var generator = SystemRandomNumberGenerator()
            return Data((0..<(size / 8)).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } })
        }
        let words = ["alpha ", "beta ", "gamma ", "delta ", "signet ", "package ", "omega\n"].map { Data($0.utf8) }
        var text = Data(capacity: size)
        var state: UInt32 = 12345
        while text.count < size {
            state = state &* 1_103_515_245 &+ 12345
            text.append(words[Int(state >> 16) % words.count])
        }
        return text
    }

    /// The package at `package` with one byte of `entry`'s data flipped, at `position` (0, 0.5
    /// or 1: start, middle, end) of that data, written to `out`. Python's zipfile finds the data.
    static func damage(_ package: String, entry: String, at position: Double, out: String) throws {
        let script = pythonScript("damage_entry.py")
        let result = try run("python3", ["-c", script, package, entry, "\(position)", out])
        guard result.status == 0 else { throw SupportError("damaging the package failed: \(result.stderr)") }
    }

    /// A run refused the usual way: exit 1, 4 or 5 with signet's own message, never a signal
    /// or a backtrace.
    static func expectRefused(_ result: ProcessResult, _ what: String) {
        #expect([1, 4, 5].contains(result.status), "\(what): exit \(result.status) \(result.stderr.suffix(600))")
        #expect(
            !result.stderr.contains("Backtrace") && !result.stderr.contains("Fatal error") && result.stderr.contains("signet: error:"),
            "\(what): \(result.stderr.suffix(600))")
    }

    // MARK: Point 0: no crash, whatever breaks inside a large entry

    @Test(
        "a large stored or deflated resource damaged at its start, middle or end: unpack (new DIR and over an installed tree), inspect and unpack URL refuse it, leaving nothing"
    )
    func damagedLargeEntries() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        for deflated in [false, true] {
            let kind = deflated ? "deflated" : "stored"
            let package = work.directory.file("\(kind).zip")
            let big = Self.largeResource(deflated: deflated)
            try CLIHelpers.pack(work, ["big.bin": big, "small.txt": Data("small\n".utf8)], sequence: 2, out: package)
            // Installed: release 1, whose big.bin differs, so that every path must read the damaged entry.
            let older = work.directory.file("\(kind)-1.zip")
            try CLIHelpers.pack(work, ["big.bin": big.prefix(big.count - 4096), "small.txt": Data("small\n".utf8)], sequence: 1, out: older)
            let method = try run("python3", ["-c", "import zipfile,sys; print(zipfile.ZipFile(sys.argv[1]).getinfo('big.bin').compress_type)", package])
            #expect(method.stdoutText.hasPrefix(deflated ? "8" : "0"), "\(kind): compression method \(method.stdoutText)")
            let installed = work.directory.file("installed-\(kind)")
            let first = try CLI.run(["unpack", older, "--dest", installed, "--pubkey", work.publicDER])
            try #require(first.status == 0, "\(first.stderr)")
            for position in [0.0, 0.5, 1.0] {
                let what = "\(kind) damaged at \(position)"
                let bad = work.directory.file("bad-\(kind)-\(position).zip")
                try Self.damage(package, entry: "big.bin", at: position, out: bad)
                let fresh = work.directory.file("fresh-\(kind)-\(position)")
                Self.expectRefused(try CLI.run(["unpack", bad, "--dest", fresh, "--pubkey", work.publicDER]), what + ", unpack into a new DIR")
                #expect(!FileManager.default.fileExists(atPath: fresh), "\(what): no DIR")
                Self.expectRefused(try CLI.run(["unpack", bad, "--dest", installed, "--pubkey", work.publicDER, "--force"]), what + ", unpack over DIR")
                #expect(try CLI.run(["reverify", installed, "--pubkey", work.publicDER]).status == 0, "\(what): the installed tree unchanged")
                Self.expectRefused(try CLI.run(["inspect", bad, "--pubkey", work.publicDER]), what + ", inspect")
                try? FileManager.default.removeItem(atPath: server.www + "/damaged.zip")
                try FileManager.default.copyItem(atPath: bad, toPath: server.www + "/damaged.zip")
                let viaURL = work.directory.file("url-\(kind)-\(position)")
                Self.expectRefused(
                    try CLI.run(["unpack", server.url("damaged.zip"), "--dest", viaURL, "--pubkey", work.publicDER, "--tls-ca", server.root]),
                    what + ", unpack URL")
                let overURL = try CLI.run([
                    "unpack", server.url("damaged.zip"), "--dest", installed, "--pubkey", work.publicDER, "--tls-ca", server.root, "--force"
                ])
                Self.expectRefused(overURL, what + ", unpack URL over DIR")
                #expect(try CLI.run(["reverify", installed, "--pubkey", work.publicDER]).status == 0, "\(what): the installed tree unchanged")
                // The lock of the installed DIR stays (it is how the next run waits); nothing else.
                let beside = try FileManager.default.contentsOfDirectory(atPath: work.directory.path)
                    .filter { $0.contains(".signet-") && !$0.hasPrefix(".installed-") || $0.contains("-staging") || $0.contains("-download") }
                #expect(beside.isEmpty, "\(what): staging, downloads and locks of new DIRs removed: \(beside)")
            }
        }
    }

    // MARK: Point 2: transport failures are transport failures

    /// Where each entry's data starts in `package` (name → file offset), and the central
    /// directory's offset under "".
    static func offsets(_ package: String) throws -> [String: Int] {
        let script = pythonScript("entry_data_offsets.py")
        let result = try run("python3", ["-c", script, package])
        guard result.status == 0, let map = try JSONSerialization.jsonObject(with: result.stdout) as? [String: Int] else {
            throw SupportError("reading the offsets failed: \(result.stderr)")
        }
        return map
    }

    @Test(
        "a link cut (or stalled past --max-time) inside a 20 MiB stored entry, a deflated one, .signet/ or the directory is exit 5 network-error naming the URL, the staging kept; the next run completes"
    )
    func transportFailuresInsideEntries() throws {
        let work = try Workspace()
        let stored = Self.largeResource(deflated: false) + Self.largeResource(deflated: false) + Self.largeResource(deflated: false).prefix(2 << 20)
        let deflated = Self.largeResource(deflated: true)
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        let small = Data("small\n".utf8)
        try CLIHelpers.pack(work, ["stored.bin": stored.prefix(1000), "deflated.txt": deflated.prefix(1000), "small.txt": small], sequence: 1, out: v1)
        try CLIHelpers.pack(work, ["stored.bin": stored, "deflated.txt": deflated, "small.txt": small], sequence: 2, out: v2)
        let at = try Self.offsets(v2)
        let etag = ["ETag": "\"v2\""]
        let server = try ScriptedServer(script: [:])
        try FileManager.default.copyItem(atPath: v2, toPath: server.file("app.zip"))
        let places: [(String, Int, Bool)] = [
            ("inside the stored entry", at["stored.bin"]! + stored.count / 2, false),
            ("inside the deflated entry", at["deflated.txt"]! + 100_000, false),
            ("inside .signet/manifest.json", at[".signet/manifest.json"]! + 10, false),
            ("inside the central directory", at[""]! + 40, false),
            ("stalled inside the stored entry, --max-time", at["stored.bin"]! + 5_000_000, true)
        ]
        for (place, offset, stall) in places {
            let dest = work.directory.file("app")
            try? FileManager.default.removeItem(atPath: dest)
            try #require(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            try server.replace(script: ["app.zip": [.init(headers: etag, honourRange: true, cutAt: offset, stall: stall)]])
            let failed = try CLI.run(
                [
                    "unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http",
                    "--retries", "0", "--json"
                ] + (stall ? ["--max-time", "4"] : []))
            #expect(failed.status == 5 && CLIHelpers.errorCode(failed) == "network-error", "\(place): \(failed.status) \(failed.stdoutText) \(failed.stderr)")
            #expect(failed.stderr.contains(server.url("app.zip")), "\(place): names the URL: \(failed.stderr)")
            #expect(try contents(dest + "/stored.bin") == stored.prefix(1000), "\(place): DIR as it was")
            let kept = try FileManager.default.contentsOfDirectory(atPath: work.directory.path).filter {
                $0.hasPrefix(".app.signet-") && !isKeptBesideDestination($0)
            }
            if place.contains("entry") {
                #expect(kept.count == 1, "\(place): the staging kept for the next run: \(kept)")
            }
            try server.replace(script: ["app.zip": [.init(headers: etag, honourRange: true)]])
            let resumed = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"])
            #expect(resumed.status == 0, "\(place): the next run completes: \(resumed.stderr)")
            #expect(try contents(dest + "/stored.bin") == stored && contents(dest + "/deflated.txt") == deflated, "\(place)")
            let left = try FileManager.default.contentsOfDirectory(atPath: work.directory.path).filter {
                $0.hasPrefix(".app.signet-") && !isKeptBesideDestination($0)
            }
            #expect(left.isEmpty, "\(place): nothing left once it completed: \(left)")
        }
    }

    // MARK: Point 1: one staging tree per DIR, continued

    /// Bytes of the blocks every file beside `dest` (its lock aside) takes, as `du` counts them.
    static func spaceBeside(_ dest: String) throws -> Int {
        let parent = (dest as NSString).deletingLastPathComponent, name = (dest as NSString).lastPathComponent
        let beside = try FileManager.default.contentsOfDirectory(atPath: parent).filter { $0.hasPrefix(".\(name).signet-") && !isKeptBesideDestination($0) }
        guard !beside.isEmpty else { return 0 }
        let du = try run("du", ["-s", "-B1", "-c"] + beside.map { parent + "/" + $0 })
        return Int(du.stdoutText.split(separator: "\n").last?.split(separator: "\t").first ?? "") ?? -1
    }

    @Test(
        "seven runs cut inside a changed file leave one staging tree beside DIR (<= 1.1x the new tree), never a copy per run; a good server then completes fetching only what no run finished"
    )
    func interruptedUpdatesDoNotMultiply() throws {
        let work = try Workspace()
        let size = 3 << 20
        var v1: [String: Data] = [:]
        for name in ["a", "b", "c", "d", "e", "f"] { v1["\(name).bin"] = CLIHelpers.randomData(size) }
        var v2 = v1
        v2["b.bin"] = CLIHelpers.randomData(size) // fetched whole by the first run
        v2["e.bin"] = CLIHelpers.randomData(size) // the link drops inside it, every time
        let p1 = work.directory.file("v1.zip"), p2 = work.directory.file("v2.zip")
        try CLIHelpers.pack(work, v1, sequence: 1, out: p1)
        try CLIHelpers.pack(work, v2, sequence: 2, out: p2)
        let at = try Self.offsets(p2)
        let dest = work.directory.file("app")
        try #require(try CLI.run(["unpack", p1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true, cutAt: at["e.bin"]! + size / 2)]])
        try FileManager.default.copyItem(atPath: p2, toPath: server.file("app.zip"))
        let arguments = ["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"]
        let newTree = 6 * size
        var spaces: [Int] = []
        for attempt in 1...7 {
            let failed = try CLI.run(arguments)
            #expect(failed.status == 5 && CLIHelpers.errorCode(failed) == "network-error", "attempt \(attempt): \(failed.status) \(failed.stderr)")
            let parent = work.directory.path
            let trees = try FileManager.default.contentsOfDirectory(atPath: parent).filter { $0.hasPrefix(".app.signet-") && !isKeptBesideDestination($0) }
            #expect(trees.count == 1, "attempt \(attempt): one staging tree beside DIR: \(trees)")
            spaces.append(try Self.spaceBeside(dest))
            #expect(try contents(dest + "/e.bin") == v1["e.bin"], "attempt \(attempt): DIR as it was")
        }
        #expect(spaces.allSatisfy { $0 > 0 && $0 <= newTree + newTree / 10 }, "bytes beside DIR after each attempt: \(spaces) (new tree \(newTree))")
        try server.replace(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true)]])
        let done = try CLI.run(arguments)
        #expect(done.status == 0, "\(done.stderr)")
        let transfer = try #require(try done.json()["transfer"] as? [String: Any], "\(done.stdoutText)")
        let reused = transfer["files_reused"] as? Int ?? -1, resumed = transfer["files_resumed"] as? Int ?? -1,
            fetched = transfer["files_fetched"] as? Int ?? -1
        #expect(reused == 4 && resumed == 1 && fetched == 1, "4 unchanged, b.bin from the first run, e.bin fetched: \(transfer)")
        // e.bin goes on from the byte where the runs were cut (the same package: issue 51).
        let downloaded = transfer["bytes_downloaded"] as? Int ?? Int.max, continued = transfer["file_bytes_resumed"] as? Int ?? -1
        #expect(continued > size / 4 && continued <= size / 2, "e.bin continued where it was cut: \(transfer)")
        #expect(
            downloaded >= size - continued && downloaded <= size - continued + (512 << 10),
            "only the rest of e.bin and the package's own entries: \(downloaded) bytes")
        for (name, data) in v2 { #expect(try contents(dest + "/" + name) == data, "\(name)") }
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
        #expect(try Self.spaceBeside(dest) == 0, "nothing left beside DIR")
    }

    // MARK: Point 8: a reused file's signature is its own

    /// Each entry's bytes in `package` (local header to the end of its data), and where the
    /// central directory starts.
    static func entrySpans(_ package: String) throws -> (spans: [String: Range<Int>], directory: Int) {
        let script = pythonScript("entry_spans.py")
        let result = try run("python3", ["-c", script, package])
        guard result.status == 0, let map = try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any],
            let spans = map["spans"] as? [String: [Int]], let directory = map["directory"] as? Int
        else {
            throw SupportError("reading the entries failed: \(result.stderr)")
        }
        return (spans.mapValues { $0[0]..<$0[1] }, directory)
    }

    /// The byte ranges a ScriptedServer was asked for (`bytes=A-B`; the suffix probe aside).
    static func askedRanges(_ server: ScriptedServer, size: Int) -> [Range<Int>] {
        // Every range of every request (several in one: "bytes=A-B,C-D").
        server.requests.flatMap { line -> [Range<Int>] in
            guard let header = line.split(separator: " ").last, header.hasPrefix("bytes=") else { return [] }
            return header.dropFirst(6).split(separator: ",").compactMap { spec -> Range<Int>? in
                let bounds = spec.split(separator: "-", omittingEmptySubsequences: false)
                guard bounds.count == 2 else { return nil }
                if bounds[0].isEmpty, let suffix = Int(bounds[1]) { return max(0, size - suffix)..<size }
                guard let start = Int(bounds[0]), let end = Int(bounds[1]) else { return nil }
                return start..<(end + 1)
            }
        }
    }

    @Test(
        "a ranged update takes unchanged files' signatures from their own attributes (PKCS#1 v1.5): their signature entries are never fetched; a PSS package or a new key reads them from the package and still installs"
    )
    func reusedSignaturesNotFetched() throws {
        let work = try Workspace()
        var files: [String: Data] = [:]
        for index in 0..<600 { files[String(format: "f%03d.bin", index)] = CLIHelpers.randomData(4096) }
        let changed = ["f010.bin", "f300.bin", "f590.bin"]
        var v2 = files
        for name in changed { v2[name] = CLIHelpers.randomData(4096) }
        let other = try work.opensslKeyPair("other", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        let cases: [(String, [String], [String])] = [
            ("PKCS#1 v1.5, same key", [], []),
            ("PSS", ["--algorithm", "rsa-pss-sha256"], []),
            ("a new key", [], ["--pubkey", other.publicDER])
        ]
        for (what, algorithm, trust) in cases {
            let v1Package = work.directory.file("v1.zip"), v2Package = work.directory.file("v2.zip")
            try? FileManager.default.removeItem(atPath: v1Package)
            try? FileManager.default.removeItem(atPath: v2Package)
            try CLIHelpers.pack(work, files, sequence: 1, out: v1Package, extra: algorithm)
            if what == "a new key" {
                let tree = try TemporaryDirectory()
                for (name, data) in v2 { try data.write(to: URL(fileURLWithPath: tree.file(name))) }
                let packed = try CLI.run([
                    "pack", tree.path, "--key", other.privateKey, "--name", "app", "--version", "2", "--sequence", "2", "--out", v2Package
                ])
                try #require(packed.status == 0, "\(packed.stderr)")
            } else {
                try CLIHelpers.pack(work, v2, sequence: 2, out: v2Package, extra: algorithm)
            }
            let dest = work.directory.file("app")
            try? FileManager.default.removeItem(atPath: dest)
            try #require(try CLI.run(["unpack", v1Package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true)]])
            try FileManager.default.copyItem(atPath: v2Package, toPath: server.file("app.zip"))
            let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--json"] + trust)
            #expect(result.status == 0, "\(what): \(result.stderr)")
            let transfer = try #require(try result.json()["transfer"] as? [String: Any], "\(what)")
            #expect(transfer["files_fetched"] as? Int == 3 && transfer["files_reused"] as? Int == 597, "\(what): \(transfer)")
            for (name, data) in v2 { #expect(try contents(dest + "/" + name) == data, "\(what): \(name)") }
            #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER] + trust).status == 0, "\(what)")

            let size = try FileManager.default.attributesOfItem(atPath: v2Package)[.size] as? Int ?? 0
            let (spans, directory) = try Self.entrySpans(v2Package)
            let asked = Self.askedRanges(server, size: size)
            // The last 64 KiB before the directory are read with it, whatever the plan.
            let kept = max(0, directory - 65_557)
            let unchangedSignatures = files.keys.filter { !changed.contains($0) }.compactMap { spans[".signet/sigs/\($0).sig"] }.filter {
                $0.upperBound <= kept
            }
            let read = unchangedSignatures.filter { span in asked.contains { $0.overlaps(span) } }
            if what == "PKCS#1 v1.5, same key" {
                #expect(unchangedSignatures.count > 300, "the package has signature entries below the directory's neighbourhood")
                #expect(read.isEmpty, "\(what): \(read.count) unchanged files' signature entries fetched; asked \(asked)")
                let wanted = changed.compactMap { spans[".signet/sigs/\($0).sig"] }
                #expect(wanted.allSatisfy { span in asked.contains { $0.overlaps(span) } }, "\(what): the changed files' signatures fetched")
            } else {
                #expect(
                    read.count == unchangedSignatures.count, "\(what): every signature read from the package: \(read.count) of \(unchangedSignatures.count)")
            }
        }
    }

    // MARK: Point 5: encodings

    @Test("a server that gzips anyway: fetch (with and without --signature), unpack URL, inspect URL and update refuse it by name, exit 5, nothing written")
    func contentEncodingRefused() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try CLIHelpers.pack(work, ["a.txt": Data(String(repeating: "text ", count: 20_000).utf8)], sequence: 3, out: package)
        let gzip = ["Content-Encoding": "gzip", "ETag": "\"e\""]
        // Two one-key repositories on the server: one whose timestamp comes gzipped, one whose
        // package does.
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        let server = try ScriptedServer(script: [:])
        var encoded: [String: String] = ["app.zip": package]
        for site in ["meta", "pkg"] {
            let repo = server.file(site)
            for step in [
                ["repo", "init", repo] + key, ["repo", "add", repo, package, "--channel", "stable"] + key,
                ["repo", "refresh", repo, "--snapshot-key", work.privatePEM, "--timestamp-key", work.privatePEM, "--passphrase-file", work.passFile],
                ["tuf", "init", "--metadata-dir", work.directory.file("tuf-" + site), repo + "/metadata/1.root.json"]
            ] {
                let made = try CLI.run(step)
                try #require(made.status == 0, "\(step.prefix(2)): \(made.stderr)")
            }
            let target = try #require(try FileManager.default.contentsOfDirectory(atPath: repo + "/targets").first { $0.hasSuffix(".zip") })
            encoded[site == "meta" ? "meta/metadata/timestamp.json" : "pkg/targets/" + target] = server.file(
                site == "meta" ? "meta/metadata/timestamp.json" : "pkg/targets/" + target)
        }
        try server.replace(script: Dictionary(uniqueKeysWithValues: encoded.keys.map { ($0, [ScriptedServer.Answer(headers: gzip, honourRange: true)]) }))
        // What a gzip-forcing server sends: the gzip of each file, with the header.
        for (name, source) in encoded {
            let copy = work.directory.file("plain-" + name.replacingOccurrences(of: "/", with: "_"))
            try FileManager.default.copyItem(atPath: source, toPath: copy)
            let made = try run(
                "python3", ["-c", "import gzip,sys; open(sys.argv[2],'wb').write(gzip.compress(open(sys.argv[1],'rb').read()))", copy, server.file(name)])
            try #require(made.status == 0)
        }
        try run("openssl", ["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", server.file("app.zip.sig"), package])
        let out = work.directory.file("fetched.zip"), dest = work.directory.file("dest")
        let common = ["--allow-http", "--retries", "0", "--json"]
        let runs: [(String, [String])] = [
            ("fetch", ["fetch", server.url("app.zip"), "--out", out] + common),
            (
                "fetch --signature",
                ["fetch", server.url("app.zip"), "--out", out, "--signature", server.url("app.zip.sig"), "--pubkey", work.publicDER] + common
            ),
            ("unpack URL", ["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER] + common),
            ("unpack URL --full-download", ["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--full-download"] + common),
            ("inspect URL", ["inspect", server.url("app.zip"), "--pubkey", work.publicDER] + common),
            (
                "update (encoded metadata)",
                [
                    "update", "--repository", server.url("meta/metadata/"), "--tuf-metadata", work.directory.file("tuf-meta"),
                    "--channel", "stable", "--dest", dest
                ] + common
            ),
            (
                "update (encoded package)",
                [
                    "update", "--repository", server.url("pkg/metadata/"), "--tuf-metadata", work.directory.file("tuf-pkg"),
                    "--channel", "stable", "--dest", dest
                ] + common
            )
        ]
        for (what, arguments) in runs {
            let result = try CLI.run(arguments)
            #expect(result.status == 5 && CLIHelpers.errorCode(result) == "content-encoding", "\(what): \(result.status) \(result.stdoutText) \(result.stderr)")
            #expect(result.stderr.contains("Content-Encoding: gzip") && result.stderr.contains("127.0.0.1:\(server.port)"), "\(what): \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: out) && !FileManager.default.fileExists(atPath: dest), "\(what): nothing written")
            let beside = try FileManager.default.contentsOfDirectory(atPath: work.directory.path).filter {
                $0.contains("signet-") && !isKeptBesideDestination($0)
            }
            #expect(beside.isEmpty, "\(what): nothing beside: \(beside)")
        }
        #expect(server.requests.contains { $0.hasPrefix("app.zip ") }, "the package was asked for")
        #expect(
            !server.acceptEncodings.isEmpty && server.acceptEncodings.allSatisfy { $0 == "identity" },
            "every request asks for identity: \(server.acceptEncodings)")
    }
}
