import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import Signet
@testable import SignetNetwork
import SignetTestSupport

/// Issue 37: the TUF metadata reader's pieces against their references: canonical JSON against
/// securesystemslib's own encoder, RSASSA-PSS with any salt length against Wycheproof, hostile
/// metadata refused by name, delegation path patterns as python-tuf matches them.
@Suite("TUF metadata: canonical JSON, keys, hostile documents, delegations")
struct TUFTests {
    @Test("canonical JSON is byte for byte securesystemslib's encode_canonical, also for hostile strings and key orders")
    func canonicalMatchesSecuresystemslib() throws {
        let document = #"""
        {"z": 1, "a": {"y": [true, false, null, -0, 12345678901234], "b": "quote \" back \\ slash"},
         "é": "ünïcödé", "\u00e9\u0301": "combining", "😀": "astral", "A": "\n\t\u0000 controls", "": "empty key",
         "nested": [[], {}, [{"k": "v"}]], "big": 9007199254740993}
        """#
        let ours = try TUFJSON.parse(Array(document.utf8)).canonical
        let script = "import json, sys; from securesystemslib.formats import encode_canonical; sys.stdout.buffer.write(encode_canonical(json.loads(sys.stdin.read())).encode())"
        let theirs = try run("python3", ["-c", script], input: Data(document.utf8))
        try #require(theirs.status == 0, "\(theirs.stderr)")
        #expect(Data(ours) == theirs.stdout, "ours: \(String(decoding: ours, as: UTF8.self))\ntheirs: \(theirs.stdoutText)")
        // The file form escapes what the canonical form leaves raw, and reads back the same.
        let serialized = try TUFJSON.parse(Array(document.utf8)).serialized
        #expect(try TUFJSON.parse(serialized).canonical == ours)
    }

    struct File: Decodable {
        let testGroups: [Group]
    }

    struct Group: Decodable {
        let publicKeyPem: String
        let tests: [Case]
    }

    struct Case: Decodable {
        let tcId: Int
        let msg: String
        let sig: String
        let result: String
        let comment: String
    }

    static let pssFiles = ["rsa_pss_2048_sha256_mgf1_32_test.json", "rsa_pss_2048_sha256_mgf1_0_test.json", "rsa_pss_3072_sha256_mgf1_32_test.json"]

    @Test("rsassa-pss-sha256 keys verify as securesystemslib does (any salt length) and agree with Wycheproof", arguments: pssFiles)
    func pssAgreesWithWycheproof(name: String) throws {
        let file = try JSONDecoder().decode(File.self, from: contents(Fixtures.vectors + "/" + name))
        for group in file.testGroups {
            let json = TUFJSON.object([("keytype", .string("rsa")), ("scheme", .string("rsassa-pss-sha256")),
                                       ("keyval", .object([("public", .string(group.publicKeyPem))]))])
            let key = try TUFKey(json: json)
            for test in group.tests where test.result != "acceptable" {
                let verified = key.verifies([UInt8](hex: test.sig) ?? [], over: [UInt8](hex: test.msg) ?? [])
                // securesystemslib verifies PSS with any salt length (cryptography's PSS.AUTO):
                // Wycheproof's "s_len changed" signatures are valid to it, and so to Signet's
                // TUF client. Every other invalid signature is refused.
                let expected = test.result == "valid" || test.comment.hasPrefix("s_len changed")
                #expect(verified == expected, "\(name) tcId \(test.tcId): \(test.result) \(test.comment)")
            }
        }
    }

    static func root(_ mutate: (inout [String: Any]) -> Void = { _ in }) throws -> [UInt8] {
        var signed: [String: Any] = [
            "_type": "root", "spec_version": "1.0.31", "version": 1, "expires": "2099-01-01T00:00:00Z", "consistent_snapshot": true,
            "keys": [:], "roles": ["root": ["keyids": [], "threshold": 1], "targets": ["keyids": [], "threshold": 1],
                                   "snapshot": ["keyids": [], "threshold": 1], "timestamp": ["keyids": [], "threshold": 1]],
        ]
        mutate(&signed)
        return Array(try JSONSerialization.data(withJSONObject: ["signed": signed, "signatures": []]))
    }

    @Test("hostile metadata is refused by name, never trusted and never a crash")
    func hostileMetadata() throws {
        let cases: [(String, [UInt8])] = [
            ("not JSON", Array("{\"signed\":".utf8)),
            ("duplicate key", Array(#"{"signed":{"_type":"root","_type":"targets"},"signatures":[]}"#.utf8)),
            ("version zero", try Self.root { $0["version"] = 0 }),
            ("version beyond 64 bits", Array(String(decoding: try Self.root(), as: UTF8.self).replacingOccurrences(of: "\"version\":1", with: "\"version\":18446744073709551616").utf8)),
            ("float version", Array(String(decoding: try Self.root(), as: UTF8.self).replacingOccurrences(of: "\"version\":1", with: "\"version\":1.0").utf8)),
            ("spec 2.0", try Self.root { $0["spec_version"] = "2.0.0" }),
            ("spec garbage", try Self.root { $0["spec_version"] = "1.x" }),
            ("expires with offset", try Self.root { $0["expires"] = "2099-01-01T00:00:00+01:00" }),
            ("threshold zero", try Self.root { $0["roles"] = ["root": ["keyids": [], "threshold": 0], "targets": ["keyids": [], "threshold": 1], "snapshot": ["keyids": [], "threshold": 1], "timestamp": ["keyids": [], "threshold": 1]] }),
            ("a role missing", try Self.root { $0["roles"] = ["root": ["keyids": [], "threshold": 1]] }),
            ("a key id twice", try Self.root { $0["roles"] = ["root": ["keyids": ["a", "a"], "threshold": 1], "targets": ["keyids": [], "threshold": 1], "snapshot": ["keyids": [], "threshold": 1], "timestamp": ["keyids": [], "threshold": 1]] }),
            ("another role's type", try Self.root { $0["_type"] = "targets" }),
        ]
        for (label, bytes) in cases {
            #expect(throws: SignetError.self, "\(label)") { _ = try TUFTrustedSet(root: bytes, now: .now) }
        }
        // Well-formed but unsigned: the threshold of one is not met.
        do {
            _ = try TUFTrustedSet(root: try Self.root(), now: .now)
            Issue.record("an unsigned root was trusted")
        } catch let error as SignetError {
            #expect(error.code == .thresholdNotMet, "\(error)")
        }
    }

    @Test("delegation paths match as python-tuf's fnmatch per path part; hash prefixes and succinct bins")
    func delegationPaths() throws {
        func role(_ paths: [String]) throws -> TUFDelegatedRole {
            try TUFDelegatedRole(json: .object([("name", .string("r")), ("keyids", .array([])), ("threshold", .number("1")),
                                                ("terminating", .bool(false)), ("paths", .array(paths.map(TUFJSON.string)))]))
        }
        let script = "import fnmatch, sys, json; from tuf.api.metadata import DelegatedRole; cases = json.load(sys.stdin); print(json.dumps([DelegatedRole('r', [], 1, False, paths=[p]).is_delegated_path(t) for p, t in cases]))"
        let cases: [(String, String)] = [("*", "a"), ("*", "a/b"), ("a/*", "a/b"), ("a/*", "a/b/c"), ("*.zip", "app.zip"), ("app-?.zip", "app-1.zip"),
                                         ("app-?.zip", "app-10.zip"), ("[ab]*", "beta"), ("[!ab]*", "beta"), ("dir/", "dir/"), ("\\*", "*"), ("", "")]
        let input = try JSONSerialization.data(withJSONObject: cases.map { [$0.0, $0.1] })
        let theirs = try run("python3", ["-c", script], input: input)
        try #require(theirs.status == 0, "\(theirs.stderr)")
        let expected = try JSONSerialization.jsonObject(with: theirs.stdout) as? [Bool] ?? []
        for (index, (pattern, target)) in cases.enumerated() {
            #expect(try role([pattern]).matches(target) == expected[index], "pattern '\(pattern)' target '\(target)'")
        }
        let prefixed = try TUFDelegatedRole(json: .object([("name", .string("bin")), ("keyids", .array([])), ("threshold", .number("1")),
                                                           ("terminating", .bool(false)), ("path_hash_prefixes", .array([.string("a6")]))]))
        // SHA-256("app.zip") starts with a6.
        let digest = try Digest.compute(Array("app.zip".utf8), algorithm: .sha256).hex
        #expect(prefixed.matches("app.zip") == digest.hasPrefix("a6"))
        let bins = try TUFSuccinctRoles(json: .object([("keyids", .array([])), ("threshold", .number("1")), ("bit_length", .number("8")), ("name_prefix", .string("bin"))]))
        let binScript = "import sys; from tuf.api.metadata import SuccinctRoles; print(SuccinctRoles([], 1, 8, 'bin').get_role_for_target(sys.argv[1]))"
        for target in ["app.zip", "a/b/c", "ü"] {
            let python = try run("python3", ["-c", binScript, target])
            #expect(bins.role(for: target) == python.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines), "\(target)")
            #expect(bins.contains(bins.role(for: target)))
        }
        #expect(!bins.contains("bin-100") && !bins.contains("bin-g0") && !bins.contains("other-00"))
    }

    @Test("the async client refreshes a repository made with the library API; a cancelled refresh stops at once")
    func asyncClient() async throws {
        let server = try HTTPSServer()
        let key = try GeneratedKey.generate(bits: 2048).privateKey
        let site = server.www + "/library"
        let one = TUFRepository.RoleKeys(keys: [key.publicKey])
        let repository = try TUFRepository.create(at: site, root: one, targets: one, snapshot: one, timestamp: one)
        #expect(try repository.sign("root", with: key, reviewed: try repository.review("root")!.digest).published)
        #expect(try repository.sign("targets", with: key, reviewed: try repository.review("targets")!.digest).published)
        _ = try repository.refresh(snapshotKeys: [key], timestampKeys: [key])
        let work = try TemporaryDirectory()
        try TUFClient.initialize(metadataDirectory: work.file("metadata"), trustedRoot: Array(contents(site + "/metadata/1.root.json")))
        var options = TUFClientOptions(metadataDirectory: work.file("metadata"), metadataURL: server.url("library/metadata/"))
        options.download = try DownloadTests.options(server)
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

    @Test("peer keys (issue 51): an unchanged file may keep a signature by another key of the role that lists the manifest, never by another role's key or a revoked one")
    func peerKeys() throws {
        let a = try PublicKey(contentsOf: Fixtures.key("rsa2048-spki.der"))
        let b = try PublicKey(contentsOf: Fixtures.key("other3072-spki.der"))
        let c = try PublicKey(contentsOf: Fixtures.key("rsa1024-spki.der"), allowWeakKey: true)
        let bytes = Array("the manifest as signed".utf8)
        let digest = try Digest.compute(bytes, algorithm: .sha256).hex
        let manifest = Manifest(algorithm: .rsaPSSSHA256, created: Timestamp(secondsSinceEpoch: 0), expires: nil, files: [],
                                keyID: a.keyID, name: "app", sequence: 3, version: "3")
        // Outside TUF: every other key the policy accepts.
        var policy = TrustPolicy(keys: [a, b, c])
        #expect(Set(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).map(\.keyID)) == [b.keyID, c.keyID])
        policy.revoked = [c.keyID]
        #expect(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).map(\.keyID) == [b.keyID])
        // Through TUF: only the keys of the role whose metadata lists this manifest.
        policy = TrustPolicy(keys: [a, b, c])
        policy.tufOnlyKeys = [a.keyID, b.keyID, c.keyID]
        policy.tufListings = [
            .init(name: "app", sequence: 3, manifestSHA256: digest, keyIDs: [a.keyID, b.keyID], role: "targets", threshold: 1, roleKeys: 2),
            .init(name: "tools", sequence: 1, manifestSHA256: String(repeating: "0", count: 64), keyIDs: [c.keyID], role: "tools", threshold: 1, roleKeys: 1),
            .init(name: "app", sequence: 2, manifestSHA256: String(repeating: "1", count: 64), keyIDs: [a.keyID, c.keyID], role: "old", threshold: 1, roleKeys: 2),
        ]
        #expect(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).map(\.keyID) == [b.keyID])
        #expect(policy.peerKeys(of: c.keyID, manifestBytes: bytes, manifest: manifest).isEmpty, "c's roles do not list this manifest")
        policy.revoked = [b.keyID]
        #expect(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).isEmpty)
    }
}
