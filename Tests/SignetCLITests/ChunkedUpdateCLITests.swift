import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 40, points 1, 2 and 5: large resources carry a chunk index in the signed manifest; an
/// update over ranges rebuilds them from the chunks the installed copy holds and fetches only
/// the rest, against a real nginx (one for the suite).
@Suite("Chunked updates: large files rebuilt from the chunks a device holds", .serialized)
struct ChunkedUpdateCLITests {
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("ChunkedUpdateCLITests") }

    static func pack(_ work: Workspace, _ tree: String, sequence: Int, out: String, _ extra: [String] = []) throws {
        let packed = try CLI.run(
            [
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app",
                "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out + ".new"
            ] + extra)
        guard packed.status == 0 else { throw SupportError("pack failed: \(packed.stderr)") }
        guard rename(out + ".new", out) == 0 else { throw SupportError("rename failed: \(errno)") }
    }

    /// Every resource of the package with its compression method and, when it has a chunk index,
    /// whether each chunk's SHA-256 matches the stored entry's bytes at its offset (Python's
    /// zipfile and hashlib: read independently of Signet).
    /// This folder, where chunk_index.py (the indexes read independently) is.
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path

    static func chunkCheck(_ package: String) throws -> [String: (method: Int, chunks: Int, valid: Bool)] {
        let script = pythonScript("chunked_update_check.py")
        let result = try run(try which("python3"), ["-c", script, package, here])
        guard result.status == 0, let object = try JSONSerialization.jsonObject(with: result.stdout) as? [String: [Any]] else {
            throw SupportError("python: \(result.stderr)")
        }
        return object.mapValues { ($0[0] as? Int ?? -1, $0[1] as? Int ?? -1, $0[2] as? Bool ?? false) }
    }

    @Test(
        "pack: resources of at least --chunk-threshold bytes, stored or deflated (issue 51), get a chunk index every chunk of which hashes right; smaller ones, and --chunk-threshold 0, have none; --store keeps compressible ones stored"
    )
    func packed() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        _ = try tree.writeRandom("big.img", count: 6 << 20)
        _ = try tree.write("notes.txt", Data(String(repeating: "compressible text\n", count: 400_000).utf8))
        _ = try tree.writeRandom("small.bin", count: 100_000)
        let package = work.directory.file("app.zip")
        try Self.pack(work, tree.path, sequence: 1, out: package)
        let checked = try Self.chunkCheck(package)
        #expect(checked["big.img"]?.method == 0 && (checked["big.img"]?.chunks ?? 0) > 20 && checked["big.img"]?.valid == true, "\(checked)")
        // 7 MiB of text: deflated, in segments whose offsets the manifest lists (issue 51).
        #expect(checked["notes.txt"]?.method == 8 && (checked["notes.txt"]?.chunks ?? 0) > 0 && checked["notes.txt"]?.valid == true, "\(checked)")
        #expect(checked["small.bin"]?.chunks == 0, "\(checked)")
        let stored = work.directory.file("stored.zip")
        try Self.pack(work, tree.path, sequence: 1, out: stored, ["--store"])
        let storedCheck = try Self.chunkCheck(stored)
        #expect(
            storedCheck["notes.txt"]?.method == 0 && (storedCheck["notes.txt"]?.chunks ?? 0) > 0 && storedCheck["notes.txt"]?.valid == true, "\(storedCheck)")
        let plain = work.directory.file("plain.zip")
        try Self.pack(work, tree.path, sequence: 1, out: plain, ["--chunk-threshold", "0"])
        let unchunked = try Self.chunkCheck(plain)
        #expect(unchunked.values.allSatisfy { $0.chunks == 0 } && unchunked["big.img"]?.method == 0, "\(unchunked)")
        // The indexes are in the chunk-index entry (issue 51): the manifest has no inline ones.
        let manifest = try run("unzip", ["-p", package, ".signet/manifest.json"])
        #expect(!String(decoding: manifest.stdout, as: UTF8.self).contains("\"chunks\""))
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("app"), "--pubkey", work.publicDER]).status == 0)
    }

    @Test(
        "1 MiB inserted into a 24 MiB file: the update fetches about that MiB (≤ 3% + 1 MiB), rebuilds the rest from the installed copy, and the report equals nginx's log; a locally damaged copy is still rebuilt right"
    )
    func insertion() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: tree.file("data"), withIntermediateDirectories: true)
        let original = try tree.writeRandom("data/big.img", count: 24 << 20)
        _ = try tree.write("version.txt", Data("1\n".utf8))
        try FileManager.default.createDirectory(atPath: server.www + "/insert", withIntermediateDirectories: true)
        try Self.pack(work, tree.path, sequence: 1, out: server.www + "/insert/app.zip")
        let dest = work.directory.file("app")
        let unpack = ["unpack", server.url("insert/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"]
        #expect(try CLI.run(unpack).status == 0)

        var bytes = try contents(original)
        bytes.insert(contentsOf: Data(try randomBytes(1 << 20)), at: 12 << 20)
        try bytes.write(to: URL(fileURLWithPath: original))
        _ = try tree.write("version.txt", Data("2\n".utf8))
        try Self.pack(work, tree.path, sequence: 2, out: server.www + "/insert/app.zip")
        let offset = server.accessLogSize
        let update = try CLI.run(unpack)
        #expect(update.status == 0, "\(update.stderr)")
        #expect(try contents(dest + "/data/big.img") == bytes)
        let transfer = try #require(try update.json()["transfer"] as? [String: Any], "\(update.stdoutText)")
        let downloaded = transfer["bytes_downloaded"] as? Int ?? .max
        #expect(downloaded <= bytes.count * 3 / 100 + (1 << 20), "\(transfer)")
        // Bounds that hold for any random content: chunk lengths vary (16 to 256 KiB), so the
        // count of chunks does not; at most the chunk on each side of the insertion is lost.
        let reusedBytes = transfer["chunk_bytes_reused"] as? Int ?? 0
        let fetchedBytes = transfer["chunk_bytes_fetched"] as? Int ?? .max
        #expect(reusedBytes >= (24 << 20) - 2 * (256 << 10) && fetchedBytes <= (1 << 20) + 4 * (256 << 10), "\(transfer)")
        #expect(
            reusedBytes + fetchedBytes == bytes.count && (transfer["chunks_reused"] as? Int ?? 0) >= ((24 << 20) - 2 * (256 << 10)) / (256 << 10), "\(transfer)"
        )
        let logged = try server.answers(of: "insert/app.zip", from: offset)
        #expect(logged.count == transfer["requests"] as? Int && logged.reduce(0) { $0 + $1.bytes } == downloaded, "\(logged) \(transfer)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // v3 (one more MiB inserted) onto a copy damaged in place at 3 MiB: the chunk there
        // does not hash right, so it is fetched instead; the result is still exactly v3.
        bytes.insert(contentsOf: Data(try randomBytes(1 << 20)), at: 20 << 20)
        try bytes.write(to: URL(fileURLWithPath: original))
        try Self.pack(work, tree.path, sequence: 3, out: server.www + "/insert/app.zip")
        let damaged = try FileHandle(forWritingTo: URL(fileURLWithPath: dest + "/data/big.img"))
        try damaged.seek(toOffset: 3 << 20)
        try damaged.write(contentsOf: Data(repeating: 0x55, count: 100))
        try damaged.close()
        let again = try CLI.run(unpack)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try contents(dest + "/data/big.img") == bytes)
        let second = try #require(try again.json()["transfer"] as? [String: Any])
        #expect((second["chunks_fetched"] as? Int ?? 0) >= 2 && (second["bytes_downloaded"] as? Int ?? .max) <= bytes.count * 3 / 100 + (1 << 20), "\(second)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // Issue 48, point 12: v4 (100 bytes changed near the end) onto a copy damaged in 24 places, one a
        // MiB: each damaged chunk was one request (856 for 64 MiB). They are planned at the
        // first one found: a few requests carry them all, and the result is still exactly v4.
        bytes.replaceSubrange((25 << 20)..<((25 << 20) + 100), with: Data(repeating: 0x77, count: 100))
        try bytes.write(to: URL(fileURLWithPath: original))
        try Self.pack(work, tree.path, sequence: 4, out: server.www + "/insert/app.zip")
        let spread = try FileHandle(forWritingTo: URL(fileURLWithPath: dest + "/data/big.img"))
        for mib in 1...24 {
            try spread.seek(toOffset: UInt64(mib) << 20)
            try spread.write(contentsOf: Data(repeating: 0x33, count: 64))
        }
        try spread.close()
        let before = server.accessLogSize
        let repaired = try CLI.run(unpack)
        #expect(repaired.status == 0, "\(repaired.stderr)")
        #expect(try contents(dest + "/data/big.img") == bytes)
        let third = try #require(try repaired.json()["transfer"] as? [String: Any])
        let requests = try server.answers(of: "insert/app.zip", from: before)
        #expect((third["chunks_fetched"] as? Int ?? 0) >= 20 && requests.count <= 8, "\(requests.count) requests: \(third)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
    }

    @Test(
        "1% of a 16 MiB file's 4 KiB blocks changed in place: only those blocks are fetched (by their block hashes), the rest of each chunk read from the installed copy"
    )
    func blocksInPlace() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        let original = try tree.writeRandom("image.img", count: 16 << 20)
        try FileManager.default.createDirectory(atPath: server.www + "/blocks", withIntermediateDirectories: true)
        try Self.pack(work, tree.path, sequence: 1, out: server.www + "/blocks/app.zip")
        let dest = work.directory.file("app")
        let unpack = ["unpack", server.url("blocks/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"]
        #expect(try CLI.run(unpack).status == 0)
        var bytes = try contents(original)
        var generator = SystemRandomNumberGenerator()
        let changed = Array((0..<(bytes.count / 4096)).shuffled(using: &generator).prefix(bytes.count / 4096 / 100))
        for block in changed {
            bytes.replaceSubrange((block * 4096)..<((block + 1) * 4096), with: Data(try randomBytes(4096)))
        }
        try bytes.write(to: URL(fileURLWithPath: original))
        try Self.pack(work, tree.path, sequence: 2, out: server.www + "/blocks/app.zip")
        let update = try CLI.run(unpack)
        #expect(update.status == 0, "\(update.stderr)")
        #expect(try contents(dest + "/image.img") == bytes)
        let transfer = try #require(try update.json()["transfer"] as? [String: Any], "\(update.stdoutText)")
        // The changed blocks (1%), their part headers and the manifest with both indexes: within 2% + 1 MiB.
        #expect((transfer["chunk_bytes_fetched"] as? Int ?? .max) == changed.count * 4096, "\(transfer)")
        #expect((transfer["bytes_downloaded"] as? Int ?? .max) <= bytes.count / 50 + (1 << 20), "\(transfer)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
    }

    @Test(
        "a chunked update whose package is replaced on the server: once, it is read again and installs; twice, package-changed (exit 5), DIR unchanged; stored and deflated chunks (issue 51)",
        arguments: ["stored", "deflated"])
    func replacedMidway(_ kind: String) throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        let original = kind == "stored" ? try tree.writeRandom("big.img", count: 8 << 20) : try tree.write("big.img", DeflatedChunksCLITests.programs(8 << 20))
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try Self.pack(work, tree.path, sequence: 1, out: v1)
        var bytes = try contents(original)
        bytes.replaceSubrange((5 << 20)..<((5 << 20) + 10_000), with: Data(repeating: 9, count: 10_000))
        try bytes.write(to: URL(fileURLWithPath: original))
        try Self.pack(work, tree.path, sequence: 2, out: v2)
        let one = ["ETag": "\"v1\""], two = ["ETag": "\"v2\""]
        for (name, answers, status) in [
            ("once", [ScriptedServer.Answer(headers: one, honourRange: true), .init(headers: two), .init(headers: two, honourRange: true)], Int32(0)),
            ("twice", [.init(headers: one, honourRange: true), .init(headers: two), .init(headers: two, honourRange: true), .init(headers: one)], 5)
        ] {
            let dest = work.directory.file("app-" + name)
            #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            let before = try contents(dest + "/big.img")
            let server = try ScriptedServer(script: ["app.zip": answers])
            try FileManager.default.copyItem(atPath: v2, toPath: server.file("app.zip"))
            let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"])
            #expect(result.status == status, "\(name): \(result.stderr) \(server.requests)")
            #expect(try contents(dest + "/big.img") == (status == 0 ? bytes : before), "\(name)")
            if status == 0 {
                let transfer = try #require(try result.json()["transfer"] as? [String: Any])
                #expect((transfer["chunks_reused"] as? Int ?? 0) > 0, "\(name): \(transfer)")
            }
        }
    }

    @Test("a fetched chunk that does not match the signed index (the server's bytes altered) is refused, exit 1, DIR unchanged")
    func alteredChunk() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        let original = try tree.writeRandom("big.img", count: 8 << 20)
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try Self.pack(work, tree.path, sequence: 1, out: v1)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        var bytes = try contents(original)
        bytes.replaceSubrange((4 << 20)..<((4 << 20) + 4096), with: Data(repeating: 7, count: 4096))
        try bytes.write(to: URL(fileURLWithPath: original))
        try Self.pack(work, tree.path, sequence: 2, out: v2)
        // The byte at 4 MiB + 100 of the entry, in a chunk the device lacks, flipped on the server.
        let python = try run(
            try which("python3"),
            [
                "-c",
                """
                import struct, sys, zipfile
                info = zipfile.ZipFile(sys.argv[1]).getinfo("big.img"); raw = bytearray(open(sys.argv[1], "rb").read())
                n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
                raw[info.header_offset + 30 + n + e + (4 << 20) + 100] ^= 0xFF
                open(sys.argv[1], "wb").write(raw)
                """, v2
            ])
        try #require(python.status == 0, "\(python.stderr)")
        let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true)]])
        try FileManager.default.copyItem(atPath: v2, toPath: server.file("app.zip"))
        let before = try contents(dest + "/big.img")
        let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--json"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("does not match the chunk index"), "\(result.stderr)")
        #expect(try contents(dest + "/big.img") == before)
        #expect(server.requests.allSatisfy { $0.contains("bytes=") }, "ranges only, never the whole package: \(server.requests)")
    }
}
