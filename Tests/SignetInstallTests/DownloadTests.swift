import Foundation
import Synchronization
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetReverify
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
@testable import SignetInstall
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport

/// The library's download API against a real nginx (the CLI suite covers the TLS policy).
@Suite("Download API: async, progress, cancellation, resume, source recorded", .serialized)
struct DownloadTests {
    /// One nginx for the suite (issue 50: no server started per test); each test serves its own paths.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("DownloadTests") }

    @Test("progress is reported as bytes arrive, throttled, and complete at the end")
    func progress() async throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        // A server with nginx's pins that pauses three times for 150 ms: a transfer that lasts
        // long enough for several reports, without a throttle.
        let pausing = try ScriptedServer(
            script: ["p.bin": [.init(pauses: [100_000, 200_000, 300_000].map { .init(after: $0, milliseconds: 150) })]], tls: server.tls)
        let body = try contents(try pausing.directory.writeRandom("www/p.bin", count: 400_000))
        let seen = Mutex<[DownloadProgress]>([])
        var options = try PackageFixture.downloadOptions(server)
        options.progress = { progress in seen.withLock { $0.append(progress) } }
        let result = try await Download.fileAsync(pausing.url("p.bin"), to: work.file("p.bin"), options: options)
        #expect(result.size == 400_000)
        #expect(try contents(work.file("p.bin")) == body)
        let reports = seen.withLock { $0 }
        #expect(reports.count >= 3 && reports.count <= 12, "several, at most ten a second: \(reports.count)")
        #expect(zip(reports, reports.dropFirst()).allSatisfy { $0.received <= $1.received }, "never backwards")
        #expect(reports.last?.received == 400_000 && reports.last?.expected == 400_000, "the last says complete")
        #expect(reports.dropLast().contains { $0.received > 0 && $0.received < 400_000 && $0.expected == 400_000 }, "and some are part-way")
    }

    @Test("cancelling the task stops the transfer, keeps what arrived, and the next call continues from it")
    func cancellation() async throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        // The first answer pauses after 300 KB until the test lets it go on; the resumed
        // request asks for a range and gets it (a server with nginx's pins; no throttle).
        let pausing = try ScriptedServer(
            script: [
                "c.bin": [
                    .init(headers: ["ETag": "\"c1\""], honourRange: true, pauses: [.init(after: 300_000)]),
                    .init(headers: ["ETag": "\"c1\""], honourRange: true)
                ]
            ],
            tls: server.tls)
        let body = try contents(try pausing.directory.writeRandom("www/c.bin", count: 3_000_000))
        let target = work.file("c.bin")
        var options = try PackageFixture.downloadOptions(server)
        let url = pausing.url("c.bin")
        // Cancelled from the progress callback, on the download's own thread, once 100 KB have
        // arrived: a sleep-and-poll loop in the test ran on Swift's cooperative threads, which
        // other suites kept busy for longer than the whole transfer.
        let handle = Mutex<Task<DownloadResult, Error>?>(nil)
        let cancelledAt = Mutex<UInt64?>(nil)
        options.progress = { progress in
            guard progress.received >= 100_000 else { return }
            cancelledAt.withLock { at in
                if at == nil, let task = handle.withLock({ $0 }) {
                    at = progress.received
                    task.cancel()
                }
            }
        }
        let task = Task { try await Download.fileAsync(url, to: target, options: options) }
        handle.withLock { $0 = task }
        let partial = work.file(".c.bin.signet-download")
        func size() -> Int { (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0 }
        let outcome = await task.result
        let atCancel = Int(cancelledAt.withLock { $0 } ?? 0)
        #expect(atCancel >= 100_000 && atCancel < body.count - 500_000, "cancelled part-way: \(atCancel)")
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(!FileManager.default.fileExists(atPath: target), "a cancelled download is never the file")
        let kept = size()
        #expect(kept > 0 && kept < body.count, "what arrived is kept: \(kept)")
        // The server sends the rest once let go: a client still reading would take it, one
        // that stopped has closed the connection.
        try pausing.release()
        #expect(pausing.finished() == "disconnected", "the transfer stopped at the cancel: \(pausing.requests)")
        #expect(size() == kept, "and nothing more arrived")
        let result = try await Download.fileAsync(url, to: target, options: options)
        #expect(result.resumedFrom > 0)
        #expect(try contents(target) == body)
        #expect(pausing.requests.last?.hasPrefix("c.bin bytes=") == true, "the second asks for the rest: \(pausing.requests)")
    }

    @Test("install(downloading:) records the URL, without its query, as each file's source")
    func installRecordsSource() async throws {
        let server = try Self.shared.get()
        let directory = try TemporaryDirectory()
        let (root, package) = try PackageFixture.package(directory)
        try FileManager.default.copyItem(atPath: package, toPath: server.www + "/p.zip")
        let dest = directory.file("installed")
        let report = try await Installer.installAsync(
            downloading: server.url("p.zip") + "?token=abc#x", to: dest, policy: PackageFixture.policy,
            download: try PackageFixture.downloadOptions(server))
        #expect(report.files.count == 6)
        for file in report.files {
            #expect(try contents(dest + "/" + file) == contents(root + "/" + file))
            let origin = try FileOrigin(path: dest + "/" + file)
            #expect(origin.source == server.url("p.zip"), "\(file): \(origin.source ?? "nil")")
        }
        // A local install records no source.
        let local = directory.file("local")
        _ = try Installer.install(package, to: local, policy: PackageFixture.policy)
        #expect(try FileOrigin(path: local + "/" + report.files[0]).source == nil)
    }

    @Test("install(downloading:) over ranges: progress counts only the planned bytes; cancelling stops the transfer and DIR stays as it was")
    func rangedProgressAndCancel() async throws {
        let server = try Self.shared.get()
        let directory = try TemporaryDirectory()
        func random(_ count: Int) -> Data { Data(try! randomBytes(count)) }
        let v1 = ["a.bin": random(300_000), "b.bin": random(300_000), "same.bin": random(100_000)]
        // A server with nginx's pins that honours ranges and pauses in long answers: for
        // 100 ms twice in v1's (several progress reports), until let go in v2's (a cancel).
        let pausing = try ScriptedServer(
            script: [
                "r.zip": [
                    .init(
                        headers: ["ETag": "\"v1\""], honourRange: true,
                        pauses: [.init(after: 200_000, milliseconds: 120), .init(after: 400_000, milliseconds: 120)])
                ]
            ],
            tls: server.tls)
        try PackageFixture.rangedPackage(v1, sequence: 1, at: pausing.file("r.zip"))
        let policy = try Fixtures.trust("rsa2048-spki.der")
        let dest = directory.file("app")
        let seen = Mutex<[DownloadProgress]>([])
        var options = try PackageFixture.downloadOptions(server)
        options.progress = { progress in seen.withLock { $0.append(progress) } }
        let report = try await Installer.installAsync(downloading: pausing.url("r.zip"), to: dest, policy: policy, download: options)
        #expect(report.transfer?.mode == .ranges && report.transfer?.filesFetched == 3, "\(String(describing: report.transfer))")
        let reports = seen.withLock { $0 }
        #expect(reports.count >= 3, "several progress reports: \(reports.count)")
        #expect(zip(reports, reports.dropFirst()).allSatisfy { $0.received <= $1.received }, "never backwards")
        let expected = try #require(reports.last?.expected)
        #expect(expected >= 700_000 && expected < 900_000, "the planned bytes, not the package's: \(expected)")

        // v2 changes a.bin and b.bin; the update is cancelled once 100 KB arrived.
        let v2 = ["a.bin": random(300_000), "b.bin": random(300_000), "same.bin": v1["same.bin"]!]
        try PackageFixture.rangedPackage(v2, sequence: 2, at: pausing.file("r.zip"))
        try pausing.replace(script: ["r.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true, pauses: [.init(after: 150_000)])]])
        let handle = Mutex<Task<InstallReport, Error>?>(nil)
        let cancelledAt = Mutex<UInt64?>(nil)
        options.progress = { progress in
            guard progress.received >= 100_000 else { return }
            cancelledAt.withLock { at in
                if at == nil, let task = handle.withLock({ $0 }) {
                    at = progress.received
                    task.cancel()
                }
            }
        }
        let url = pausing.url("r.zip")
        let task = Task { [options] in try await Installer.installAsync(downloading: url, to: dest, policy: policy, download: options) }
        handle.withLock { $0 = task }
        let outcome = await task.result
        #expect(cancelledAt.withLock { $0 } != nil, "cancelled part-way")
        #expect(throws: CancellationError.self) { try outcome.get() }
        for (name, data) in v1 { #expect(try contents(dest + "/" + name) == data, "\(name) as installed before") }
        let beside = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix(".app.signet-") && !isKeptBesideDestination($0) }
        #expect(beside.isEmpty, "nothing left beside DIR: \(beside)")
        try pausing.release()
        #expect(pausing.finished() == "disconnected", "the transfer stopped at the cancel: \(pausing.requests)")
    }

    @Test("cancelling inside a large entry (hashed on the second core) throws CancellationError, leaves DIR as it was and nothing beside it")
    func cancelInsideLargeEntry() async throws {
        let server = try Self.shared.get()
        let directory = try TemporaryDirectory()
        func random(_ count: Int) -> Data {
            var generator = SystemRandomNumberGenerator()
            return Data((0..<(count / 8)).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } })
        }
        let v1 = ["small.bin": random(4096)]
        try PackageFixture.rangedPackage(v1, sequence: 1, at: directory.file("v1.zip"))
        let dest = directory.file("app")
        let policy = try Fixtures.trust("rsa2048-spki.der")
        _ = try Installer.install(directory.file("v1.zip"), to: dest, policy: policy)
        // v2 adds a 9 MiB file: at or above PipelinedHasher's threshold. A server with nginx's
        // pins pauses in it after 4 MB until let go.
        let large = random(9 << 20)
        #expect(UInt64(large.count) >= PipelinedHasher.threshold)
        let pausing = try ScriptedServer(
            script: ["r.zip": [.init(headers: ["ETag": "\"v2\""], honourRange: true, pauses: [.init(after: 4_000_000)])]], tls: server.tls)
        try PackageFixture.rangedPackage(v1.merging(["large.bin": large]) { $1 }, sequence: 2, at: pausing.file("r.zip"))
        let handle = Mutex<Task<InstallReport, Error>?>(nil)
        let cancelledAt = Mutex<UInt64?>(nil)
        var options = try PackageFixture.downloadOptions(server)
        options.progress = { progress in
            guard progress.received >= 3_000_000 else { return }
            cancelledAt.withLock { at in
                if at == nil, let task = handle.withLock({ $0 }) {
                    at = progress.received
                    task.cancel()
                }
            }
        }
        let url = pausing.url("r.zip")
        let task = Task { [options] in try await Installer.installAsync(downloading: url, to: dest, policy: policy, download: options) }
        handle.withLock { $0 = task }
        let outcome = await task.result
        let at = try #require(cancelledAt.withLock { $0 }, "cancelled part-way")
        #expect(at < UInt64(large.count), "inside the large entry: \(at)")
        #expect(throws: CancellationError.self) { try outcome.get() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dest).filter { !$0.hasPrefix(".") } == ["small.bin"], "DIR as it was")
        #expect(try contents(dest + "/small.bin") == v1["small.bin"])
        let beside = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix(".app.signet-") && !isKeptBesideDestination($0) }
        #expect(beside.isEmpty || beside.allSatisfy { $0.contains("staging") }, "at most the staging kept for the next run: \(beside)")
        try pausing.release()
        #expect(pausing.finished() == "disconnected", "the transfer stopped at the cancel: \(pausing.requests)")
        // The next run completes.
        let report = try await Installer.installAsync(
            downloading: url, to: dest, policy: policy, download: try PackageFixture.downloadOptions(server))
        #expect(report.files.count == 2)
        #expect(try contents(dest + "/large.bin") == large)
    }
}
