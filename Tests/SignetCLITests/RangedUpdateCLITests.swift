import Foundation
import Testing
import SignetTestSupport

/// Issue 26: `unpack URL` reads the package with range requests and fetches only what the
/// installed tree lacks, against a real nginx (one for the suite).
@Suite("Ranged updates: unpack URL fetches only what changed, copies the rest from DIR", .serialized)
struct RangedUpdateCLITests {
    /// One nginx for every test of the suite.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer() }

    /// `count` files of `size` random bytes (stored: random data does not deflate), under ten folders.
    static func tree(_ count: Int, size: Int) throws -> (TemporaryDirectory, [String]) {
        let tree = try TemporaryDirectory()
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        var paths: [String] = []
        for index in 0..<count {
            let path = String(format: "d%d/f%04d.bin", index % 10, index)
            try FileManager.default.createDirectory(atPath: tree.file(String(format: "d%d", index % 10)), withIntermediateDirectories: true)
            try random.readData(ofLength: size).write(to: URL(fileURLWithPath: tree.file(path)))
            paths.append(path)
        }
        return (tree, paths)
    }

    static func pack(_ work: Workspace, _ tree: TemporaryDirectory, sequence: Int, out: String) throws {
        let temporary = out + ".new"
        let packed = try CLI.run(["pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", "app", "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", temporary])
        guard packed.status == 0 else { throw SupportError("pack failed: \(packed.stderr)") }
        // Replaced in one rename, as a publisher's upload would: a new ETag.
        guard rename(temporary, out) == 0 else { throw SupportError("rename failed: \(errno)") }
    }

    static func unpack(_ server: HTTPSServer, _ path: String, _ work: Workspace, dest: String, _ extra: [String] = []) throws -> ProcessResult {
        try CLI.run(["unpack", server.url(path), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"] + extra)
    }

    static func transfer(_ result: ProcessResult) throws -> [String: Any] {
        try #require(try result.json()["transfer"] as? [String: Any], "\(result.stdoutText)")
    }

    /// DIR holds exactly the files of `tree`, byte for byte (the .signet folder aside).
    static func expectSame(_ dest: String, _ tree: TemporaryDirectory, _ paths: [String]) throws {
        let installed = try FileManager.default.subpathsOfDirectory(atPath: dest).filter { !$0.hasPrefix(".signet") && $0.hasSuffix(".bin") }
        #expect(Set(installed) == Set(paths))
        var different: [String] = []
        for path in paths where FileManager.default.contents(atPath: dest + "/" + path) != FileManager.default.contents(atPath: tree.file(path)) {
            different.append(path)
        }
        #expect(different.isEmpty, "differ from the package: \(different.prefix(5))")
    }

    /// Names beside DIR that a run left (lock files aside).
    static func leftovers(besides dest: String) throws -> [String] {
        let parent = (dest as NSString).deletingLastPathComponent
        let name = (dest as NSString).lastPathComponent
        return try FileManager.default.contentsOfDirectory(atPath: parent).filter { $0 != name && $0.hasPrefix(".\(name).") && !$0.hasSuffix("signet-lock") }
    }

    @Test("v1 then v2 of a 2,000-file package with 20 files changed: DIR is v2, a locally modified file is fetched, nginx sent at most 2% + 1 MiB; a fresh install never stores the package")
    func deltaUpdate() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let (tree, paths) = try Self.tree(2_000, size: 16 * 1024)
        try FileManager.default.createDirectory(atPath: server.www + "/delta", withIntermediateDirectories: true)
        let package = server.www + "/delta/app.zip"
        try Self.pack(work, tree, sequence: 1, out: package)
        let dest = work.directory.file("opt/app")
        try FileManager.default.createDirectory(atPath: work.directory.file("opt"), withIntermediateDirectories: true)

        // Fresh install, watched: no download file ever appears beside DIR.
        let watching = Watch(directory: work.directory.file("opt"))
        let fresh = try Self.unpack(server, "delta/app.zip", work, dest: dest)
        let seen = watching.stop()
        #expect(fresh.status == 0, "\(fresh.stderr)")
        #expect(!seen.contains { $0.contains("signet-download") }, "seen beside DIR: \(seen)")
        let first = try Self.transfer(fresh)
        #expect(first["mode"] as? String == "ranges")
        #expect(first["files_fetched"] as? Int == 2_000 && first["files_reused"] as? Int == 0, "\(first)")
        try Self.expectSame(dest, tree, paths)

        // v2: 20 files changed; one file unchanged in v2 but modified in DIR meanwhile.
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        let changed = stride(from: 7, to: 2_000, by: 100).map { paths[$0] }
        #expect(changed.count == 20)
        for path in changed { try random.readData(ofLength: 16 * 1024).write(to: URL(fileURLWithPath: tree.file(path))) }
        try Self.pack(work, tree, sequence: 2, out: package)
        let tamperedLocally = paths[1_234]
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: dest + "/" + tamperedLocally))
        try handle.write(contentsOf: Data("local change".utf8))
        try handle.close()

        let logStart = server.accessLogSize
        let update = try Self.unpack(server, "delta/app.zip", work, dest: dest)
        #expect(update.status == 0, "\(update.stderr)")
        let second = try Self.transfer(update)
        #expect(second["mode"] as? String == "ranges")
        #expect(second["files_fetched"] as? Int == 21 && second["files_reused"] as? Int == 1_979, "20 changed + the one modified in DIR: \(second)")
        try Self.expectSame(dest, tree, paths)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // What nginx sent for the update: range answers only, at most 2% of the package + 1 MiB.
        let answers = try server.answers(of: "delta/app.zip", from: logStart)
        let sent = answers.reduce(0) { $0 + $1.bytes }
        let size = try #require(try FileManager.default.attributesOfItem(atPath: package)[.size] as? Int)
        #expect(!answers.isEmpty && answers.allSatisfy { $0.status == 206 }, "\(answers.map(\.status))")
        #expect(sent <= size / 50 + (1 << 20), "nginx sent \(sent) bytes of a \(size)-byte package in \(answers.count) requests")
        #expect(second["bytes_downloaded"] as? Int == sent, "the report counts what nginx sent")
        #expect(try Self.leftovers(besides: dest).isEmpty)

        // The text report says it in words.
        try FileManager.default.removeItem(atPath: dest + "/" + changed[0])
        let text = try CLI.run(["unpack", server.url("delta/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdoutText.contains("fetched 1 of 2,000 files") && text.stdoutText.contains("reused 1,999 from the installed tree"), "\(text.stdoutText)")
    }

    @Test("a server without ranges (max_ranges 0) and --full-download get the whole package, with the same result; a tampered entry installs nothing")
    func fullDownloadAndTamper() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let (tree, paths) = try Self.tree(300, size: 8 * 1024)
        try FileManager.default.createDirectory(atPath: server.www + "/whole", withIntermediateDirectories: true)
        try Self.pack(work, tree, sequence: 1, out: server.www + "/whole/app.zip")
        let dest = work.directory.file("app")
        let whole = try Self.unpack(server, "whole/app.zip", work, dest: dest)
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(try Self.transfer(whole)["mode"] as? String == "full")
        #expect(try server.statuses(of: "whole/app.zip").contains(200))
        try Self.expectSame(dest, tree, paths)

        // --full-download on a server that has ranges: the same.
        try FileManager.default.createDirectory(atPath: server.www + "/full", withIntermediateDirectories: true)
        try Self.pack(work, tree, sequence: 2, out: server.www + "/full/app.zip")
        let forced = try Self.unpack(server, "full/app.zip", work, dest: dest, ["--full-download"])
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(try Self.transfer(forced)["mode"] as? String == "full")
        #expect(try server.statuses(of: "full/app.zip") == [200])

        // A resource changed by one byte in the package (CRC right, signatures copied): exit 1,
        // DIR unchanged, nothing left beside it.
        try FileManager.default.createDirectory(atPath: server.www + "/bad", withIntermediateDirectories: true)
        let bad = server.www + "/bad/app.zip"
        let (tree3, _) = try Self.tree(300, size: 8 * 1024)
        try Self.pack(work, tree3, sequence: 3, out: bad)
        let rebuild = """
        import sys, zipfile
        src = zipfile.ZipFile(sys.argv[1]); entries = [(i, src.read(i.filename)) for i in src.infolist()]; src.close()
        with zipfile.ZipFile(sys.argv[1], "w") as out:
            for info, data in entries:
                if info.filename == sys.argv[2]: data = data[:10] + bytes([data[10] ^ 1]) + data[11:]
                out.writestr(info, data)
        """
        #expect(try run("python3", ["-c", rebuild, bad, paths[150]]).status == 0)
        let refused = try Self.unpack(server, "bad/app.zip", work, dest: dest)
        #expect(refused.status == 1, "\(refused.stderr)")
        try Self.expectSame(dest, tree, paths)
        #expect(try Self.leftovers(besides: dest).isEmpty)
    }
}

/// Polls a directory's names every few milliseconds on a thread of its own until stopped.
final class Watch: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: Set<String> = []
    private var running = true
    private let done = DispatchSemaphore(value: 0)
    let directory: String

    init(directory: String) {
        self.directory = directory
        Thread { [self] in poll() }.start()
    }

    private func poll() {
        while true {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            lock.lock()
            seen.formUnion(names)
            let go = running
            lock.unlock()
            guard go else { done.signal(); return }
            usleep(2_000)
        }
    }

    /// Stops polling (after one last look) and returns every name seen.
    func stop() -> Set<String> {
        lock.lock()
        running = false
        lock.unlock()
        done.wait()
        lock.lock()
        defer { lock.unlock() }
        return seen
    }
}
