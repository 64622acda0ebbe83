import Foundation
import Testing
import SignetTestSupport

/// Downloads that resume inside a large file (issue 51, point 3): a run whose link drops in the
/// middle of a chunked file leaves what it wrote staged, and the next run keeps every leading
/// chunk that still hashes to the signed index — and nothing it has not checked.
@Suite("Resuming inside a large file (issue 51)")
struct ResumeInsideFileCLITests {
    static let size = 16 << 20

    struct Setup {
        let work: Workspace
        let server: ScriptedServer
        let image: Data
        let imageAt: Int
        /// The image's bytes in the package (deflated: its compressed size).
        let entrySize: Int
        let packageSize: Int
        func arguments(_ dest: String) -> [String] {
            ["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"]
        }
        /// The next answers cut the link `at` bytes into the image's entry (nil: answer honestly).
        func cut(at offset: Int?) throws {
            try server.replace(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true, cutAt: offset.map { imageAt + $0 })]])
        }
    }

    /// A package of a 16 MiB file (random: stored, chunked; programs: deflated in segments,
    /// issue 51) and a small one, served by a scripted server.
    static func setup(_ kind: String = "stored") throws -> Setup {
        let work = try Workspace()
        let image = kind != "deflated" ? CLIHelpers.randomData(size) : try DeflatedChunksCLITests.programs(size)
        let package = work.directory.file("app.zip")
        try CLIHelpers.pack(
            work, ["image.bin": image, "small.txt": Data("small\n".utf8)], sequence: 1, out: package,
            extra: kind == "unindexed" ? ["--chunk-threshold", "0"] : [])
        let offsets = try DamagedTransfersCLITests.offsets(package)
        let server = try ScriptedServer(script: [:])
        try FileManager.default.copyItem(atPath: package, toPath: server.file("app.zip"))
        let packageSize = (try FileManager.default.attributesOfItem(atPath: package)[.size] as? Int) ?? 0
        let listed = try CLI.run(["inspect", package, "--json"]).json()["files"] as? [[String: Any]] ?? []
        let entrySize = try #require(listed.first { $0["path"] as? String == "image.bin" }?["compressed_size"] as? Int)
        return Setup(work: work, server: server, image: image, imageAt: try #require(offsets["image.bin"]), entrySize: entrySize, packageSize: packageSize)
    }

    static func transfer(_ result: ProcessResult) throws -> [String: Any] {
        try #require(try result.json()["transfer"] as? [String: Any], "\(result.stdoutText) \(result.stderr)")
    }

    /// The image an interrupted run left staged beside `dest`.
    static func stagedImage(besides dest: String) throws -> String? {
        let parent = (dest as NSString).deletingLastPathComponent, name = (dest as NSString).lastPathComponent
        return try FileManager.default.contentsOfDirectory(atPath: parent)
            .filter { $0.hasPrefix(".\(name).signet-") && !isKeptBesideDestination($0) }
            .map { parent + "/" + $0 + "/image.bin" }
            .first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Installs at `dest` an older release of the setup's image: 8 KiB replaced at each of
    /// `changedSpots` places spread over it (sequence 0). Returns that image.
    static func installOlder(_ setup: Setup, at dest: String, changedSpots: Int) throws -> Data {
        var old = setup.image
        for spot in 0..<changedSpots {
            let at = spot * (Self.size / changedSpots) + 1_000
            old.replaceSubrange(at..<(at + 8_192), with: CLIHelpers.randomData(8_192))
        }
        let v1 = setup.work.directory.file("v1.zip")
        try CLIHelpers.pack(setup.work, ["image.bin": old, "small.txt": Data("small\n".utf8)], sequence: 0, out: v1)
        try #require(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", setup.work.publicDER]).status == 0)
        return old
    }

    /// Runs the update of `dest` and sends it `signal` while the server holds back the second
    /// half of the changed segments' answer (for SIGKILL, once Signet has read what was sent).
    static func stop(_ setup: Setup, installing dest: String, with signal: Int32) throws {
        // Stopped while the server holds back the rest of the changed segments' answer.
        try setup.server.replace(script: [
            "app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true, cutAt: setup.imageAt + setup.entrySize / 2, stall: true)]
        ])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = setup.arguments(dest)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<3_000 where !FileManager.default.fileExists(atPath: setup.server.stalledMarker) && process.isRunning { usleep(10_000) }
        try #require(FileManager.default.fileExists(atPath: setup.server.stalledMarker), "the server's answer reached half of the image")
        if signal == SIGKILL {
            // A kill leaves only what was journalled: wait until Signet has read what the server
            // sent (not the socket's buffers), told by the journal, not by the clock.
            let reached = try #require(Int64(try String(contentsOfFile: setup.server.stalledMarker, encoding: .utf8)))
            for _ in 0..<3_000 where !(try Self.journalReaches(reached, besides: dest)) && process.isRunning { usleep(10_000) }
            let listing =
                (try? FileManager.default.subpathsOfDirectory(atPath: (dest as NSString).deletingLastPathComponent))?.filter { $0.contains("ranges") } ?? []
            try #require(try Self.journalReaches(reached, besides: dest), "the journal holds the answer up to \(reached): \(listing)")
        }
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == signal, "Signet ends of the signal, as a shell expects")
    }

    /// Whether a staging tree beside `dest` journals a part that ends at file offset `offset`.
    static func journalReaches(_ offset: Int64, besides dest: String) throws -> Bool {
        let parent = (dest as NSString).deletingLastPathComponent, name = (dest as NSString).lastPathComponent
        for tree in try FileManager.default.contentsOfDirectory(atPath: parent) where tree.hasPrefix(".\(name).signet-") {
            let journal = parent + "/" + tree + "/.signet/ranges-in-flight"
            for part in (try? FileManager.default.contentsOfDirectory(atPath: journal)) ?? [] {
                let size = (try? FileManager.default.attributesOfItem(atPath: journal + "/" + part)[.size] as? Int64) ?? nil
                if let start = Int64(part), let size, start + size == offset { return true }
            }
        }
        return false
    }

    @Test(
        "a fresh install cut half-way through a 16 MiB chunked file, stored or deflated: the next run keeps the verified half and moves at most 60% of a whole download",
        arguments: ["stored", "deflated"])
    func freshInstallResumes(_ kind: String) throws {
        let setup = try Self.setup(kind)
        let dest = setup.work.directory.file("app")
        try setup.cut(at: setup.entrySize / 2)
        let cut = try CLI.run(setup.arguments(dest))
        #expect(cut.status == 5 && CLIHelpers.errorCode(cut) == "network-error", "\(cut.status) \(cut.stderr)")
        #expect(cut.stderr.contains("fetches only the rest"), "\(cut.stderr)")
        try setup.cut(at: nil)
        let done = try CLI.run(setup.arguments(dest))
        #expect(done.status == 0, "\(done.stderr)")
        let transfer = try Self.transfer(done)
        let resumed = transfer["chunk_bytes_resumed"] as? Int ?? -1, downloaded = transfer["bytes_downloaded"] as? Int ?? Int.max
        // What the first run wrote of the half it received (its last read and chunk unwritten;
        // deflated, the programs' halves compress unevenly).
        let low = kind == "stored" ? Self.size / 2 - (1 << 20) : Self.size / 4
        #expect(resumed > low && resumed < Self.size * 3 / 4, "the verified chunks of the first half: \(transfer)")
        #expect(downloaded <= setup.packageSize * 6 / 10, "\(downloaded) bytes of a \(setup.packageSize)-byte package: \(transfer)")
        #expect(try contents(dest + "/image.bin") == setup.image)
        #expect(try CLI.run(["reverify", dest, "--pubkey", setup.work.publicDER]).status == 0)
        #expect(try Self.stagedImage(besides: dest) == nil, "nothing left beside DIR")
    }

    @Test(
        "a stored file without a chunk index cut half-way continues at its byte offset from the same package (≤ 60% moved); a staged start from another package (another ETag) is not used, and a changed byte in it costs a whole fetch, never a wrong install"
    )
    func unindexedResumes() throws {
        let setup = try Self.setup("unindexed")
        let dest = setup.work.directory.file("app")
        try setup.cut(at: setup.entrySize / 2)
        #expect(try CLI.run(setup.arguments(dest)).status == 5)
        try setup.cut(at: nil)
        let done = try CLI.run(setup.arguments(dest))
        #expect(done.status == 0, "\(done.stderr)")
        let transfer = try Self.transfer(done)
        let resumed = transfer["file_bytes_resumed"] as? Int ?? -1, downloaded = transfer["bytes_downloaded"] as? Int ?? Int.max
        #expect(resumed > Self.size / 2 - (2 << 20) && resumed <= Self.size / 2, "\(transfer)")
        #expect(downloaded <= setup.packageSize * 6 / 10 && (transfer["chunks_resumed"] as? Int) == 0, "\(downloaded) of \(setup.packageSize): \(transfer)")
        #expect(try contents(dest + "/image.bin") == setup.image)
        #expect(try CLI.run(["reverify", dest, "--pubkey", setup.work.publicDER]).status == 0)
        #expect(try Self.stagedImage(besides: dest) == nil, "nothing left beside DIR")

        // Another install cut half-way; the server then serves the package under another
        // ETag (it may have been replaced): the staged half is not continued.
        let other = setup.work.directory.file("other")
        try setup.cut(at: setup.entrySize / 2)
        #expect(try CLI.run(setup.arguments(other)).status == 5)
        try setup.server.replace(script: ["app.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true)]])
        let fresh = try CLI.run(setup.arguments(other))
        #expect(fresh.status == 0, "\(fresh.stderr)")
        #expect(try Self.transfer(fresh)["file_bytes_resumed"] as? Int == 0 && (try contents(other + "/image.bin")) == setup.image)

        // Cut again; a byte of the staged half changed: the whole file's SHA-256 refuses the
        // continuation and the entry is fetched whole.
        let third = setup.work.directory.file("third")
        try setup.cut(at: setup.entrySize / 2)
        #expect(try CLI.run(setup.arguments(third)).status == 5)
        let staged = try #require(try Self.stagedImage(besides: third))
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: staged))
        try handle.seek(toOffset: 1000)
        try handle.write(contentsOf: Data([0x5a, 0xa5]))
        try handle.close()
        try setup.cut(at: nil)
        let whole = try CLI.run(setup.arguments(third))
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(try contents(third + "/image.bin") == setup.image)
        #expect(try CLI.run(["reverify", third, "--pubkey", setup.work.publicDER]).status == 0)
    }

    @Test(
        "a run that continues a cut file and is cut again keeps its own chunks too; a byte changed in what was staged costs that chunk and the rest, never a wrong install"
    )
    func resumedTwiceAndDamaged() throws {
        let setup = try Self.setup()
        let dest = setup.work.directory.file("app")
        try setup.cut(at: Self.size / 4)
        #expect(try CLI.run(setup.arguments(dest)).status == 5)
        try setup.cut(at: Self.size * 3 / 4)
        let second = try CLI.run(setup.arguments(dest))
        #expect(second.status == 5 && CLIHelpers.errorCode(second) == "network-error", "\(second.stderr)")
        let staged = try #require(try Self.stagedImage(besides: dest), "the rebuild's file is kept for the next run")
        let length = (try FileManager.default.attributesOfItem(atPath: staged)[.size] as? Int) ?? 0
        #expect(length > Self.size / 2 && length <= Self.size * 3 / 4, "the second run's chunks were written after the first run's: \(length)")
        // One byte of the staged file changed (a bad disk, another process): from that chunk on,
        // nothing of it is kept.
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: staged))
        try handle.seek(toOffset: UInt64(Self.size / 2 + 1000))
        let byte = try #require(try handle.read(upToCount: 1))
        try handle.seek(toOffset: UInt64(Self.size / 2 + 1000))
        try handle.write(contentsOf: Data([byte[0] ^ 0x40]))
        try handle.close()
        try setup.cut(at: nil)
        let done = try CLI.run(setup.arguments(dest))
        #expect(done.status == 0, "\(done.stderr)")
        let resumed = try Self.transfer(done)["chunk_bytes_resumed"] as? Int ?? -1
        #expect(resumed > Self.size / 4 && resumed <= Self.size / 2 + 1000, "kept up to the changed chunk: \(resumed)")
        #expect(try contents(dest + "/image.bin") == setup.image)
        #expect(try CLI.run(["reverify", dest, "--pubkey", setup.work.publicDER]).status == 0)
    }

    @Test(
        "an update of a deflated chunked file stopped half-way through its changed segments (SIGTERM as a systemd stop sends, SIGINT as Ctrl-C, SIGKILL as a power cut would): what arrived is kept (written, or journalled as it arrived), the next run continues from it and moves at most 60% of the update",
        arguments: [SIGTERM, SIGINT, SIGKILL])
    func killedDeltaResumes(_ signal: Int32) throws {
        let setup = try Self.setup("deflated")
        let dest = setup.work.directory.file("app")
        // The installed release: the new image with 8% of it different, spread over the file
        // (an update of about 1.3 MB, as 1% of a 128 MiB image: the package's directory and
        // manifest, which every run reads, are then a small part of it).
        let old = try Self.installOlder(setup, at: dest, changedSpots: 160)
        let baseline = setup.work.directory.file("baseline")
        try FileManager.default.copyItem(atPath: dest, toPath: baseline)
        // What the whole update moves, on a copy of DIR.
        try setup.cut(at: nil)
        let whole = try Self.transfer(try CLI.run(setup.arguments(baseline)))["bytes_downloaded"] as? Int ?? 0
        try #require(whole > 0)
        try Self.stop(setup, installing: dest, with: signal)
        #expect(try contents(dest + "/image.bin") == old, "DIR as it was")
        #expect(try Self.stagedImage(besides: dest) != nil, "what was staged is kept beside DIR for the next run")
        try setup.cut(at: nil)
        let next = try CLI.run(setup.arguments(dest))
        #expect(next.status == 0, "\(next.stderr)")
        let transfer = try Self.transfer(next)
        let moved = transfer["bytes_downloaded"] as? Int ?? Int.max
        if signal == SIGKILL {
            // Nothing ran after the kill: what the answer in flight had brought is in the
            // staging's journal, and the next run takes it rather than ask for it again.
            #expect(transfer["answer_bytes_resumed"] as? Int ?? 0 > 0, "\(transfer)")
        } else {
            #expect(transfer["chunk_bytes_resumed"] as? Int ?? 0 > 0, "\(transfer)")
        }
        #expect(Double(moved) <= 0.6 * Double(whole), "the next run moved \(moved) bytes of the update's \(whole)")
        #expect(try contents(dest + "/image.bin") == setup.image)
        #expect(!FileManager.default.fileExists(atPath: dest + "/.signet/ranges-in-flight"), "the journal is never part of the installed tree")
        #expect(try CLI.run(["reverify", dest, "--pubkey", setup.work.publicDER]).status == 0)
    }

    @Test("a journal whose bytes a kill (or a power cut) left wrong costs a fetch from the server in the same run, never a failed run or a wrong install")
    func damagedJournal() throws {
        let setup = try Self.setup("deflated")
        let dest = setup.work.directory.file("app")
        _ = try Self.installOlder(setup, at: dest, changedSpots: 40)
        try Self.stop(setup, installing: dest, with: SIGKILL)
        // Every journalled part gets one byte changed.
        let parent = (dest as NSString).deletingLastPathComponent
        var damaged = 0
        for tree in try FileManager.default.contentsOfDirectory(atPath: parent) where tree.hasPrefix(".app.signet-") {
            let journal = parent + "/" + tree + "/.signet/ranges-in-flight"
            for part in (try? FileManager.default.contentsOfDirectory(atPath: journal)) ?? [] {
                var bytes = try Data(contentsOf: URL(fileURLWithPath: journal + "/" + part))
                bytes[bytes.count / 2] ^= 0x5A
                try bytes.write(to: URL(fileURLWithPath: journal + "/" + part))
                damaged += 1
            }
        }
        try #require(damaged > 0)
        try setup.cut(at: nil)
        let next = try CLI.run(setup.arguments(dest))
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try contents(dest + "/image.bin") == setup.image)
        #expect(try CLI.run(["reverify", dest, "--pubkey", setup.work.publicDER]).status == 0)
    }

    @Test(
        "an update rebuilding a chunked file from the installed copy, cut in its second changed region, continues after the chunks it wrote and fetches only that region"
    )
    func rebuildResumes() throws {
        let setup = try Self.setup()
        let dest = setup.work.directory.file("app")
        let v1 = setup.work.directory.file("v1.zip")
        var old = setup.image
        old.replaceSubrange((4 << 20)..<(5 << 20), with: CLIHelpers.randomData(1 << 20))
        old.replaceSubrange((12 << 20)..<(13 << 20), with: CLIHelpers.randomData(1 << 20))
        try CLIHelpers.pack(setup.work, ["image.bin": old, "small.txt": Data("small\n".utf8)], sequence: 0, out: v1)
        try #require(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", setup.work.publicDER]).status == 0)
        try setup.cut(at: (12 << 20) + (512 << 10))
        let cut = try CLI.run(setup.arguments(dest))
        #expect(cut.status == 5 && CLIHelpers.errorCode(cut) == "network-error", "\(cut.stderr)")
        #expect(try contents(dest + "/image.bin") == old, "DIR as it was")
        try setup.cut(at: nil)
        let done = try CLI.run(setup.arguments(dest))
        #expect(done.status == 0, "\(done.stderr)")
        let transfer = try Self.transfer(done)
        let resumed = transfer["chunk_bytes_resumed"] as? Int ?? -1, fetched = transfer["chunk_bytes_fetched"] as? Int ?? Int.max
        #expect(resumed >= 11 << 20 && resumed <= (12 << 20) + (512 << 10), "the first run's chunks, up to the second region: \(transfer)")
        #expect(fetched <= (1 << 20) + (1 << 20), "the second region and the chunks around it: \(transfer)")
        #expect(try contents(dest + "/image.bin") == setup.image)
        #expect(try CLI.run(["reverify", dest, "--pubkey", setup.work.publicDER]).status == 0)
    }
}

/// FORMAT.md §7, "Maintenance windows" (issue 62): outside every window, a package that would
/// be downloaded whole (a server that answers no range requests, or --full-download) is not
/// downloaded at all — kept nowhere, it was fetched and thrown away at every run.
@Suite("Maintenance windows and whole downloads")
struct WindowWholeDownloadCLITests {
    @Test(
        "outside the window, behind a server without ranges or with --full-download: one probe (stopped at its headers) or no request, no download kept, exit 5 install-deferred; inside the window it installs"
    )
    func notDownloadedOutsideWindow() throws {
        let setup = try ResumeInsideFileCLITests.setup()
        // The script's default answer: 200 with the whole file, whatever the Range header.
        try setup.server.replace(script: [:])
        let utc = ["TZ": "UTC"]
        let closed = "Mon..Sun " + RolloutCLITests.window(fromHours: 2, toHours: 3)
        for (index, extra) in [[String](), ["--full-download"]].enumerated() {
            let dest = setup.work.directory.file("app-\(index)")
            let before = setup.server.requests.count
            let deferred = try CLI.run(setup.arguments(dest) + extra + ["--window", closed], environment: utc)
            #expect(deferred.status == 5 && CLIHelpers.errorCode(deferred) == "install-deferred", "\(deferred.stdoutText) \(deferred.stderr)")
            #expect(deferred.stderr.contains("not downloaded until a window opens"), "\(deferred.stderr)")
            // The probe, stopped at its 200 status, or (with --full-download) no request at all.
            #expect(setup.server.requests.count - before == (extra.isEmpty ? 1 : 0), "\(setup.server.requests)")
            let beside = try FileManager.default.contentsOfDirectory(atPath: setup.work.directory.path)
            #expect(!beside.contains { $0.hasPrefix(".app-\(index).signet-") && !isKeptBesideDestination($0) }, "nothing downloaded kept: \(beside)")
            #expect(!FileManager.default.fileExists(atPath: dest + "/image.bin"))
            let open = try CLI.run(setup.arguments(dest) + extra + ["--window", RolloutCLITests.window(fromHours: -1, toHours: 1)], environment: utc)
            #expect(open.status == 0 && (try? contents(dest + "/image.bin")) == setup.image, "\(open.stderr)")
        }
    }
}
