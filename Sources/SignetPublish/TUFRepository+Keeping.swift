#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetTUF
import SignetCrypto
import SignetPackage

/// Keeping a repository servable: a new root that changes the keys of targets,
/// snapshot or timestamp is held until what devices read is signed again under it, and then
/// published by `repo refresh` together with a snapshot and timestamp it accepts; expiry is
/// watched; targets and root are renewed without a new release.
extension TUFRepository {
    // MARK: A root held until what it needs is signed

    /// The staged root when it has every signature it needs (its own root threshold and, after
    /// version 1, the published root's): ready, but held until the roles it changes are signed
    /// again under it (``rolesFailing(under:)``); `repo refresh` publishes it.
    func completeStagedRoot() throws -> (root: TUFRoot, document: TUFDocument)? {
        guard let document = try staged("root") else { return nil }
        let name = "\(document.version).root.json"
        guard let metadata = try? document.metadata(as: "root", name: name), let new = try? TUFRoot(metadata),
            let own = new.roles["root"], count(metadata, keys: new.keys, role: own) >= own.threshold
        else { return nil }
        if document.version > 1 {
            guard let previous = try? publishedRoot(), previous.metadata.version + 1 == document.version, let old = previous.roles["root"],
                count(metadata, keys: previous.keys, role: old) >= old.threshold
            else { return nil }
        }
        return (new, document)
    }

    /// The root a targets signature counts under now: the complete staged root, else the
    /// published one.
    func effectiveRoot() throws -> TUFRoot {
        try completeStagedRoot()?.root ?? publishedRoot()
    }

    /// Of targets, snapshot and timestamp, those whose file devices read now (the targets
    /// version the newest snapshot names, the newest snapshot, timestamp.json) `root` would
    /// not accept: each must be signed again under it before it is published.
    func rolesFailing(under root: TUFRoot) -> [String] {
        var failing: [String] = []
        let snapshot = try? latest("snapshot")
        var targetsVersion = try? latest("targets")?.version
        if let (version, bytes) = snapshot, let metadata = try? TUFMetadata(bytes: bytes, expectedType: "snapshot", name: "\(version).snapshot.json"),
            let named = (try? TUFSnapshot(metadata))?.meta["targets.json"]?.version
        {
            targetsVersion = named
        }
        if let version = targetsVersion ?? nil, !accepts(root, "targets", file: "\(version).targets.json") { failing.append("targets") }
        if let (version, _) = snapshot, !accepts(root, "snapshot", file: "\(version).snapshot.json") { failing.append("snapshot") }
        if FileManager.default.fileExists(atPath: metadataDirectory + "/timestamp.json"), !accepts(root, "timestamp", file: "timestamp.json") {
            failing.append("timestamp")
        }
        return failing
    }

    /// Of targets, snapshot and timestamp, those whose published metadata the staged root would
    /// not accept (empty when none is staged): each is signed again under it before it is
    /// published, and until then the root is held.
    public func rolesToSignAgain() throws -> [String] {
        guard let document = try staged("root"), let root = try? TUFRoot(document.metadata(as: "root", name: "staging/root.json")),
            document.version > 1
        else { return [] }
        return rolesFailing(under: root)
    }

    /// Whether `root` accepts the published `file` as `role` (its threshold of valid signatures).
    func accepts(_ root: TUFRoot, _ role: String, file: String) -> Bool {
        guard let bytes = try? readSmallFile("\(metadataDirectory)/\(file)", what: "\(role) metadata", limit: 64 << 20),
            let metadata = try? TUFMetadata(bytes: bytes, expectedType: role, name: file)
        else { return false }
        return (try? root.verify(metadata, as: role, name: file)) != nil
    }

    /// The newest published targets version `root` accepts, at least `minimum` (a snapshot
    /// never names an older one than it did: devices would refuse it as a rollback).
    func newestTargets(acceptedBy root: TUFRoot, atLeast minimum: Int64) throws -> (version: Int64, bytes: [UInt8])? {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory)) ?? []
        let versions = names.compactMap { $0.hasSuffix(".targets.json") ? Int64($0.dropLast(".targets.json".count)) : nil }
        for version in versions.sorted(by: >) where version >= minimum {
            if accepts(root, "targets", file: "\(version).targets.json") {
                return (version, try readSmallFile("\(metadataDirectory)/\(version).targets.json", what: "targets metadata", limit: 64 << 20))
            }
        }
        return nil
    }

    /// Stages the next targets version with the same targets (for a new key set to sign, or a
    /// renewal), unless a targets version is staged already. Returns the staged version.
    @discardableResult
    func restageTargets(now: Timestamp) throws -> Int64 {
        if let staged = try staged("targets") { return staged.version }
        var document = try nextTargets(now: now)
        document.set([("expires", .string(Self.expiry(now, lifetimes.targets)))])
        try writeStaged("targets", document)
        return document.version
    }

    // MARK: Renewal

    /// Stages the next version of `role` (`root` or `targets`) with the same content and a new
    /// expiry (the role's lifetime from `now`), for its key holders to sign: how a repository
    /// with no new release keeps its targets (90 days by default) and root (1 year) from
    /// expiring. Refused when a version of the role is staged already: signing that renews it.
    public func renew(_ role: String, now: Timestamp = .now) throws -> Int64 {
        guard role == "root" || role == "targets" else {
            throw SignetError(
                .usage, "only root and targets are renewed by their key holders; snapshot and timestamp are renewed by `signet repo refresh`, not '\(role)'")
        }
        if let staged = try staged(role) {
            let expires = staged.signed["expires"]?.stringValue ?? "?"
            throw SignetError(
                .usage,
                "staging/\(role).json already holds \(role) v\(staged.version) (expires \(expires)), waiting for signatures: signing it renews \(role) (`signet repo status \(path)` shows it)",
                path: stagingDirectory)
        }
        if role == "targets" { return try restageTargets(now: now) }
        let root = try publishedRoot()
        var document = try TUFDocument(bytes: try latest("root")?.bytes ?? [], name: "\(root.metadata.version).root.json")
        document.signatures = []
        let (next, overflow) = root.metadata.version.addingReportingOverflow(1)
        guard !overflow else { throw SignetError(.usage, "the root role is at the highest version there is") }
        document.set([("version", .number(String(next))), ("expires", .string(Self.expiry(now, lifetimes.root)))])
        try writeStaged("root", document)
        return next
    }

    // MARK: Discarding what is staged

    /// Removes the staged `role` (`root` or `targets`) and, for targets, every package file in
    /// `targets/` that no published targets version lists (what `repo add` copied for it):
    /// how a staged version no one will sign is dropped (deleting
    /// `staging/targets.json` by hand would leave the package behind). Returns the version discarded
    /// and the package files removed. Nothing published changes.
    public func discard(_ role: String) throws -> (version: Int64, removed: [String]) {
        guard role == "root" || role == "targets" else {
            throw SignetError(.usage, "only root and targets are staged for signatures, not '\(role)'")
        }
        guard let document = try staged(role) else {
            throw SignetError(.fileNotFound, "nothing of role \(role) is staged in '\(path)'", path: stagingDirectory)
        }
        guard unlink("\(stagingDirectory)/\(role).json") == 0 || errno == ENOENT else {
            throw SignetError.posix(SystemCallFailure("unlink", code: errno), "cannot remove the staged \(role)", path: "\(stagingDirectory)/\(role).json")
        }
        AtomicFile.syncDirectory(stagingDirectory)
        guard role == "targets" else { return (document.version, []) }
        // What any published version lists stays: a device may be on any of them.
        var listed: Set<String> = []
        let names = (try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory)) ?? []
        for name in names where name.hasSuffix(".targets.json") {
            guard let bytes = try? readSmallFile("\(metadataDirectory)/\(name)", what: "targets metadata", limit: 64 << 20),
                let published = try? TUFDocument(bytes: bytes, name: name)
            else { continue }
            for (target, value) in published.signed["targets"]?.objectMembers ?? [] {
                if let sha256 = value["hashes"]?["sha256"]?.stringValue { listed.insert("\(sha256).\(target)") }
            }
        }
        var removed: [String] = []
        for (target, value) in document.signed["targets"]?.objectMembers ?? [] {
            guard let sha256 = value["hashes"]?["sha256"]?.stringValue, !target.contains("/") else { continue }
            let file = "\(sha256).\(target)"
            guard !listed.contains(file) else { continue }
            // Staged by `repo add` (or, from before staged packages, copied into targets/).
            if unlink("\(stagedTargetsDirectory)/\(file)") == 0 || unlink("\(targetsDirectory)/\(file)") == 0 { removed.append(file) }
        }
        if !removed.isEmpty {
            AtomicFile.syncDirectory(targetsDirectory)
            AtomicFile.syncDirectory(stagedTargetsDirectory)
        }
        return (document.version, removed)
    }

    // MARK: Status

    /// What a repository holds now: each role's published version, expiry, keys and threshold;
    /// what waits for signatures; the packages its targets list; and what needs doing.
    public struct Status: Sendable {
        public struct Role: Sendable {
            public let name: String
            public let version: Int64
            public let expires: Timestamp?
            /// TUF key ids (what the metadata names).
            public let keyIDs: [String]
            /// The same keys' Signet ids (``/SignetCrypto/KeyID``: what `keygen`, `key show` and `pack`
            /// print), in the same order; empty for a key Signet cannot read.
            public let signetKeyIDs: [String]
            public let threshold: Int

            /// "in 5 days" or "EXPIRED 3 hours ago", from `now`; nil when not published.
            public func relativeExpiry(now: Timestamp = .now) -> String? {
                guard let expires else { return nil }
                let left = expires.secondsSinceEpoch &- now.secondsSinceEpoch
                return left > 0 ? "in \(TUFRepository.span(left))" : "EXPIRED \(TUFRepository.span(-left)) ago"
            }
        }
        public struct Staged: Sendable {
            public let role: String
            public let version: Int64
            public let signatures: [String]
        }
        /// Something that needs doing before devices are stranded.
        public struct Alert: Sendable {
            public let role: String
            /// `threshold` (a published file the root does not accept: devices refuse it),
            /// `expired`, `expiring` (root or targets within the warning window) or `held` (a
            /// signed root waiting for what it changes to be signed again).
            public let kind: String
            /// What is wrong and the command that fixes it.
            public let message: String
        }
        public let roles: [Role]
        public let staged: [Staged]
        public let packages: [TUFPackageTarget]
        public let alerts: [Alert]
    }

    /// Reads the repository's state (nothing is changed). Root and targets expiring within
    /// `warnWithin` seconds of `now` are flagged, as is anything expired.
    public func status(now: Timestamp = .now, warnWithin: Int64 = 14 * 86_400) throws -> Status {
        let root = try? publishedRoot()
        var roles: [Status.Role] = []
        for name in ["root", "targets", "snapshot", "timestamp"] {
            var version: Int64 = 0
            var expires: Timestamp? = nil
            if name == "timestamp" {
                if let bytes = try? readSmallFile(metadataDirectory + "/timestamp.json", what: "timestamp", limit: 1 << 20),
                    let metadata = try? TUFMetadata(bytes: bytes, expectedType: name, name: name)
                {
                    (version, expires) = (metadata.version, metadata.expires)
                }
            } else if let (latestVersion, bytes) = try latest(name), let metadata = try? TUFMetadata(bytes: bytes, expectedType: name, name: name) {
                (version, expires) = (latestVersion, metadata.expires)
            }
            let ids = root?.roles[name]?.keyIDs ?? []
            roles.append(
                Status.Role(
                    name: name, version: version, expires: expires, keyIDs: ids,
                    signetKeyIDs: ids.map { signetKeyID($0, in: root?.keys ?? [:]) ?? "" },
                    threshold: root?.roles[name]?.threshold ?? 0))
        }
        var waiting: [Status.Staged] = []
        for name in ["root", "targets"] {
            if let document = try staged(name) {
                waiting.append(Status.Staged(role: name, version: document.version, signatures: document.signatures.map(\.keyID)))
            }
        }
        var packages: [TUFPackageTarget] = []
        if let (version, bytes) = try latest("targets") {
            let targets = try TUFTargets(TUFMetadata(bytes: bytes, expectedType: "targets", name: "\(version).targets.json"))
            // Each plan as devices count it: from the publication the snapshot states (a plan in
            // a version not yet published keeps counting from its publication, to come).
            let published = publishedTime(ofTargets: version)
            packages = targets.targets.values.compactMap(TUFPackageTarget.init).map { published == nil ? $0 : $0.resolvingRollout(publishedAt: published) }
                .sorted { ($0.name, $0.sequence) < ($1.name, $1.sequence) }
        }
        return Status(
            roles: roles, staged: waiting, packages: packages, alerts: root.map { alerts(root: $0, roles: roles, now: now, warnWithin: warnWithin) } ?? [])
    }

    private func alerts(root: TUFRoot, roles: [Status.Role], now: Timestamp, warnWithin: Int64) -> [Status.Alert] {
        var alerts: [Status.Alert] = []
        let pending = try? completeStagedRoot()
        for role in rolesFailing(under: root) {
            let fix =
                role == "targets"
                ? "stage it again with `signet repo renew \(path) --role targets`, have its key holders sign it (`signet repo sign --role targets`), then `signet repo refresh`"
                : "run `signet repo refresh \(path)` with the \(role) keys root v\(root.metadata.version) names"
            alerts.append(
                .init(
                    role: role, kind: "threshold",
                    message:
                        "the \(role) metadata devices read does not meet the \(role) threshold of root v\(root.metadata.version) (\(root.roles[role]?.threshold ?? 0) of its keys): every device refuses it; \(fix)"
                ))
        }
        if let pending {
            let failing = rolesFailing(under: pending.root)
            alerts.append(.init(role: "root", kind: "held", message: heldMessage(version: pending.document.version, failing: failing)))
        }
        // A listed release whose package the root devices trust (or the held one they will)
        // does not verify: stranded until it is re-signed (FORMAT §7, "Rotating the targets keys").
        let judging = pending?.root ?? root
        for release in (try? stranded(under: judging, now: now)) ?? [] {
            alerts.append(.init(role: "targets", kind: "stranded", message: describe(release, underRoot: judging.metadata.version)))
        }
        for role in roles {
            guard let expires = role.expires else { continue }
            let left = expires.secondsSinceEpoch &- now.secondsSinceEpoch
            let renew = renewal(role.name)
            if left <= 0 {
                alerts.append(
                    .init(
                        role: role.name, kind: "expired",
                        message: "\(role.name) v\(role.version) expired \(expires.rfc3339) (\(Self.span(-left)) ago): devices refuse to update; \(renew)"))
            } else if left <= warnWithin, role.name == "root" || role.name == "targets" {
                alerts.append(
                    .init(
                        role: role.name, kind: "expiring",
                        message: "\(role.name) v\(role.version) expires \(expires.rfc3339), in \(Self.span(left)): \(renew) before then"))
            }
        }
        return alerts
    }

    /// What a held root waits for, and the command that publishes it.
    func heldMessage(version: Int64, failing: [String]) -> String {
        var steps: [String] = []
        if failing.contains("targets") {
            steps.append(
                ((try? staged("targets")) ?? nil) != nil
                    ? "the targets key holders it names sign staged targets (`signet repo sign \(path) --role targets`)"
                    : "targets is staged again (`signet repo renew \(path) --role targets`) and signed by the targets key holders it names")
        }
        let online = failing.filter { $0 != "targets" }
        steps.append(
            "`signet repo refresh \(path)`\(online.isEmpty ? "" : " with the \(online.joined(separator: " and ")) keys it names (change the cron job's keys)") publishes it"
        )
        return "root v\(version) is signed and held so devices never see it before what it changes is signed again: \(steps.joined(separator: ", then "))"
    }

    /// How to renew `role`.
    private func renewal(_ role: String) -> String {
        switch role {
        case "root": return "`signet repo renew \(path) --role root` stages it again for the root key holders to sign"
        case "targets": return "`signet repo renew \(path) --role targets` stages it again for the targets key holders to sign (or add a new release)"
        default: return "run `signet repo refresh \(path)` (hourly, from a timer)"
        }
    }

    /// `3 days`, `5 hours`, `12 minutes`.
    static func span(_ seconds: Int64) -> String {
        let (value, unit): (Int64, String) =
            seconds >= 2 * 86_400 ? (seconds / 86_400, "day") : seconds >= 2 * 3_600 ? (seconds / 3_600, "hour") : (max(1, seconds / 60), "minute")
        return "\(value) \(unit)\(value == 1 ? "" : "s")"
    }

    /// The Signet id (16 hex digits) of the key `tufID` names in `keys`, when Signet reads it.
    func signetKeyID(_ tufID: String, in keys: [String: TUFKey]) -> String? {
        keys[tufID]?.publicKey(source: "TUF key \(tufID.prefix(16))")?.keyID.short
    }

    /// A key as people see it: its Signet id (what `keygen`, `key show` and `pack` print) with
    /// the TUF key id metadata names.
    func describeKey(_ tufID: String, in keys: [String: TUFKey]) -> String {
        signetKeyID(tufID, in: keys).map { "\($0) (TUF \(tufID.prefix(12)))" } ?? "TUF \(tufID.prefix(16))"
    }
}
