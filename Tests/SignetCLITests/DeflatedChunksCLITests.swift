import Foundation
import Testing
import SignetTestSupport

/// Issue 51, point 1: a large compressible resource is deflated with a sync flush every 8 KiB
/// of the file, the manifest lists each segment's compressed length, and an update fetches and
/// inflates only the segments it lacks — while the entry stays one deflate stream that unzip,
/// Python's zipfile, bsdtar and 7z read.
@Suite("Deflated chunks: compressed large files updated by the parts that changed")
struct DeflatedChunksCLITests {
    /// `count` bytes of real programs (this machine's /usr/bin and /usr/lib, in name order):
    /// compressible about 3 times, and not repeated text.
    static func programs(_ count: Int, skipping skip: Int = 0) throws -> Data {
        var data = Data()
        var skipped = 0
        for folder in ["/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib"] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder))?.sorted() ?? []
            for name in names {
                var info = stat()
                guard lstat(folder + "/" + name, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size > 4096,
                    let bytes = FileManager.default.contents(atPath: folder + "/" + name)
                else { continue }
                if skipped < skip { skipped += bytes.count; continue }
                data.append(bytes.prefix(count - data.count))
                if data.count >= count { return data }
            }
        }
        throw SupportError("this machine has fewer than \(count) bytes of programs")
    }

    /// Per resource: its method, its chunks and segments, and whether every chunk's SHA-256 and
    /// every segment (inflated alone by Python's zlib with the 32 KiB before it as the
    /// dictionary) match the file zipfile reads.
    static func check(_ package: String) throws -> [String: (method: Int, chunks: Int, segments: Int, valid: Bool)] {
        let script = pythonScript("deflated_chunks_check.py")
        let result = try run(try which("python3"), ["-c", script, package, ChunkedUpdateCLITests.here])
        guard result.status == 0, let object = try JSONSerialization.jsonObject(with: result.stdout) as? [String: [Any]] else {
            throw SupportError("python: \(result.stderr)")
        }
        return object.mapValues { ($0[0] as? Int ?? -1, $0[1] as? Int ?? -1, $0[2] as? Int ?? -1, $0[3] as? Bool ?? false) }
    }

    static func size(_ path: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1 }

    @Test(
        "pack deflates a compressible 24 MiB image in 8 KiB segments: one deflate stream that unzip, zipfile, bsdtar and 7z read, every chunk and segment checks out in Python's zlib, within 3% of gzip -6; inspect says so"
    )
    func packed() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        let image = try Self.programs(24 << 20)
        _ = try tree.write("image.bin", image)
        let package = work.directory.file("app.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: package)
        let checked = try Self.check(package)
        let entry = try #require(checked["image.bin"])
        #expect(entry.method == 8 && entry.chunks > 40 && entry.segments == 3072 && entry.valid, "\(checked)")
        let unzip = try run("unzip", ["-t", package])
        #expect(unzip.status == 0 && unzip.stdoutText.contains("No errors detected"), "\(unzip.stdoutText)")
        for (tool, arguments) in [("bsdtar", ["-xOf", package, "image.bin"]), ("7z", ["e", "-so", package, "image.bin"])] {
            let read = try run(try which(tool), arguments)
            #expect(read.status == 0 && read.stdout == image, "\(tool) reads the entry")
        }
        let gzip = try run("sh", ["-c", "gzip -6 -c '\(tree.file("image.bin"))' | wc -c"])
        let gzipped = Int(gzip.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let compressed = try #require(try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--json"]).json()["files"] as? [[String: Any]])
            .first { $0["path"] as? String == "image.bin" }
        let compressedSize = compressed?["compressed_size"] as? Int ?? .max
        #expect(gzipped > 0 && compressedSize <= gzipped * 103 / 100, "\(compressedSize) bytes against gzip -6's \(gzipped)")
        #expect(compressed?["compression"] as? String == "deflated" && compressed?["chunked"] as? Bool == true, "\(String(describing: compressed))")
        let text = try CLI.run(["inspect", package, "--pubkey", work.publicDER])
        #expect(text.stdoutText.contains("deflated, chunked"), "\(text.stdoutText)")
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("app"), "--pubkey", work.publicDER]).status == 0)
        #expect(try contents(work.directory.file("app/image.bin")) == image)
    }

    @Test(
        "an update of a compressible 24 MiB image: 1 MiB of other programs inserted and 1% of its 4 KiB blocks rewritten in place fetches a fraction of the deflated size; a copy damaged in place is still rebuilt exactly"
    )
    func update() throws {
        let server = try ChunkedUpdateCLITests.shared.get()
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        var image = try Self.programs(24 << 20)
        _ = try tree.write("image.bin", image)
        try FileManager.default.createDirectory(atPath: server.www + "/deflated", withIntermediateDirectories: true)
        let served = server.www + "/deflated/app.zip"
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: served)
        let dest = work.directory.file("app")
        let unpack = ["unpack", server.url("deflated/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"]
        let first = try CLI.run(unpack)
        #expect(first.status == 0, "\(first.stderr)")
        let fresh = try #require(try first.json()["transfer"] as? [String: Any])["bytes_downloaded"] as? Int ?? 0

        // v2: 1 MiB of other programs inserted at 9 MiB, and 1% of the 4 KiB blocks (every
        // 100th) rewritten with other program bytes.
        let other = try Self.programs(2 << 20, skipping: 40 << 20)
        image.insert(contentsOf: other.prefix(1 << 20), at: 9 << 20)
        var patch = other.suffix(from: other.startIndex + (1 << 20))
        var rewritten = 0
        for block in stride(from: 50, to: image.count / 4096, by: 100) {
            let take = patch.prefix(4096)
            guard take.count == 4096 else { break }
            image.replaceSubrange((block * 4096)..<(block * 4096 + 4096), with: take)
            patch = patch.dropFirst(4096)
            rewritten += 1
        }
        _ = try tree.write("image.bin", image)
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 2, out: served)
        let offset = server.accessLogSize
        let update = try CLI.run(unpack)
        #expect(update.status == 0, "\(update.stderr)")
        #expect(try contents(dest + "/image.bin") == image)
        let transfer = try #require(try update.json()["transfer"] as? [String: Any], "\(update.stdoutText)")
        let downloaded = transfer["bytes_downloaded"] as? Int ?? .max
        // The MiB inserted deflates to about a third of it; each rewritten block costs its
        // 8 KiB segment, deflated (and a segment either side where the insertion's chunks end).
        let deflatedSize = Self.size(served)
        #expect(
            downloaded <= (1 << 20) / 2 + rewritten * 6 * 1024 + 512 * 1024,
            "\(downloaded) bytes for \(rewritten) blocks and 1 MiB inserted (fresh install: \(fresh), package \(deflatedSize)): \(transfer)")
        #expect(downloaded < fresh / 5, "\(transfer)")
        let logged = try server.answers(of: "deflated/app.zip", from: offset)
        #expect(logged.reduce(0) { $0 + $1.bytes } == downloaded, "\(logged) \(transfer)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // v3 (100 bytes changed near the end) onto a copy damaged in place at 3 MiB: the chunk
        // there is fetched whole, its segments inflated in order; the result is exactly v3.
        image.replaceSubrange((20 << 20)..<((20 << 20) + 100), with: Data(repeating: 0x77, count: 100))
        _ = try tree.write("image.bin", image)
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 3, out: served)
        let damaged = try FileHandle(forWritingTo: URL(fileURLWithPath: dest + "/image.bin"))
        try damaged.seek(toOffset: 3 << 20)
        try damaged.write(contentsOf: Data(repeating: 0x55, count: 100))
        try damaged.close()
        let again = try CLI.run(unpack)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try contents(dest + "/image.bin") == image)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
    }

    @Test(
        "hostile servers: a deflated segment the device fetches altered, or replaced by a deflate bomb, is refused (exit 1, nothing installed, nothing left beside DIR): the bomb stops at its segment's length"
    )
    func hostile() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        var image = try Self.programs(8 << 20)
        _ = try tree.write("image.bin", image)
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: v1)
        image.replaceSubrange((4 << 20)..<((4 << 20) + 4096), with: try Self.programs(4096, skipping: 30 << 20))
        _ = try tree.write("image.bin", image)
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 2, out: v2)
        // The segment at 4 MiB (the one the device lacks) rewritten on the server: its bytes
        // altered, a deflate bomb (1 MiB of zeros in a few hundred bytes), or one byte cut so
        // that the stream no longer has the length the index gives.
        let tamper = pythonScript("deflated_chunks_tamper.py")
        for kind in ["altered", "bomb"] {
            let dest = work.directory.file("app-" + kind)
            #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            let before = try contents(dest + "/image.bin")
            let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true)]])
            try FileManager.default.copyItem(atPath: v2, toPath: server.file("app.zip"))
            let python = try run(try which("python3"), ["-c", tamper, kind, server.file("app.zip"), ChunkedUpdateCLITests.here])
            try #require(python.status == 0, "\(python.stderr)")
            let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--json"])
            #expect(result.status == 1 && result.stderr.contains("does not match the chunk index"), "\(kind): \(result.status) \(result.stderr)")
            #expect(try contents(dest + "/image.bin") == before, "\(kind): DIR unchanged")
            let left = try FileManager.default.contentsOfDirectory(atPath: work.directory.path).filter {
                $0.hasPrefix(".app-\(kind).signet-") && !isKeptBesideDestination($0)
            }
            #expect(left.isEmpty, "\(kind): nothing left beside DIR: \(left)")
        }
    }

    @Test(
        "lying multipart answers to a rebuild of deflated segments and to the chunk-index entry's slices: shifted, longer or reordered parts are refused (exit 5), DIR unchanged; honest and coalesced answers install exactly"
    )
    func lyingMultipart() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        var image = try Self.programs(8 << 20)
        _ = try tree.write("image.bin", image)
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: v1)
        // 24 blocks rewritten, far apart: segments (and index slices) asked for several at a time.
        let other = try Self.programs(24 * 4096, skipping: 30 << 20)
        for block in 0..<24 {
            let at = block * (340 << 10) + 8192
            image.replaceSubrange(at..<(at + 4096), with: other[(block * 4096)..<((block + 1) * 4096)])
        }
        _ = try tree.write("image.bin", image)
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 2, out: v2)
        let cases: [(ScriptedServer.Answer.Parts, Int32, String)] = [
            (.honest, 0, ""), (.coalesced, 0, ""),
            (.shiftedSecond, 5, "where the range"), (.longerSecond, 5, "more bytes after a part"), (.reversed, 5, "where the range")
        ]
        for (kind, status, words) in cases {
            let dest = work.directory.file("app-" + kind.rawValue)
            #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            let before = try contents(dest + "/image.bin")
            let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true, parts: kind)]])
            try FileManager.default.copyItem(atPath: v2, toPath: server.file("app.zip"))
            let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"])
            #expect(result.status == status, "\(kind): \(result.status) \(result.stderr)")
            #expect(server.requests.contains { $0.contains(",") }, "\(kind): several ranges in one request: \(server.requests)")
            if status == 0 {
                #expect(try contents(dest + "/image.bin") == image, "\(kind)")
                let transfer = try #require(try result.json()["transfer"] as? [String: Any])
                #expect((transfer["chunk_bytes_reused"] as? Int ?? 0) > (6 << 20), "\(kind): \(transfer)")
            } else {
                #expect(result.stderr.contains(words), "\(kind): \(result.stderr)")
                #expect(try contents(dest + "/image.bin") == before, "\(kind): DIR unchanged")
            }
        }
    }
}
