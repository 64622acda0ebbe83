import Foundation
import SystemPackage
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetTUF
import SignetTestSupport

/// A TUF repository held in memory and served to the client through its transport seam (as
/// python-tuf's `RepositorySimulator` serves its `ngclient`): every role's metadata is built
/// here, signed with fixture keys (no key generation), and can be altered, re-signed or
/// withheld between refreshes, so that rotation, freeze, rollback, mix-and-match, thresholds,
/// delegations and endless data run in process, with no server and no wait. The client's code
/// path is the same as over HTTPS: only the transport differs.
final class MemoryRepository: TUFTransport {
    /// The URL the client is given; files are served from `files` by the path below it.
    static let metadataURL = "mem://repository/metadata/"
    static let targetsURL = "mem://repository/targets/"

    struct Key {
        let key: PrivateKey
        let entry: TUFPublicKeyEntry
        var id: String { entry.keyID }

        init(_ fixture: String) throws {
            key = try PrivateKey(contentsOf: Fixtures.key(fixture), allowWeakKey: true)
            entry = try TUFPublicKeyEntry(key.publicKey)
        }
    }

    /// The fixture keys: distinct RSA keys (the 1024-bit one is fine for signing metadata in a
    /// test: the client checks signatures, not key sizes).
    /// Loaded per repository, not held in a static: a static holding TUF's JSON (an indirect
    /// enum, its pointers tagged) reads as a leak to LeakSanitizer at exit.
    let keys: [Key]

    /// Served files by path below the repository (`metadata/1.root.json`, `targets/app.zip`).
    var files: [String: [UInt8]] = [:]
    private(set) var requests = 0
    private(set) var bytesReceived: UInt64 = 0
    /// Every path asked for, in order.
    private(set) var asked: [String] = []

    /// Each role's keys and threshold (delegated roles too), versions and expiry.
    var roleKeys: [String: [Key]] = [:]
    var thresholds: [String: Int] = [:]
    var versions: [String: Int64] = ["root": 1, "timestamp": 1, "snapshot": 1, "targets": 1]
    var expires = Timestamp(rfc3339: "2099-01-01T00:00:00Z")!
    /// Targets the top-level role lists: path → bytes.
    var targets: [String: [UInt8]] = [:]
    /// Delegations of the top-level targets role: (role, paths) with their targets.
    var delegations: [(role: String, paths: [String], targets: [String: [UInt8]])] = []

    init() {
        keys = ["rsa2048-pkcs8.pem", "other3072-pkcs8.pem", "rsa1024-pkcs8.pem"].map { try! Key($0) }
        for role in ["root", "timestamp", "snapshot", "targets"] {
            roleKeys[role] = [keys[0]]
            thresholds[role] = 1
        }
    }

    // MARK: TUFTransport

    func get(_ url: String, limit: Int, what: String) throws -> TUFAnswer {
        requests += 1
        let path = Self.path(url)
        asked.append(path)
        guard let bytes = files[path] else { return .absent(status: 404) }
        // A real transport cuts a response off at the limit: so does this one.
        guard bytes.count <= limit else {
            throw SignetError(.downloadTooLarge, "\(what) is larger than the \(limit) bytes allowed for it: refused", path: path)
        }
        bytesReceived &+= UInt64(bytes.count)
        return .found(bytes)
    }

    func download(_ url: String, into fd: FileDescriptor, path: String, limit: Int64, what: String) throws -> Int64 {
        requests += 1
        let name = Self.path(url)
        asked.append(name)
        guard let bytes = files[name] else { throw SignetError(.network, "no \(what) at '\(name)'", path: name) }
        guard Int64(bytes.count) <= limit else {
            throw SignetError(.downloadTooLarge, "\(what) is larger than the \(limit) bytes its targets role states: refused", path: name)
        }
        _ = try fd.writeAll(bytes)
        bytesReceived &+= UInt64(bytes.count)
        return Int64(bytes.count)
    }

    static func path(_ url: String) -> String {
        String(url.dropFirst("mem://repository/".count))
    }

    // MARK: Building metadata

    private func common(_ type: String, _ role: String) -> [(String, TUFJSON)] {
        [
            ("_type", .string(type)), ("spec_version", .string("1.0.31")), ("version", .number(String(versions[role]!))),
            ("expires", .string(expires.rfc3339))
        ]
    }

    private static func roleJSON(_ keys: [Key], threshold: Int) -> TUFJSON {
        .object([("keyids", .array(keys.map { .string($0.id) })), ("threshold", .number(String(threshold)))])
    }

    /// Root as it stands now (its version from `versions`).
    func rootDocument() -> TUFDocument {
        var keys: [(String, TUFJSON)] = []
        for key in roleKeys.filter({ ["root", "timestamp", "snapshot", "targets"].contains($0.key) }).values.flatMap({ $0 })
        where !keys.contains(where: { $0.0 == key.id }) {
            keys.append((key.id, key.entry.json))
        }
        let roles: [(String, TUFJSON)] = ["root", "snapshot", "targets", "timestamp"].map { ($0, Self.roleJSON(roleKeys[$0]!, threshold: thresholds[$0]!)) }
        return TUFDocument(
            signed: .object(common("root", "root") + [("consistent_snapshot", .bool(false)), ("keys", .object(keys)), ("roles", .object(roles))]))
    }

    private static func targetsJSON(_ targets: [String: [UInt8]]) throws -> TUFJSON {
        .object(
            try targets.sorted { $0.key < $1.key }.map { path, bytes in
                (
                    path,
                    .object([
                        ("length", .number(String(bytes.count))),
                        ("hashes", .object([("sha256", .string(try Digest.compute(bytes, algorithm: .sha256).hex))]))
                    ])
                )
            })
    }

    /// Signs `document` with `signers` (by default the role's keys) and returns its bytes.
    func signed(_ document: TUFDocument, role: String, by signers: [Key]? = nil) throws -> [UInt8] {
        var document = document
        for key in signers ?? roleKeys[role]! { try document.sign(with: key.key, keyID: key.id) }
        return document.bytes
    }

    /// Publishes root (as `N.root.json` and `root.json`), targets, delegated roles, snapshot and
    /// timestamp at their current versions, each signed by its role's keys.
    func publish(rootSigners: [Key]? = nil) throws {
        let root = try signed(rootDocument(), role: "root", by: rootSigners)
        files["metadata/\(versions["root"]!).root.json"] = root
        files["metadata/root.json"] = root
        var delegated: [(String, TUFJSON)] = []
        var delegationKeys: [(String, TUFJSON)] = []
        for delegation in delegations {
            let keys = roleKeys[delegation.role]!
            for key in keys where !delegationKeys.contains(where: { $0.0 == key.id }) { delegationKeys.append((key.id, key.entry.json)) }
            delegated.append(
                (
                    delegation.role,
                    .object([
                        ("name", .string(delegation.role)), ("keyids", .array(keys.map { .string($0.id) })),
                        ("threshold", .number(String(thresholds[delegation.role]!))),
                        ("terminating", .bool(false)), ("paths", .array(delegation.paths.map { .string($0) }))
                    ])
                ))
            let document = TUFDocument(signed: .object(common("targets", delegation.role) + [("targets", try Self.targetsJSON(delegation.targets))]))
            files["metadata/\(delegation.role).json"] = try signed(document, role: delegation.role)
        }
        var members = common("targets", "targets") + [("targets", try Self.targetsJSON(targets))]
        if !delegations.isEmpty {
            members.append(("delegations", .object([("keys", .object(delegationKeys)), ("roles", .array(delegated.map(\.1)))])))
        }
        files["metadata/targets.json"] = try signed(TUFDocument(signed: .object(members)), role: "targets")
        for (path, bytes) in targets { files["targets/" + path] = bytes }
        for delegation in delegations { for (path, bytes) in delegation.targets { files["targets/" + path] = bytes } }
        var meta: [(String, TUFJSON)] = [("targets.json", .object([("version", .number(String(versions["targets"]!)))]))]
        for delegation in delegations {
            meta.append(("\(delegation.role).json", .object([("version", .number(String(versions[delegation.role]!)))])))
        }
        files["metadata/snapshot.json"] = try signed(TUFDocument(signed: .object(common("snapshot", "snapshot") + [("meta", .object(meta))])), role: "snapshot")
        let snapshotMeta: TUFJSON = .object([("snapshot.json", .object([("version", .number(String(versions["snapshot"]!)))]))])
        files["metadata/timestamp.json"] = try signed(
            TUFDocument(signed: .object(common("timestamp", "timestamp") + [("meta", snapshotMeta)])), role: "timestamp")
    }

    /// Bumps the versions of `roles` (a new publication of them).
    func bump(_ roles: String...) {
        for role in roles { versions[role, default: 1] += 1 }
    }

    // MARK: A device

    /// A device's metadata folder trusting this repository's first root.
    func device(in directory: TemporaryDirectory, now: Timestamp? = nil) throws -> (TUFClientOptions, () throws -> TUFClient) {
        let folder = directory.file("metadata-\(UUID().uuidString.prefix(8))")
        try TUFClient.initialize(metadataDirectory: folder, trustedRoot: requireFile(files["metadata/1.root.json"]))
        var options = TUFClientOptions(metadataDirectory: folder, metadataURL: Self.metadataURL)
        options.now = now
        return (options, { try TUFClient(options: options, transport: self) })
    }
}

/// The bytes, or a thrown error naming what is missing.
func requireFile(_ bytes: [UInt8]?) throws -> [UInt8] {
    guard let bytes else { throw SupportError("the repository has not published that file") }
    return bytes
}
