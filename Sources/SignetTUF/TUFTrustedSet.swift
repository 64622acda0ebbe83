import SignetCore
/// The metadata a client trusts during one refresh, and the rules of the TUF specification's
/// detailed client workflow (§5.3–§5.6) for each new file: signatures by the delegating role's
/// threshold, versions that never go back, expiry against one reference time fixed when the
/// refresh began, lengths and hashes that the role above binds. Fast-forward recovery falls out
/// of the order: a stored timestamp or snapshot that the new root's keys do not verify is not
/// trusted, so it cannot hold back the repository's new versions.
package struct TUFTrustedSet {
    private(set) var root: TUFRoot
    private(set) var timestamp: TUFTimestamp?
    private(set) var snapshot: TUFSnapshot?
    /// Targets roles loaded in this refresh, by role name and the delegator they were verified against.
    private var targets: [String: TUFTargets] = [:]
    /// The reference time: "now" for every expiry check of this refresh.
    let now: Timestamp

    /// Trusts `bytes` as the root: it must be signed by its own root role's threshold (§5.2).
    /// Expiry is not checked here (an expired root may still be rotated away).
    package init(root bytes: [UInt8], now: Timestamp) throws {
        let metadata = try TUFMetadata(bytes: bytes, expectedType: "root", name: "the trusted root.json")
        let root = try TUFRoot(metadata)
        try root.verify(metadata, as: "root", name: "the trusted root.json")
        self.root = root
        self.now = now
    }

    /// §5.3.4–5.3.8: the next root version, signed by the trusted root's root threshold and by
    /// its own, exactly one version above.
    mutating func updateRoot(_ bytes: [UInt8], name: String) throws {
        precondition(timestamp == nil, "root is updated before timestamp")
        let metadata = try TUFMetadata(bytes: bytes, expectedType: "root", name: name)
        let new = try TUFRoot(metadata)
        try root.verify(metadata, as: "root", name: "\(name) (by the keys of root version \(root.metadata.version))")
        let expected = root.metadata.version + 1
        guard metadata.version == expected else {
            throw SignetError(.metadataMismatch, "\(name) has version \(metadata.version) where version \(expected) was asked for", path: name)
        }
        try new.verify(metadata, as: "root", name: "\(name) (by its own keys)")
        root = new
    }

    /// §5.3.10: the final root must not be expired.
    func checkFinalRoot() throws {
        if root.metadata.isExpired(at: now) {
            throw SignetError(
                .expiredMetadata,
                "the newest root (version \(root.metadata.version)) expired at \(root.metadata.expires): the repository's root keys must sign a new root (the publisher: `signet repo renew --role root`); nothing was updated; \(Timestamp.clockReading)",
                path: "root.json")
        }
    }

    /// §5.4: a timestamp signed by the root's timestamp threshold, not older than the trusted
    /// one (nor naming an older snapshot). Returns false when it has the trusted one's version
    /// (the trusted one is kept). The new one is trusted before its expiry is checked, so that
    /// an expired stored timestamp still guards against rollback of the one downloaded next.
    mutating func updateTimestamp(_ bytes: [UInt8], name: String) throws -> Bool {
        precondition(snapshot == nil, "timestamp is updated before snapshot")
        try checkFinalRoot()
        let metadata = try TUFMetadata(bytes: bytes, expectedType: "timestamp", name: name)
        let new = try TUFTimestamp(metadata)
        try root.verify(metadata, as: "timestamp", name: name)
        if let old = timestamp {
            guard metadata.version >= old.metadata.version else {
                throw SignetError(
                    .rollback,
                    "\(name) has version \(metadata.version), lower than version \(old.metadata.version) already trusted: an older timestamp served again (a rollback). If this persists, the server or a mirror serves stale metadata: check what it publishes (`signet repo status` on the publisher). If the repository was made anew on purpose, move the device to it with `signet tuf init --force` and its new root",
                    path: name)
            }
            if metadata.version == old.metadata.version { return false }
            guard new.snapshot.version >= old.snapshot.version else {
                throw SignetError(
                    .rollback,
                    "\(name) names snapshot version \(new.snapshot.version), lower than version \(old.snapshot.version) already trusted (a rollback). If this persists, the server or a mirror serves stale metadata: check what it publishes (`signet repo status` on the publisher). If the repository was made anew on purpose, move the device to it with `signet tuf init --force` and its new root",
                    path: name)
            }
        }
        timestamp = new
        try checkFinalTimestamp()
        return true
    }

    func checkFinalTimestamp() throws {
        guard let timestamp else { return }
        if timestamp.metadata.isExpired(at: now) {
            throw SignetError(
                .expiredMetadata,
                "timestamp.json (version \(timestamp.metadata.version)) expired at \(timestamp.metadata.expires): the publisher must run `signet repo refresh` (its hourly job has stopped, or its timestamp key no longer signs), or the repository is holding back updates (a freeze attack); \(Timestamp.clockReading)",
                path: "timestamp.json")
        }
    }

    /// §5.5: a snapshot bound by the timestamp (length, hashes), signed by the root's snapshot
    /// threshold, dropping no targets file and lowering no version of the trusted one.
    /// `stored` marks the client's own copy (already checked against its timestamp once).
    mutating func updateSnapshot(_ bytes: [UInt8], name: String, stored: Bool) throws {
        guard let timestamp else { preconditionFailure("snapshot is updated after timestamp") }
        precondition(targets.isEmpty, "snapshot is updated before targets")
        try checkFinalTimestamp()
        if !stored {
            try tufCheck(bytes, length: timestamp.snapshot.length, hashes: timestamp.snapshot.hashes, name: name)
        }
        let metadata = try TUFMetadata(bytes: bytes, expectedType: "snapshot", name: name)
        let new = try TUFSnapshot(metadata)
        try root.verify(metadata, as: "snapshot", name: name)
        if let old = snapshot {
            for (file, info) in old.meta {
                guard let now = new.meta[file] else {
                    throw SignetError(
                        .rollback,
                        "\(name) no longer lists '\(file)', which the trusted snapshot lists: refused. If this persists, the server or a mirror serves stale metadata: check what it publishes (`signet repo status` on the publisher). If the repository was made anew on purpose, move the device to it with `signet tuf init --force` and its new root",
                        path: name)
                }
                guard now.version >= info.version else {
                    throw SignetError(
                        .rollback,
                        "\(name) lists '\(file)' at version \(now.version), lower than version \(info.version) already trusted (a rollback). If this persists, the server or a mirror serves stale metadata: check what it publishes (`signet repo status` on the publisher). If the repository was made anew on purpose, move the device to it with `signet tuf init --force` and its new root",
                        path: name)
                }
            }
        }
        snapshot = new
        try checkFinalSnapshot()
    }

    func checkFinalSnapshot() throws {
        guard let snapshot, let timestamp else { return }
        if snapshot.metadata.isExpired(at: now) {
            throw SignetError(
                .expiredMetadata,
                "snapshot.json (version \(snapshot.metadata.version)) expired at \(snapshot.metadata.expires): the publisher must run `signet repo refresh`, or the repository is holding back updates (a freeze attack); \(Timestamp.clockReading)",
                path: "snapshot.json")
        }
        guard snapshot.metadata.version == timestamp.snapshot.version else {
            throw SignetError(
                .metadataMismatch, "snapshot.json has version \(snapshot.metadata.version); the timestamp names version \(timestamp.snapshot.version)",
                path: "snapshot.json")
        }
    }

    /// The targets role `role` as loaded through `delegator` in this refresh, if it was.
    func loadedTargets(_ role: String, delegator: String) -> TUFTargets? {
        targets["\(delegator)\u{0}\(role)"]
    }

    /// The delegator named `name` (`root` or a targets role loaded in this refresh, by the
    /// delegator it was itself loaded through).
    private func delegator(_ name: String, above: String?) -> (any TUFDelegator)? {
        if name == "root" { return root }
        return above.flatMap { loadedTargets(name, delegator: $0) }
    }

    /// §5.6: a targets role bound by the snapshot (version, and length and hashes when given),
    /// signed by its delegator's threshold for it, not expired.
    mutating func updateTargets(_ bytes: [UInt8], role: String, delegator: String, delegatorParent: String?, name: String) throws -> TUFTargets {
        guard let snapshot else { preconditionFailure("targets are updated after snapshot") }
        try checkFinalSnapshot()
        guard let parent = self.delegator(delegator, above: delegatorParent) else { preconditionFailure("a delegator is loaded before its roles") }
        let file = "\(role).json"
        guard let info = snapshot.meta[file] else {
            throw SignetError(.metadataMismatch, "the trusted snapshot does not list '\(file)'", path: name)
        }
        try tufCheck(bytes, length: info.length, hashes: info.hashes, name: name)
        let metadata = try TUFMetadata(bytes: bytes, expectedType: "targets", name: name)
        let new = try TUFTargets(metadata)
        try parent.verify(metadata, as: role, name: name)
        guard metadata.version == info.version else {
            throw SignetError(.metadataMismatch, "\(name) has version \(metadata.version); the snapshot names version \(info.version)", path: name)
        }
        if metadata.isExpired(at: now) {
            throw SignetError(
                .expiredMetadata,
                "\(name) (version \(metadata.version)) expired at \(metadata.expires): its key holders must sign it again (the publisher: `signet repo renew --role targets`, or a new release); \(Timestamp.clockReading)",
                path: name)
        }
        targets["\(delegator)\u{0}\(role)"] = new
        return new
    }
}
