import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetTUF
import SignetTestSupport
import SignetCryptoTestSupport

/// The client's workflow (TUF specification 1.0, §5 "Detailed client workflow") against the
/// in-memory repository: each attack the specification names, refused with its code, and what
/// was verified before kept. No server, no wait, no key generation: the end-to-end runs
/// against nginx and python-tuf stay in the CLI suites as interop proof.
@Suite("TUF client workflow, in memory: rotation, freeze, rollback, mix-and-match, thresholds, delegations")
struct TUFWorkflowTests {
    static let app = Array("the package bytes".utf8)

    static func repository() throws -> MemoryRepository {
        let repository = MemoryRepository()
        repository.targets = ["app.zip": app]
        try repository.publish()
        return repository
    }

    static func code(_ body: () throws -> Void) -> SignetError.Code? {
        signetError(body)?.code
    }

    @Test("a first refresh walks to the end of the root chain, trusts every role at version 1 from four requests, and finds a target")
    func firstRefresh() throws {
        let directory = try TemporaryDirectory()
        let repository = try Self.repository()
        let (_, client) = try repository.device(in: directory)
        let report = try client().refresh()
        #expect(report.rootVersion == 1 && report.timestampVersion == 1 && report.snapshotVersion == 1 && report.targetsVersion == 1)
        #expect(repository.asked == ["metadata/2.root.json", "metadata/timestamp.json", "metadata/snapshot.json", "metadata/targets.json"])
        let target = try #require(try client().target("app.zip"))
        #expect(target.length == Int64(Self.app.count))
        #expect(try client().target("other.zip") == nil)
    }

    @Test("root rotation (§5.3): the new root must be signed by the old root's threshold and its own; the chain is walked version by version")
    func rootRotation() throws {
        let directory = try TemporaryDirectory()
        let repository = try Self.repository()
        let (_, client) = try repository.device(in: directory)
        try client().refresh()
        let old = repository.keys[0], new = repository.keys[1]
        // Version 2: new root key, signed by the old and the new: walked.
        repository.roleKeys["root"] = [new]
        repository.bump("root")
        try repository.publish(rootSigners: [old, new])
        // Version 3: signed by the new key only (the old one is no longer root's): walked too.
        repository.bump("root", "timestamp")
        try repository.publish()
        let report = try client().refresh()
        #expect(report.rootVersion == 3 && report.rootsWalked == 2)

        // Version 4 signed by a key that version 3 does not trust: refused, version 3 kept.
        repository.bump("root")
        try repository.publish(rootSigners: [repository.keys[2]])
        #expect(Self.code { try client().refresh() } == .thresholdNotMet)
        // Version 4 signed by the trusted key but not by its own (a key it names, not its signer).
        repository.roleKeys["root"] = [repository.keys[2]]
        try repository.publish(rootSigners: [new])
        #expect(Self.code { try client().refresh() } == .thresholdNotMet)
        repository.roleKeys["root"] = [new]
        try repository.publish()
        #expect(try client().refresh().rootVersion == 4)
    }

    @Test("freeze (§5.4.4): expired timestamp, snapshot or targets metadata is refused, whatever its signatures")
    func freeze() throws {
        let directory = try TemporaryDirectory()
        let repository = try Self.repository()
        let (options, _) = try repository.device(in: directory)
        var late = options
        late.now = Timestamp(rfc3339: "2099-06-01T00:00:00Z")
        #expect(Self.code { _ = try TUFClient(options: late, transport: repository).refresh() } == .expiredMetadata)
        // A fresh root, then a frozen timestamp: the root walk succeeds, the timestamp fails.
        repository.expires = Timestamp(rfc3339: "2020-01-01T00:00:00Z")!
        repository.bump("timestamp")
        try repository.publish()
        #expect(Self.code { _ = try TUFClient(options: options, transport: repository).refresh() } == .expiredMetadata)
    }

    @Test("rollback (§5.4.3, §5.5.5): an older timestamp or snapshot than the one trusted is refused")
    func rollback() throws {
        let directory = try TemporaryDirectory()
        let repository = try Self.repository()
        let (_, client) = try repository.device(in: directory)
        repository.bump("timestamp", "snapshot", "targets")
        try repository.publish()
        let stale = repository.files
        repository.bump("timestamp", "snapshot", "targets")
        try repository.publish()
        #expect(try client().refresh().timestampVersion == 3)
        // The version-2 files served again: the timestamp is older than the trusted one.
        repository.files = stale
        #expect(Self.code { try client().refresh() } == .rollback)
        // A new timestamp naming an older snapshot.
        repository.files = [:]
        repository.versions = ["root": 1, "timestamp": 4, "snapshot": 1, "targets": 1]
        try repository.publish()
        #expect(Self.code { try client().refresh() } == .rollback)
    }

    @Test("mix-and-match (§5.5.3, §5.6.3): a snapshot or targets file of another version than the trusted metadata names is refused")
    func mixAndMatch() throws {
        let directory = try TemporaryDirectory()
        let repository = try Self.repository()
        let (_, client) = try repository.device(in: directory)
        try client().refresh()
        // Timestamp and snapshot name targets version 2; the server still has version 1.
        let old = repository.files["metadata/targets.json"]
        repository.bump("timestamp", "snapshot", "targets")
        try repository.publish()
        repository.files["metadata/targets.json"] = old
        #expect(Self.code { try client().refresh() } == .metadataMismatch)
        // A snapshot of another version than the timestamp names.
        try repository.publish()
        repository.versions["timestamp"]! += 1
        let snapshot = repository.files["metadata/snapshot.json"]
        repository.versions["snapshot"]! += 1
        try repository.publish()
        repository.files["metadata/snapshot.json"] = snapshot
        #expect(Self.code { try client().refresh() } == .metadataMismatch)
    }

    @Test("thresholds (§5.4.2): m of n distinct keys; one key's signature twice is refused; a signature by a key the role does not list counts none")
    func thresholds() throws {
        let directory = try TemporaryDirectory()
        let repository = MemoryRepository()
        let (a, b, c) = (repository.keys[0], repository.keys[1], repository.keys[2])
        repository.roleKeys["targets"] = [a, b]
        repository.thresholds["targets"] = 2
        repository.targets = ["app.zip": Self.app]
        try repository.publish()
        let (_, client) = try repository.device(in: directory)
        #expect(try client().refresh().targetsVersion == 1, "2 of 2")

        func publishTargets(signedBy signers: [MemoryRepository.Key], duplicate: Bool = false) throws {
            repository.bump("timestamp", "snapshot", "targets")
            try repository.publish()
            var document = try TUFDocument(bytes: repository.files["metadata/targets.json"]!, name: "targets.json")
            document.signatures = []
            for key in signers { try document.sign(with: key.key, keyID: key.id) }
            if duplicate, let first = document.signatures.first { document.signatures.append(first) }
            repository.files["metadata/targets.json"] = document.bytes
        }
        try publishTargets(signedBy: [a])
        #expect(Self.code { try client().refresh() } == .thresholdNotMet, "1 of 2")
        try publishTargets(signedBy: [a], duplicate: true)
        #expect(Self.code { try client().refresh() } == .malformedMetadata, "one key's signature twice is refused (as python-tuf does), never two")
        try publishTargets(signedBy: [a, c])
        #expect(Self.code { try client().refresh() } == .thresholdNotMet, "a key targets does not list counts none")
        try publishTargets(signedBy: [b, a])
        #expect(try client().refresh().targetsVersion == 5)
    }

    @Test("delegations (§5.6.7): a delegated role lists only within its paths, signed by its own keys")
    func delegations() throws {
        let directory = try TemporaryDirectory()
        let repository = MemoryRepository()
        let community = repository.keys[1]
        repository.roleKeys["community"] = [community]
        repository.thresholds["community"] = 1
        repository.versions["community"] = 1
        repository.delegations = [(role: "community", paths: ["community/*"], targets: ["community/tool.zip": Self.app, "app.zip": Self.app])]
        try repository.publish()
        let (_, client) = try repository.device(in: directory)
        #expect(try client().target("community/tool.zip")?.length == Int64(Self.app.count))
        #expect(try client().target("app.zip") == nil, "outside the delegation's paths: not trusted from it")
        // The delegated role signed by a key the delegation does not name.
        repository.bump("timestamp", "snapshot", "community")
        try repository.publish()
        var document = try TUFDocument(bytes: repository.files["metadata/community.json"]!, name: "community.json")
        document.signatures = []
        try document.sign(with: repository.keys[2].key, keyID: repository.keys[2].id)
        repository.files["metadata/community.json"] = document.bytes
        #expect(Self.code { _ = try client().target("community/tool.zip") } == .thresholdNotMet)
    }

    @Test("endless data (§5.2): a timestamp larger than the client's bound is cut off and refused; a target longer than its length is never kept")
    func endlessData() throws {
        let directory = try TemporaryDirectory()
        let repository = try Self.repository()
        let (options, _) = try repository.device(in: directory)
        repository.files["metadata/timestamp.json"]! += [UInt8](repeating: 0x20, count: options.maximumTimestampLength)
        #expect(Self.code { _ = try TUFClient(options: options, transport: repository).refresh() } == .downloadTooLarge)
        try repository.publish()
        try FileManager.default.createDirectory(atPath: directory.file("out"), withIntermediateDirectories: true)
        let client = try TUFClient(options: options, transport: repository)
        let target = try #require(try client.target("app.zip"))
        repository.files["targets/app.zip"] = Self.app + [0]
        #expect(Self.code { _ = try client.download(target, from: MemoryRepository.targetsURL, into: directory.file("out")) } == .downloadTooLarge)
        repository.files["targets/app.zip"] = Array("the package byteZ".utf8)
        #expect(Self.code { _ = try client.download(target, from: MemoryRepository.targetsURL, into: directory.file("out")) } == .metadataMismatch)
        #expect(!FileManager.default.fileExists(atPath: directory.file("out/app.zip")), "nothing unverified is kept")
        repository.files["targets/app.zip"] = Self.app
        let downloaded = try client.download(target, from: MemoryRepository.targetsURL, into: directory.file("out"))
        #expect(try Array(Data(contentsOf: URL(fileURLWithPath: downloaded.path))) == Self.app)
    }
}
