import Foundation
import Synchronization
import Testing
@testable import Signet
import SignetTestSupport

/// Issue 27 point 6: the library's channel API, without the CLI: `ChannelIndex.package(at:url:)`,
/// `publish`, `verify`, and the async `Updater.update` with progress and cancellation.
@Suite("Updater and ChannelIndex, as a library")
struct UpdaterTests {
    @Test("publish and verify an index; Updater installs what it names with progress; a cancelled update throws CancellationError and DIR stays as it was")
    func updateProgressAndCancel() async throws {
        let server = try HTTPSServer()
        let directory = try TemporaryDirectory()
        func random(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255) }) }
        let signer = Signer(key: try Fixtures.signingKey())
        let policy = try Fixtures.trust("rsa2048-spki.der")
        let package = server.www + "/slow/app.zip", index = server.www + "/slow/stable.json"
        func release(_ files: [String: Data], _ sequence: UInt64) throws {
            try DownloadTests.rangedPackage(files, sequence: sequence, at: package)
            try ChannelIndex.publish(try ChannelIndex.package(at: package, url: "app.zip"), channel: "stable", signer: signer, lifetime: 3_600, out: index)
        }
        let v1 = ["a.bin": random(300_000), "b.bin": random(300_000)]
        try release(v1, 1)
        let published = try ChannelIndex.verify(try [UInt8](contents(index)), source: index, policy: policy, channel: "stable")
        #expect(published.package.sequence == 1 && published.channel == "stable")

        let dest = directory.file("app")
        let seen = Mutex<[DownloadProgress]>([])
        var options = UpdateOptions(channel: "stable")
        options.download = try DownloadTests.options(server)
        options.download.progress = { progress in seen.withLock { $0.append(progress) } }
        let report = try await Updater.updateAsync(index: server.url("slow/stable.json"), to: dest, policy: policy, options: options)
        #expect(report.install != nil && report.index.serial == published.serial)
        for (name, data) in v1 { #expect(try contents(dest + "/" + name) == data) }
        #expect(seen.withLock { $0.count } >= 2, "progress reported")

        // A new release; the update is cancelled once 100 KB of it arrived.
        try release(["a.bin": random(300_000), "b.bin": random(300_000)], 2)
        let handle = Mutex<Task<UpdateReport, Error>?>(nil)
        let cancelled = Mutex(false)
        options.download.progress = { progress in
            guard progress.received >= 100_000, let task = handle.withLock({ $0 }) else { return }
            cancelled.withLock { done in
                if !done { done = true; task.cancel() }
            }
        }
        let task = Task { [options] in try await Updater.updateAsync(index: server.url("slow/stable.json"), to: dest, policy: policy, options: options) }
        handle.withLock { $0 = task }
        let outcome = await task.result
        #expect(cancelled.withLock { $0 }, "cancelled part-way")
        #expect(throws: CancellationError.self) { try outcome.get() }
        for (name, data) in v1 { #expect(try contents(dest + "/" + name) == data, "\(name) as installed before") }
    }
}
