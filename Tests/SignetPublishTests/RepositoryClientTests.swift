import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetNetwork
@testable import SignetTUF
@testable import SignetPublish
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport

/// The publisher's library API and the client together, over a real nginx: a repository made
/// with `TUFRepository` is refreshed by the async client, and a cancelled refresh stops at once.
@Suite("A repository made with the library, refreshed by the async client")
struct RepositoryClientTests {
    @Test("the async client refreshes a repository made with the library API; a cancelled refresh stops at once")
    func asyncClient() async throws {
        let server = try HTTPSServer.site("RepositoryClientTests")
        let key = try Fixtures.signingKey()
        let site = server.www + "/library"
        let one = TUFRepository.RoleKeys(keys: [key.publicKey])
        let repository = try TUFRepository.create(at: site, root: one, targets: one, snapshot: one, timestamp: one)
        #expect(try repository.sign("root", with: key, reviewed: try repository.review("root")!.digest).published)
        #expect(try repository.sign("targets", with: key, reviewed: try repository.review("targets")!.digest).published)
        _ = try repository.refresh(snapshotKeys: [key], timestampKeys: [key])
        let work = try TemporaryDirectory()
        try TUFClient.initialize(metadataDirectory: work.file("metadata"), trustedRoot: Array(contents(site + "/metadata/1.root.json")))
        var options = TUFClientOptions(metadataDirectory: work.file("metadata"), metadataURL: server.url("library/metadata/"))
        options.download = try PackageFixture.downloadOptions(server)
        let report = try await TUFClient.refreshAsync(options)
        #expect(report.rootVersion == 1 && report.timestampVersion == 1 && report.snapshotVersion == 1 && report.targetsVersion == 1, "\(report)")
        #expect(report.requests == 4, "2.root.json, timestamp, snapshot, targets: \(report)")

        // A server that accepts and never answers. The request could wait for --max-time (300 s):
        // a CancellationError proves the cancel ended it, and the server's own thread times how
        // long after the cancel the connection was closed. Wall time around the task would count
        // the cooperative threads, which other suites keep busy (CI once saw 16 s under ASan).
        let silent = try SilentServer()
        var stalled = options
        stalled.metadataURL = "http://127.0.0.1:\(silent.port)/metadata/"
        stalled.download.tls = TLSPolicy()
        stalled.download.tls.allowHTTP = true
        stalled.download.maxTime = 300
        let task = Task { try await TUFClient.refreshAsync(stalled) }
        #expect(await silent.connection(within: 120), "the refresh reached the server")
        let cancelled = Date()
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        let closed = try #require(await silent.close(within: 120), "the connection was closed")
        #expect(closed.timeIntervalSince(cancelled) < 5, "closed \(closed.timeIntervalSince(cancelled)) s after the cancel")
    }
}

/// A loopback TCP listener that accepts one connection and never answers; its own thread
/// records when the connection arrived and when the client closed it.
final class SilentServer: @unchecked Sendable {
    let port: Int
    private let socket: Int32
    private let events = NSCondition()
    private var connected = false
    private var closedAt: Date?

    init() throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.socket = socket
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(socket, $0, length) } }
        guard bound == 0, listen(socket, 8) == 0 else {
            Glibc.close(socket)
            port = 0
            throw SupportError("cannot listen")
        }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in serve() }
        thread.start()
    }

    /// Accepts one connection, reads (and ignores) until the client closes it.
    private func serve() {
        let connection = accept(socket, nil, nil)
        guard connection >= 0 else { return }
        defer { Glibc.close(connection) }
        events.lock()
        connected = true
        events.broadcast()
        events.unlock()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if count > 0 || (count < 0 && errno == EINTR) { continue }
            break
        }
        events.lock()
        closedAt = Date()
        events.broadcast()
        events.unlock()
    }

    /// Waits for the connection on a thread of its own: blocking a cooperative thread here
    /// starved the refresh task of the only other one on a 2-core machine (CI: 120 s, no
    /// connection, while every suite waited).
    func connection(within seconds: Double) async -> Bool {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.waitForConnection(seconds: seconds)) }.start()
        }
    }

    /// When the client closed the connection, waited for off the cooperative pool like `connection`.
    func close(within seconds: Double) async -> Date? {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: self.waitForClose(seconds: seconds)) }.start()
        }
    }

    private func waitForConnection(seconds: Double) -> Bool {
        events.lock()
        defer { events.unlock() }
        let limit = Date(timeIntervalSinceNow: seconds)
        while !connected, events.wait(until: limit) {}
        return connected
    }

    private func waitForClose(seconds: Double) -> Date? {
        events.lock()
        defer { events.unlock() }
        let limit = Date(timeIntervalSinceNow: seconds)
        while closedAt == nil, events.wait(until: limit) {}
        return closedAt
    }

    /// Closing the listener ends a pending accept (shutdown wakes it on Linux).
    deinit {
        shutdown(socket, Int32(SHUT_RDWR))
        Glibc.close(socket)
    }
}
