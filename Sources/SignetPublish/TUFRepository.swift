#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
public import SystemPackage
import SignetCore
import SignetTUF
import SignetCrypto

/// A TUF repository kept by a publisher as plain files (FORMAT.md §7): `metadata/` and
/// `targets/` are what a static HTTPS server publishes; `staging/` (never published) holds the
/// next root or targets version while its key holders add their signatures, each on their own
/// machine, and the roles' lifetimes. Consistent snapshots: every file is published under a new
/// name (`N.root.json`, `N.targets.json`, `N.snapshot.json`, `HASH.NAME`), only `timestamp.json`
/// is replaced, so a device never sees a half-updated repository.
///
/// Roles: root (offline, m of n) names every key; targets (m of n: a two-person release) lists
/// the packages; snapshot and timestamp (online, a cron job's keys) keep it fresh.
public struct TUFRepository: Sendable {
    /// The repository's folder.
    public let path: String
    var metadataDirectory: String { path + "/metadata" }
    var targetsDirectory: String { path + "/targets" }
    var stagingDirectory: String { path + "/staging" }
    /// Packages `repo add` copied for a staged targets version: never served (0700).
    var stagedTargetsDirectory: String { stagingDirectory + "/targets" }

    /// The TUF specification version written into new metadata.
    static let specVersion = "1.0.31"

    /// Opens the repository at `path`.
    public init(at path: String) throws {
        var info = stat()
        guard stat(path + "/metadata", &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw SignetError(.fileNotFound, "'\(path)' is not a TUF repository (no metadata/ folder): make one with `signet repo init`", path: path)
        }
        self.path = path
    }

    /// A role's keys and threshold (m of n).
    public struct RoleKeys: Sendable {
        public var keys: [PublicKey]
        public var threshold: Int
        public init(keys: [PublicKey], threshold: Int = 1) {
            self.keys = keys
            self.threshold = threshold
        }
    }

    /// How long each role's metadata is valid, in seconds.
    public struct Lifetimes: Sendable, Codable, Equatable {
        public var root: Int64 = 365 * 86_400
        public var targets: Int64 = 90 * 86_400
        public var snapshot: Int64 = 7 * 86_400
        public var timestamp: Int64 = 86_400
        public init() {}

        func seconds(_ role: String) -> Int64 {
            switch role {
            case "root": return root
            case "targets": return targets
            case "snapshot": return snapshot
            default: return timestamp
            }
        }
    }

    // MARK: Making a repository

    /// Makes a repository: root version 1 and an empty targets version 1, staged for their key
    /// holders' signatures (``sign(_:with:reviewed:acceptUnrecognized:now:)``, after ``review(_:now:)``), and the roles' lifetimes.
    @discardableResult
    public static func create(
        at path: String, root: RoleKeys, targets: RoleKeys, snapshot: RoleKeys, timestamp: RoleKeys,
        lifetimes: Lifetimes = Lifetimes(), now: Timestamp = .now
    ) throws -> TUFRepository {
        if let names = try? FileManager.default.contentsOfDirectory(atPath: path + "/metadata"), !names.isEmpty {
            throw SignetError(
                .fileExists, "'\(path)' already holds a TUF repository: rotate its keys with `signet repo rotate` instead of making it again", path: path)
        }
        for (name, value) in [("root", lifetimes.root), ("targets", lifetimes.targets), ("snapshot", lifetimes.snapshot), ("timestamp", lifetimes.timestamp)] {
            guard value > 0, value <= 10 * 366 * 86_400 else {
                throw SignetError(.usage, "the \(name) role's lifetime must be 1 second to 10 years, not \(value) seconds")
            }
        }
        var keys: [(String, TUFJSON)] = []
        var roles: [(String, TUFJSON)] = []
        for (name, role) in [("root", root), ("targets", targets), ("snapshot", snapshot), ("timestamp", timestamp)] {
            let entries = try role.keys.map(TUFPublicKeyEntry.init)
            let ids = Array(NSOrderedSet(array: entries.map(\.keyID))) as? [String] ?? []
            try checkThreshold(role.threshold, keys: ids.count, role: name)
            for entry in entries where !keys.contains(where: { $0.0 == entry.keyID }) { keys.append((entry.keyID, entry.json)) }
            roles.append((name, roleJSON(ids, threshold: role.threshold)))
        }
        let rootDocument = TUFDocument(
            signed: .object([
                ("_type", .string("root")), ("spec_version", .string(specVersion)), ("version", .number("1")),
                ("expires", .string(expiry(now, lifetimes.root))), ("consistent_snapshot", .bool(true)),
                ("keys", .object(keys)), ("roles", .object(roles))
            ]))
        let targetsDocument = TUFDocument(
            signed: .object([
                ("_type", .string("targets")), ("spec_version", .string(specVersion)), ("version", .number("1")),
                ("expires", .string(expiry(now, lifetimes.targets))), ("targets", .object([]))
            ]))
        // The folder's parent must exist: a mistyped path is not made, it is named.
        let parent = AtomicFile.parentDirectory(of: path)
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: parent, isDirectory: &isFolder), isFolder.boolValue else {
            throw SignetError(
                .fileNotFound,
                "cannot create the repository '\(path)': its parent folder '\(parent)' does not exist (make it first, e.g. mkdir -p '\(parent)', or check the path)",
                path: parent)
        }
        for folder in [path, path + "/metadata", path + "/targets", path + "/staging"] {
            if mkdir(folder, folder.hasSuffix("/staging") ? 0o700 : 0o755) != 0, errno != EEXIST {
                throw SignetError.posix(SystemCallFailure("mkdir", code: errno), "cannot create the repository folder", path: folder)
            }
        }
        let repository = try TUFRepository(at: path)
        try repository.writeStaged("root", rootDocument)
        try repository.writeStaged("targets", targetsDocument)
        try AtomicFile.write(Array(try JSONEncoder().encode(lifetimes)), to: repository.stagingDirectory + "/lifetimes.json", mode: 0o600, replace: true)
        return repository
    }

    static func checkThreshold(_ threshold: Int, keys: Int, role: String) throws {
        guard keys >= 1 else { throw SignetError(.usage, "the \(role) role needs at least one key") }
        guard threshold >= 1, threshold <= keys else {
            throw SignetError(
                .usage,
                "the \(role) role's threshold is \(threshold) with \(keys) distinct key\(keys == 1 ? "" : "s"): it must be 1 to \(keys) (more could never be met)"
            )
        }
    }

    static func roleJSON(_ ids: [String], threshold: Int) -> TUFJSON {
        .object([("keyids", .array(ids.map(TUFJSON.string))), ("threshold", .number(String(threshold)))])
    }

    static func expiry(_ now: Timestamp, _ lifetime: Int64) -> String {
        let (seconds, overflow) = now.secondsSinceEpoch.addingReportingOverflow(lifetime)
        return Timestamp(secondsSinceEpoch: overflow ? Timestamp.representable.upperBound : min(seconds, Timestamp.representable.upperBound)).rfc3339
    }

    var lifetimes: Lifetimes {
        guard let data = FileManager.default.contents(atPath: stagingDirectory + "/lifetimes.json"),
            let decoded = try? JSONDecoder().decode(Lifetimes.self, from: data)
        else { return Lifetimes() }
        return decoded
    }

    // MARK: Published and staged files

    /// The highest version published as `N.ROLE.json`, with its bytes.
    func latest(_ role: String) throws -> (version: Int64, bytes: [UInt8])? {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory)) ?? []
        let suffix = ".\(role).json"
        let versions = names.compactMap { name -> Int64? in
            guard name.hasSuffix(suffix) else { return nil }
            return Int64(name.dropLast(suffix.count))
        }
        guard let top = versions.max() else { return nil }
        return (top, try readSmallFile("\(metadataDirectory)/\(top)\(suffix)", what: "\(role) metadata", limit: 64 << 20))
    }

    /// The newest published root, verified as a client would (signed by its own threshold).
    func publishedRoot() throws -> TUFRoot {
        guard let (version, bytes) = try latest("root") else {
            throw SignetError(
                .fileNotFound, "the repository has no published root yet: its root key holders sign staging/root.json first (`signet repo sign --role root`)",
                path: metadataDirectory)
        }
        let name = "\(version).root.json"
        let root = try TUFRoot(TUFMetadata(bytes: bytes, expectedType: "root", name: name))
        try root.verify(root.metadata, as: "root", name: name)
        return root
    }

    func staged(_ role: String) throws -> TUFDocument? {
        let file = "\(stagingDirectory)/\(role).json"
        guard FileManager.default.fileExists(atPath: file) else { return nil }
        return try TUFDocument(bytes: try readSmallFile(file, what: "staged \(role) metadata", limit: 64 << 20), name: "staging/\(role).json")
    }

    func writeStaged(_ role: String, _ document: TUFDocument) throws {
        try AtomicFile.write(document.bytes, to: "\(stagingDirectory)/\(role).json", mode: 0o644, replace: true)
    }

    func publish(_ name: String, _ bytes: [UInt8], replace: Bool = false) throws {
        try AtomicFile.write(bytes, to: "\(metadataDirectory)/\(name)", mode: 0o644, replace: replace)
    }

    // MARK: Signing (root and targets: offline keys, one holder at a time)

    /// What signing did.
    public struct SignOutcome: Sendable {
        public let role: String
        public let version: Int64
        /// Valid signatures now on the file, and the threshold (for root, that of the new root
        /// and, after version 1, of the root before it too: both must be met).
        public let signatures: Int
        public let threshold: Int
        /// True when the thresholds are met and the file was published.
        public let published: Bool
        /// What else is needed, for a person.
        public let missing: String?
        /// True when this key had signed the staged file already: its signature was made again,
        /// and counts once.
        public var alreadySigned = false
        /// A root with every signature it needs that changes the keys of these roles (of
        /// targets, snapshot and timestamp) is held in staging, not published, until what
        /// devices read of them is signed again under it; `repo refresh` then publishes it
        /// (``TUFRepository/status(now:warnWithin:)`` says what it waits for).
        public var heldFor: [String] = []
        /// For targets signed under a held root: published as a file, and seen by devices when
        /// `repo refresh` publishes that root with it.
        public var heldRootVersion: Int64? = nil
    }

    /// Adds the signature of `key` to the staged `role` (`root` or `targets`) and publishes it
    /// when its thresholds are met. The key must be one the role's metadata names.
    ///
    /// What is signed is what the signer reviewed: `reviewed` is the digest of
    /// ``review(_:now:)`` the signer saw (at least its first 16 hex digits); a staged file that
    /// changed since is refused (`.metadataMismatch`), as is one whose review found a package
    /// that does not match its file (`problems` of kind `package`), and one with fields Signet's
    /// publisher never writes or a longer expiry unless `acceptUnrecognized`.
    public func sign(_ role: String, with key: PrivateKey, reviewed: String, acceptUnrecognized: Bool = false, now: Timestamp = .now) throws -> SignOutcome {
        guard role == "root" || role == "targets" else {
            throw SignetError(
                .usage, "only root and targets are signed by hand; snapshot and timestamp are signed by `signet repo refresh` with the online keys")
        }
        guard var document = try staged(role), let review = try review(role, now: now) else {
            throw SignetError(
                .fileNotFound,
                "nothing of role \(role) is waiting for signatures (staging/\(role).json): \(role == "root" ? "`signet repo rotate` stages a new root" : "`signet repo add` stages a new targets version")",
                path: stagingDirectory)
        }
        guard review.matches(reviewed), try Digest.compute(document.signed.canonical, algorithm: .sha256).hex == review.digest else {
            throw SignetError(
                .metadataMismatch,
                "staging/\(role).json is not what you reviewed: its digest is \(review.digest), you gave \(reviewed) (at least 16 hex digits of it are needed). It changed since, or the digest is another version's. Nothing was signed: review it again with `signet repo status \(path)`",
                path: "staging/\(role).json")
        }
        let packages = review.problems.filter { $0.kind == "package" }
        guard packages.isEmpty else {
            throw SignetError(
                .metadataMismatch,
                "staging/\(role).json lists packages that do not match their files in targets/: \(packages.map(\.message).joined(separator: " | ")). Nothing was signed",
                path: "staging/\(role).json")
        }
        let others = review.problems.filter { $0.kind != "package" }
        guard others.isEmpty || acceptUnrecognized else {
            throw SignetError(
                .metadataMismatch,
                "staging/\(role).json holds what signet repo never writes: \(others.map(\.message).joined(separator: " | ")). Nothing was signed; if you meant to sign it, give --accept-unrecognized",
                path: "staging/\(role).json")
        }
        let keyID = try TUFPublicKeyEntry(key.publicKey).keyID
        let name = "\(document.version).\(role).json"
        let again = document.signatures.contains { $0.keyID == keyID }
        var outcome = try sign(&document, role: role, name: name, key: key, keyID: keyID, now: now)
        outcome.alreadySigned = again
        return outcome
    }

    /// Refuses, before anything is staged, a key whose targets signature would not count
    /// (`repo add --key`, `repo rollout --key`): `.untrustedSigner`, naming the root version.
    public func checkTargetsSigner(_ key: PrivateKey) throws {
        do {
            _ = try targetsSigners(key, keyID: TUFPublicKeyEntry(key.publicKey).keyID, name: "targets")
        } catch var error as SignetError where error.code == .untrustedSigner {
            error.reason += "; nothing was staged (give a targets key with --key, or stage without --key for the key holders to sign)"
            throw error
        }
    }

    /// The root whose targets keys count (a complete held root's, else the published one's),
    /// a staged root still being signed, and the targets role; throws unless `keyID` is one of
    /// their targets keys.
    private func targetsSigners(_ key: PrivateKey, keyID: String, name: String) throws -> (TUFRoot, TUFRoot?, TUFRole) {
        let published = try publishedRoot()
        let held = try completeStagedRoot()
        let root = held?.root ?? published
        let stagedRoot = held == nil ? (try? staged("root")).flatMap { try? TUFRoot($0.metadata(as: "root", name: "staging/root.json")) } : nil
        guard let targetsRole = root.roles["targets"] else { throw SignetError(.malformedMetadata, "root has no targets role", path: name) }
        guard targetsRole.keyIDs.contains(keyID) || stagedRoot?.roles["targets"]?.keyIDs.contains(keyID) == true else {
            throw SignetError(
                .untrustedSigner,
                "key \(key.publicKey.keyID.short) (TUF \(keyID.prefix(12))) is not a targets key of root version \(root.metadata.version)\(stagedRoot == nil ? "" : " or of the staged root"): its signature would not count",
                path: name)
        }
        return (root, stagedRoot, targetsRole)
    }

    /// Signs `document` (the staged `role`) with `key` and publishes it when its thresholds are met.
    private func sign(_ document: inout TUFDocument, role: String, name: String, key: PrivateKey, keyID: String, now: Timestamp) throws -> SignOutcome {
        if role == "root" {
            let new = try TUFRoot(document.metadata(as: "root", name: name))
            let previous = document.version > 1 ? try publishedRoot() : nil
            let allowed = Set(new.roles["root"]?.keyIDs ?? []).union(previous?.roles["root"]?.keyIDs ?? [])
            guard allowed.contains(keyID) else {
                throw SignetError(
                    .untrustedSigner,
                    "key \(key.publicKey.keyID.short) (TUF \(keyID.prefix(12))) is not a root key of root version \(document.version)\(previous == nil ? "" : " or of the version before it"): its signature would not count",
                    path: name)
            }
            if let previous, previous.metadata.version + 1 != document.version {
                throw SignetError(
                    .usage,
                    "staging/root.json is version \(document.version) but the published root is version \(previous.metadata.version): stage it again with `signet repo rotate`",
                    path: name)
            }
            try document.sign(with: key, keyID: keyID)
            try writeStaged(role, document)
            let metadata = try document.metadata(as: "root", name: name)
            let ownCount = count(metadata, keys: new.keys, role: new.roles["root"]!)
            let previousCount = previous.map { count(metadata, keys: $0.keys, role: $0.roles["root"]!) }
            let ownMet = ownCount >= new.roles["root"]!.threshold
            let previousMet = previous.map { previousCount! >= $0.roles["root"]!.threshold } ?? true
            if ownMet && previousMet {
                // A root that changes the keys of what devices read next is held until that is
                // signed again under it: published now, it would strand every device.
                let failing = previous == nil ? [] : rolesFailing(under: new)
                guard failing.isEmpty else {
                    if failing.contains("targets") {
                        try restageTargets(now: now)
                        try publishStagedTargets(under: new)
                    }
                    var outcome = SignOutcome(
                        role: role, version: document.version, signatures: ownCount, threshold: new.roles["root"]!.threshold, published: false, missing: nil)
                    outcome.heldFor = failing
                    return outcome
                }
                try publish(name, document.bytes)
                unlink("\(stagingDirectory)/root.json")
                return SignOutcome(
                    role: role, version: document.version, signatures: ownCount, threshold: new.roles["root"]!.threshold, published: true, missing: nil)
            }
            var missing: [String] = []
            if !ownMet { missing.append("\(new.roles["root"]!.threshold - ownCount) more of its own root keys") }
            if let previous, !previousMet {
                missing.append("\(previous.roles["root"]!.threshold - previousCount!) more of root version \(previous.metadata.version)'s keys")
            }
            return SignOutcome(
                role: role, version: document.version, signatures: ownCount, threshold: new.roles["root"]!.threshold, published: false,
                missing: missing.joined(separator: " and "))
        }
        // Under a complete root held in staging, its targets keys count (what it waits for);
        // the keys of a staged root still being signed may sign too, and count once it is.
        let (root, stagedRoot, targetsRole) = try targetsSigners(key, keyID: keyID, name: name)
        let held = try completeStagedRoot()
        try document.sign(with: key, keyID: keyID)
        try writeStaged(role, document)
        let metadata = try document.metadata(as: "targets", name: name)
        let valid = count(metadata, keys: root.keys, role: targetsRole)
        guard valid >= targetsRole.threshold else {
            if let stagedRoot, let future = stagedRoot.roles["targets"] {
                let counted = count(metadata, keys: stagedRoot.keys, role: future)
                if counted >= future.threshold {
                    return SignOutcome(
                        role: role, version: document.version, signatures: counted, threshold: future.threshold, published: false,
                        missing: "root v\(stagedRoot.metadata.version)'s signatures: it names these targets keys, and targets is published once it is signed")
                }
            }
            return SignOutcome(
                role: role, version: document.version, signatures: valid, threshold: targetsRole.threshold, published: false,
                missing: "\(targetsRole.threshold - valid) more targets key\(targetsRole.threshold - valid == 1 ? "" : "s")")
        }
        try publishTargetFiles(of: document)
        try publish(name, document.bytes)
        unlink("\(stagingDirectory)/targets.json")
        var outcome = SignOutcome(role: role, version: document.version, signatures: valid, threshold: targetsRole.threshold, published: true, missing: nil)
        outcome.heldRootVersion = held?.document.version
        return outcome
    }

    /// Publishes the staged targets when `root` (a complete root, held) accepts it: devices
    /// see it when `repo refresh` publishes that root with a snapshot naming it.
    func publishStagedTargets(under root: TUFRoot) throws {
        guard let document = try staged("targets"), let role = root.roles["targets"] else { return }
        let name = "\(document.version).targets.json"
        guard count(try document.metadata(as: "targets", name: name), keys: root.keys, role: role) >= role.threshold else { return }
        try publishTargetFiles(of: document)
        try publish(name, document.bytes)
        unlink("\(stagingDirectory)/targets.json")
    }

    /// Valid signatures on `metadata` by distinct keys of `role`.
    func count(_ metadata: TUFMetadata, keys: [String: TUFKey], role: TUFRole) -> Int {
        role.keyIDs.filter { id in
            guard let key = keys[id], let signature = metadata.signatures[id] ?? nil else { return false }
            return key.verifies(signature, over: metadata.signedBytes)
        }.count
    }
}

// MARK: Swift-native forms: FilePath

extension TUFRepository {
    /// Opens the repository at `path` (``init(at:)-(String)``).
    public init(at path: FilePath) throws {
        try self.init(at: path.string)
    }

    /// ``create(at:root:targets:snapshot:timestamp:lifetimes:now:)-(String,_,_,_,_,_,_)`` with a `FilePath`.
    @discardableResult
    public static func create(
        at path: FilePath, root: RoleKeys, targets: RoleKeys, snapshot: RoleKeys, timestamp: RoleKeys,
        lifetimes: Lifetimes = Lifetimes(), now: Timestamp = .now
    ) throws -> TUFRepository {
        try create(at: path.string, root: root, targets: targets, snapshot: snapshot, timestamp: timestamp, lifetimes: lifetimes, now: now)
    }

    /// ``add(package:channels:allowLower:rollout:decryptionKey:now:)-(String,_,_,_,_,_)`` with a `FilePath`.
    public func add(
        package: FilePath, channels: [String], allowLower: Bool = false, rollout: TUFRollout? = nil, decryptionKey: DecryptionKey? = nil,
        now: Timestamp = .now
    ) throws -> TUFPackageTarget {
        try add(package: package.string, channels: channels, allowLower: allowLower, rollout: rollout, decryptionKey: decryptionKey, now: now)
    }
}
