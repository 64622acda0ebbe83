import Foundation
import Testing
import SignetTestSupport

/// Issue 26: `unpack URL` reads the package with range requests and fetches only what the
/// installed tree lacks, against a real nginx (one for the suite).
@Suite("Ranged updates: unpack URL fetches only what changed, copies the rest from DIR", .serialized)
struct RangedUpdateCLITests {
    /// One nginx for every test of the suite.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("RangedUpdateCLITests") }

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
        let packed = try CLI.run([
            "pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile,
            "--name", "app", "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", temporary
        ])
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
        return try FileManager.default.contentsOfDirectory(atPath: parent).filter { $0 != name && $0.hasPrefix(".\(name).") && !isKeptBesideDestination($0) }
    }

    @Test(
        "v1 then v2 of a 2,000-file package with 20 files changed: DIR is v2, a locally modified file is fetched, nginx sent at most 2% + 1 MiB; a fresh install never stores the package"
    )
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

        // The text report says it in words: --repair finds the missing file and fetches it alone
        // (without --repair the release DIR holds is "up to date").
        try FileManager.default.removeItem(atPath: dest + "/" + changed[0])
        let text = try CLI.run(["unpack", server.url("delta/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--repair"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdoutText.contains("repairing \(dest): 1 finding (\(changed[0]): missing)"), "\(text.stdoutText)")
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
        let rebuild = pythonScript("ranged_update_rebuild.py")
        #expect(try run("python3", ["-c", rebuild, bad, paths[150]]).status == 0)
        let refused = try Self.unpack(server, "bad/app.zip", work, dest: dest)
        #expect(refused.status == 1, "\(refused.stderr)")
        try Self.expectSame(dest, tree, paths)
        #expect(try Self.leftovers(besides: dest).isEmpty)
    }
}

extension RangedUpdateCLITests {
    /// Bytes journalled in the staging trees beside `dest` (``RangeJournal``).
    static func journalled(besides dest: String) -> Int {
        let parent = (dest as NSString).deletingLastPathComponent, name = (dest as NSString).lastPathComponent
        var total = 0
        for tree in (try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [] where tree.hasPrefix(".\(name).signet-") {
            let journal = parent + "/" + tree + "/.signet/ranges-in-flight"
            for part in (try? FileManager.default.contentsOfDirectory(atPath: journal)) ?? [] {
                total += (try? FileManager.default.attributesOfItem(atPath: journal + "/" + part)[.size] as? Int) ?? 0
            }
        }
        return total
    }

    @Test(
        "an update killed (kill -9) or cut off (--max-time) mid-way leaves DIR as it was; the next run takes over what was staged and journalled and fetches only the rest"
    )
    func interruptedUpdate() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let (tree, paths) = try Self.tree(200, size: 16 * 1024)
        let v1 = try TemporaryDirectory()
        for path in paths {
            try FileManager.default.createDirectory(atPath: (v1.file(path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: tree.file(path), toPath: v1.file(path))
        }
        try FileManager.default.createDirectory(atPath: server.www + "/resume", withIntermediateDirectories: true)
        try Self.pack(work, tree, sequence: 1, out: server.www + "/resume/app.zip")
        let dest = work.directory.file("app")
        #expect(try Self.unpack(server, "resume/app.zip", work, dest: dest).status == 0)

        // v2: 100 files changed (1.6 MiB to fetch), served whole and below stall/ (nginx pauses
        // each answer there after 320 KiB).
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        let changed = stride(from: 0, to: 200, by: 2).map { paths[$0] }
        for path in changed { try random.readData(ofLength: 16 * 1024).write(to: URL(fileURLWithPath: tree.file(path))) }
        try Self.pack(work, tree, sequence: 2, out: server.www + "/resume/app.zip")
        try FileManager.default.copyItem(atPath: server.www + "/resume/app.zip", toPath: server.www + "/stall/resume.zip")

        // kill -9 in the middle of the answer, once 256 KiB of it has arrived (journalled).
        let first = Process()
        first.executableURL = URL(fileURLWithPath: CLI.binary)
        first.arguments = ["unpack", server.url("stall/resume.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root]
        first.standardOutput = FileHandle.nullDevice
        first.standardError = FileHandle.nullDevice
        try first.run()
        let deadline = Date().addingTimeInterval(30)
        while Self.journalled(besides: dest) < 256 << 10 && first.isRunning && Date() < deadline { usleep(20_000) }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        #expect(Self.journalled(besides: dest) >= 256 << 10, "the answer in flight journalled when killed")
        try Self.expectSame(dest, v1, paths)

        // A second run whose link is cut (--max-time, its least: 1 s): exit 5, DIR still v1,
        // what it staged kept.
        let cut = try Self.unpack(server, "stall/resume.zip", work, dest: dest, ["--max-time", "1"])
        #expect(cut.status == 5, "\(cut.stderr)")
        #expect(cut.stderr.contains("kept beside"), "\(cut.stderr)")
        try Self.expectSame(dest, v1, paths)

        // The third run fetches only what neither left.
        let done = try Self.unpack(server, "resume/app.zip", work, dest: dest)
        #expect(done.status == 0, "\(done.stderr)")
        let transfer = try Self.transfer(done)
        let resumed = transfer["files_resumed"] as? Int ?? 0, fetched = transfer["files_fetched"] as? Int ?? 0
        // At least the 15 whole files of 16 KiB the first run's journal held, which the second
        // run staged.
        #expect(resumed >= 15 && resumed + fetched == 100 && transfer["files_reused"] as? Int == 100, "\(transfer)")
        try Self.expectSame(dest, tree, paths)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
        let left = try Self.leftovers(besides: dest)
        #expect(left.isEmpty, "\(left)")
    }
}

extension RangedUpdateCLITests {
    /// 400 files of 8 KiB packed as v1 (`staging/v1.zip`, the files also copied to `v1`), then
    /// the files `changing` picks rewritten and packed as v2 (`staging/v2.zip`).
    static func twoVersions(changing: ([String]) -> [String]) throws
        -> (work: Workspace, staging: TemporaryDirectory, tree: TemporaryDirectory, paths: [String], v1: TemporaryDirectory)
    {
        let work = try Workspace()
        let staging = try TemporaryDirectory()
        let (tree, paths) = try Self.tree(400, size: 8 * 1024)
        let v1 = try TemporaryDirectory()
        for path in paths {
            try FileManager.default.createDirectory(atPath: (v1.file(path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: tree.file(path), toPath: v1.file(path))
        }
        try Self.pack(work, tree, sequence: 1, out: staging.file("v1.zip"))
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        for path in changing(paths) { try random.readData(ofLength: 8 * 1024).write(to: URL(fileURLWithPath: tree.file(path))) }
        try Self.pack(work, tree, sequence: 2, out: staging.file("v2.zip"))
        return (work, staging, tree, paths, v1)
    }

    @Test(
        "unpack URL: wrong range answers are refused with DIR unchanged; a package replaced once is read again from the start, twice is package-changed (exit 5)"
    )
    func wrongAnswers() throws {
        let (work, staging, tree, paths, v1) = try Self.twoVersions { paths in Array(paths.prefix(10)) }

        let one = ["ETag": "\"v1\""], two = ["ETag": "\"v2\""]
        let cases: [(String, [ScriptedServer.Answer], Int32, String)] = [
            ("shifted", [.init(headers: one, honourRange: true), .init(headers: one, honourRange: true, shiftRange: 1)], 5, "Content-Range"),
            ("longer", [.init(headers: one, honourRange: true), .init(headers: one, honourRange: true, extraBytes: 10)], 5, "more bytes"),
            (
                "replaced twice", [.init(headers: one, honourRange: true), .init(headers: two), .init(headers: two, honourRange: true), .init(headers: one)], 5,
                "changed on the server"
            ),
            ("replaced once", [.init(headers: one, honourRange: true), .init(headers: two), .init(headers: two, honourRange: true)], 0, "")
        ]
        for (name, answers, status, words) in cases {
            let dest = work.directory.file("app-" + name.replacingOccurrences(of: " ", with: "-"))
            #expect(try CLI.run(["unpack", staging.file("v1.zip"), "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            let server = try ScriptedServer(script: ["app.zip": answers])
            try FileManager.default.copyItem(atPath: staging.file("v2.zip"), toPath: server.file("app.zip"))
            let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"])
            #expect(result.status == status, "\(name): \(result.status) \(result.stderr) \(server.requests)")
            if !words.isEmpty { #expect(result.stderr.contains(words), "\(name): \(result.stderr)") }
            if status == 0 {
                try Self.expectSame(dest, tree, paths)
                #expect((try Self.transfer(result))["mode"] as? String == "ranges", "\(name)")
            } else {
                try Self.expectSame(dest, v1, paths)
            }
            if name == "replaced twice" {
                #expect((try? result.json()["error"] as? [String: Any])?["code"] as? String == "package-changed", "\(result.stdoutText)")
            }
        }
    }

    @Test(
        "several ranges in one request: multipart answers are read strictly; a server that serves fewer, coalesces or sends 200 is asked singly; lying parts are refused with DIR unchanged"
    )
    func multipartAnswers() throws {
        // Every 20th file changes: entries far apart, each its own range.
        let (work, staging, tree, paths, v1) = try Self.twoVersions { paths in paths.enumerated().filter { $0.offset % 20 == 0 }.map(\.element) }
        let cases: [(ScriptedServer.Answer.Parts, Int32, String)] = [
            (.honest, 0, ""), (.firstOnly, 0, ""), (.coalesced, 0, ""), (.whole, 0, ""),
            (.reversed, 5, "where the range"), (.shiftedSecond, 5, "where the range"), (.longerSecond, 5, "more bytes after a part"),
            (.unclosed, 5, "ended in the middle"), (.wrongBoundary, 5, "without its boundary"), (.endlessEpilogue, 5, "after the last part")
        ]
        for (kind, status, words) in cases {
            let dest = work.directory.file("app-" + kind.rawValue)
            #expect(try CLI.run(["unpack", staging.file("v1.zip"), "--dest", dest, "--pubkey", work.publicDER]).status == 0)
            let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true, parts: kind)]])
            try FileManager.default.copyItem(atPath: staging.file("v2.zip"), toPath: server.file("app.zip"))
            let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"])
            #expect(result.status == status, "\(kind): \(result.status) \(result.stderr) \(server.requests)")
            if !words.isEmpty { #expect(result.stderr.contains(words), "\(kind): \(result.stderr)") }
            let several = server.requests.filter { $0.contains(",") }
            #expect(!several.isEmpty, "\(kind): several ranges were asked for in one request: \(server.requests)")
            if status == 0 {
                try Self.expectSame(dest, tree, paths)
                let transfer = try Self.transfer(result)
                #expect(transfer["mode"] as? String == "ranges" && transfer["requests"] as? Int == server.requests.count, "\(kind): \(transfer)")
                if kind == .honest {
                    // 20 files and their 20 signature entries, far apart: a few requests, not one per entry.
                    #expect(server.requests.count <= 6, "\(server.requests)")
                } else {
                    // Asked singly once a request for several was not answered with all of them.
                    #expect(several.count == 1, "\(kind): \(server.requests)")
                }
                if kind == .coalesced {
                    // Issue 48, point 12: one part from the first range to the last, across the
                    // whole package, is stopped at its headers, not taken: what arrives stays
                    // near the changed bytes (20 files of 8 KiB), not the package's size.
                    let size = try FileManager.default.attributesOfItem(atPath: staging.file("v2.zip"))[.size] as? Int ?? 0
                    let bytes = transfer["bytes_downloaded"] as? Int ?? Int.max
                    #expect(bytes < size / 4, "coalesced: \(bytes) bytes downloaded of a \(size)-byte package")
                }
            } else {
                try Self.expectSame(dest, v1, paths)
            }
        }
    }

    @Test("the package replaced on the server during an update (If-Range): DIR ends wholly as the new package, never a mix")
    func swappedMidway() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let (tree, paths) = try Self.tree(300, size: 8 * 1024)
        try FileManager.default.createDirectory(atPath: server.www + "/swap", withIntermediateDirectories: true)
        try Self.pack(work, tree, sequence: 1, out: server.www + "/swap/app.zip")
        let dest = work.directory.file("app")
        #expect(try Self.unpack(server, "swap/app.zip", work, dest: dest).status == 0)
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        // v2 (150 files changed) is being fetched when v3 (30 more changed) replaces it.
        // Every other file in the package's order: 150 ranges apart, more than one multipart
        // request asks for (RangedInput.maximumParts), so that v2 is still being read when v3
        // replaces it.
        let sorted = paths.sorted()
        for path in stride(from: 0, to: 300, by: 2).map({ sorted[$0] }) {
            try random.readData(ofLength: 8 * 1024).write(to: URL(fileURLWithPath: tree.file(path)))
        }
        // A server that honours ranges and If-Range (RFC 9110 §13.1.5) pauses v2's first
        // answer for its files until the test has put v3 in its place.
        let pausing = try ScriptedServer(
            script: ["swap.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true, pauses: [.init(after: 100_000)])]], tls: server.tls)
        try Self.pack(work, tree, sequence: 2, out: pausing.file("swap.zip"))
        for path in paths.suffix(30) { try random.readData(ofLength: 8 * 1024).write(to: URL(fileURLWithPath: tree.file(path))) }
        let v3 = work.directory.file("v3.zip")
        try Self.pack(work, tree, sequence: 3, out: v3)
        let update = Process()
        update.executableURL = URL(fileURLWithPath: CLI.binary)
        update.arguments = ["unpack", pausing.url("swap.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"]
        let out = Pipe()
        update.standardOutput = out
        update.standardError = FileHandle.nullDevice
        try update.run()
        // The first request for v2's files is on its way (paused): v3 replaces it, and a later
        // request meets v3.
        #expect(pausing.awaitPause(), "v2's files are being fetched")
        #expect(update.isRunning, "still fetching v2 when it is replaced")
        #expect(rename(v3, pausing.file("swap.zip")) == 0)
        try pausing.replace(script: ["swap.zip": [.init(headers: ["ETag": "\"v3\""], honourRange: true)]])
        try pausing.release()
        let report = out.fileHandleForReading.readDataToEndOfFile()
        update.waitUntilExit()
        #expect(update.terminationStatus == 0, "\(String(decoding: report, as: UTF8.self))")
        let json = try JSONSerialization.jsonObject(with: report) as? [String: Any]
        #expect(json?["sequence"] as? Int == 3, "the new package, read again from the start")
        try Self.expectSame(dest, tree, paths)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
        let left = try Self.leftovers(besides: dest)
        #expect(left.isEmpty, "\(left)")
    }
}

extension RangedUpdateCLITests {
    /// The physical extents `filefrag -v` lists for `path` (where the data is on the device).
    static func extents(_ path: String) throws -> [String] {
        let listed = try run("filefrag", ["-v", path])
        return listed.stdoutText.split(separator: "\n").filter { $0.range(of: #"^\s*\d+:"#, options: .regularExpression) != nil }
            .map { $0.split(separator: ":").dropFirst(2).first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? "" }
    }

    @Test("on a filesystem with reflinks (XFS on a loop device), an unchanged file is cloned: its data stays where it was on the disk")
    func reflinks() throws {
        guard geteuid() == 0 else { print("skipped: needs root to mount a loop device"); return }
        let server = try Self.shared.get()
        let disk = try TemporaryDirectory()
        let image = disk.file("xfs.img"), mount = disk.file("mnt")
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        #expect(try run("truncate", ["-s", "600M", image]).status == 0)
        let made = try run("mkfs.xfs", ["-q", "-m", "reflink=1", image])
        try #require(made.status == 0, "mkfs.xfs (xfsprogs, which scripts/install-deps.sh installs): \(made.stderr)")
        let mounted = try run("mount", ["-o", "loop", image, mount])
        guard mounted.status == 0 else {
            print("skipped: this machine cannot mount a loop device: \(mounted.stderr)")
            return
        }
        defer { _ = try? run("umount", ["-l", mount]) }

        let work = try Workspace()
        let (tree, paths) = try Self.tree(40, size: 1 << 20)
        try FileManager.default.createDirectory(atPath: server.www + "/reflink", withIntermediateDirectories: true)
        try Self.pack(work, tree, sequence: 1, out: server.www + "/reflink/app.zip")
        let dest = mount + "/app"
        #expect(try Self.unpack(server, "reflink/app.zip", work, dest: dest).status == 0)
        #expect(try run("sync", []).status == 0)
        let unchanged = paths[5]
        let before = try Self.extents(dest + "/" + unchanged)
        try #require(!before.isEmpty, "filefrag lists the extents")
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        try random.readData(ofLength: 1 << 20).write(to: URL(fileURLWithPath: tree.file(paths[0])))
        try Self.pack(work, tree, sequence: 2, out: server.www + "/reflink/app.zip")
        let update = try Self.unpack(server, "reflink/app.zip", work, dest: dest)
        #expect(update.status == 0, "\(update.stderr)")
        #expect(try Self.transfer(update)["files_reused"] as? Int == 39)
        #expect(try run("sync", []).status == 0)
        #expect(try Self.extents(dest + "/" + unchanged) == before, "the installed copy shares the old one's blocks")
        try Self.expectSame(dest, tree, paths)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
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
