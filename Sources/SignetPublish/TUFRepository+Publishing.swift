#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetTUF
import SignetCrypto
import SignetManifest
import SignetPackage

extension TUFRepository {
    /// The targets a version of the targets role lists, as JSON members.
    private func targetMembers(_ document: TUFDocument) -> [(String, TUFJSON)] {
        document.signed["targets"]?.objectMembers ?? []
    }

    /// The targets document new changes go into: the staged one (its signatures dropped: its
    /// content changes), else the newest published one as the next version.
    func nextTargets(now: Timestamp) throws -> TUFDocument {
        if var staged = try staged("targets") {
            staged.signatures = []
            return staged
        }
        guard let (version, bytes) = try latest("targets") else {
            throw SignetError(.fileNotFound, "the repository has no targets metadata: make it with `signet repo init`", path: metadataDirectory)
        }
        var document = resolvingPublishedPlans(try TUFDocument(bytes: bytes, name: "\(version).targets.json"), version: version)
        document.signatures = []
        let (next, overflow) = version.addingReportingOverflow(1)
        guard !overflow else { throw SignetError(.usage, "the targets role is at the highest version there is") }
        document.set([("version", .number(String(next)))])
        return document
    }

    /// Stages a new targets version listing the Signet package at `package` for `channels`.
    /// Each channel keeps, per package name, every release down to the newest one fully rolled
    /// out (FORMAT.md §7, "Which release a device installs"): while a release rolls out, devices
    /// its wave has not reached install the one before it; older ones leave the channel. Refuses a release whose sequence is not higher than the one a channel names,
    /// unless `allowLower` (a deliberate roll-back of the channel). The package is copied into
    /// `targets/` under its hash-prefixed name; its manifest must be signed by a targets key.
    /// Returns the target as devices will see it; key holders then sign the staged targets.
    ///
    /// `rollout`: the release's rollout plan, signed with it; nil keeps the plan of
    /// the same file listed before, if any (a release added to another channel).
    ///
    /// An encrypted package (FORMAT.md §8) is read through `decryptionKey`, the key of one of its
    /// recipients: its manifest is what the target binds and what must verify.
    public func add(
        package: String, channels: [String], allowLower: Bool = false, rollout: TUFRollout? = nil, decryptionKey: DecryptionKey? = nil,
        now: Timestamp = .now
    ) throws -> TUFPackageTarget {
        guard !channels.isEmpty else { throw SignetError(.usage, "name at least one channel (--channel stable)") }
        for channel in channels where !PackageBinding.isValidChannel(channel) {
            throw SignetError(.usage, "the channel name '\(channel)' is not 1 to 64 letters, digits, '.', '_' or '-'")
        }
        // A root held for the targets keys it names: the package is signed for it.
        let root = try effectiveRoot()
        let described = try PackageBinding.describing(package, decryptionKey: decryptionKey)
        // Devices take the package keys from the role that lists it: a manifest signed by
        // another key would be refused on every device.
        let keys = (root.roles["targets"]?.keyIDs ?? []).compactMap { root.keys[$0]?.publicKey(source: "targets key \($0.prefix(16))") }
        let verification =
            if let decryptionKey, EncryptedPackage.isEncrypted(package) {
                try PackageReader.verify(package, decryptionKey: decryptionKey, policy: TrustPolicy(keys: keys), now: now)
            } else {
                try PackageReader.verify(package, policy: TrustPolicy(keys: keys), now: now)
            }
        guard verification.isValid else {
            throw SignetError(
                .untrustedSigner,
                "'\(package)' does not verify with the repository's targets keys (\(verification.message)): devices take their package keys from the targets role, so sign the package with one of them",
                path: package)
        }
        let fileName = (package as NSString).lastPathComponent
        var document = try nextTargets(now: now)
        var members = targetMembers(document)
        for channel in channels {
            for (path, value) in members {
                guard path != fileName, let other = try? TUFTarget(path: path, json: value), let listed = TUFPackageTarget(other),
                    listed.channels.contains(channel), Manifest.sameName(listed.name, described.name)
                else { continue }
                if described.sequence <= listed.sequence && !allowLower {
                    throw SignetError(
                        .rollback,
                        "channel '\(channel)' names \(listed.name) \(listed.version) (sequence \(listed.sequence), \(listed.target)); \(fileName) has sequence \(described.sequence), which devices would see as \(described.sequence == listed.sequence ? "the same release" : "an older release"). Pack it with a higher --sequence, or give --allow-lower-sequence to roll the channel back on purpose",
                        path: package)
                }
            }
        }
        if let existing = members.first(where: { $0.0 == fileName }), existing.1["hashes"]?["sha256"]?.stringValue != described.sha256 {
            throw SignetError(
                .fileExists,
                "the repository already lists a target named '\(fileName)' with other content: give each release its own file name (app-1.4.3.zip)",
                path: package)
        }
        let previous = members.first(where: { $0.0 == fileName }).flatMap { try? TUFTarget(path: $0.0, json: $0.1) }.flatMap(TUFPackageTarget.init)
        let previousChannels = previous?.channels ?? []
        let allChannels = previousChannels + channels.filter { !previousChannels.contains($0) }
        let entry = TUFPackageTarget(
            target: fileName, name: described.name, version: described.version, sequence: described.sequence,
            manifestSHA256: described.manifestSHA256, channels: allChannels, length: Int64(described.size), sha256: described.sha256,
            rollout: rollout ?? previous?.rollout)
        let json = TUFJSON.object([
            ("length", .number(String(described.size))), ("hashes", .object([("sha256", .string(described.sha256))])), ("custom", entry.custom)
        ])
        if let index = members.firstIndex(where: { $0.0 == fileName }) { members[index].1 = json } else { members.append((fileName, json)) }
        // A deliberate roll-back: the releases at or above the new one leave its channels.
        if allowLower {
            members = Self.dropChannels(channels, from: members, name: described.name) { $0.target != fileName && $0.sequence >= described.sequence }
        }
        members = Self.pruneChannels(channels, of: described.name, in: members, at: now)
        try copyTarget(package, as: "\(described.sha256).\(fileName)")
        document.set([("targets", .object(members)), ("expires", .string(Self.expiry(now, lifetimes.targets)))])
        try writeStaged("targets", document)
        return entry
    }

    /// `members` with `channels` taken off the releases named `name` that `drop` selects.
    static func dropChannels(
        _ channels: [String], from members: [(String, TUFJSON)], name: String,
        where drop: (TUFPackageTarget) -> Bool
    ) -> [(String, TUFJSON)] {
        members.map { path, value in
            guard let target = try? TUFTarget(path: path, json: value), let listed = TUFPackageTarget(target),
                Manifest.sameName(listed.name, name), drop(listed)
            else { return (path, value) }
            let kept = listed.channels.filter { !channels.contains($0) }
            guard kept != listed.channels, case .object(var fields) = value,
                let index = fields.firstIndex(where: { $0.0 == "custom" })
            else { return (path, value) }
            fields[index].1 = listed.withChannels(kept).custom
            return (path, .object(fields))
        }
    }

    /// `members` where each of `channels` keeps, of the releases named `name`, those
    /// ``/SignetTUF/TUFChannel/kept(_:at:)`` keeps at `now`; the others leave that channel.
    static func pruneChannels(_ channels: [String], of name: String, in members: [(String, TUFJSON)], at now: Timestamp) -> [(String, TUFJSON)] {
        let listed = members.compactMap { path, value in (try? TUFTarget(path: path, json: value)).flatMap(TUFPackageTarget.init) }
            .filter { Manifest.sameName($0.name, name) }
        var result = members
        for channel in channels {
            let kept = Set(TUFChannel.kept(listed.filter { $0.channels.contains(channel) }, at: now).map(\.target))
            result = dropChannels([channel], from: result, name: name) { !kept.contains($0.target) }
        }
        return result
    }

    /// What `changeRollout` does to a listed release's plan.
    public enum RolloutChange: Sendable {
        /// Stop widening (the share open now stays open).
        case pause
        /// Go on from where it was paused.
        case resume
        /// Offer it to no device that does not hold it.
        case halt
        /// A new plan (an emergency `now`, or a slower one), from its own start.
        case replace(TUFRollout)
    }

    /// Stages a new targets version in which the release listed as `target` (its file name, or
    /// a package name that one listed target has) has its rollout plan changed, without a new
    /// package. Returns the release as devices will see it; key holders then sign.
    public func changeRollout(of target: String, _ change: RolloutChange, now: Timestamp = .now) throws -> TUFPackageTarget {
        var document = try nextTargets(now: now)
        var members = targetMembers(document)
        let listed = members.compactMap { path, value in (try? TUFTarget(path: path, json: value)).flatMap(TUFPackageTarget.init) }
        var matches = listed.filter { $0.target == target }
        // By package name: the newest release a channel lists (older ones it keeps listing while
        // this one rolls out are named by their file).
        if matches.isEmpty, let newest = listed.filter({ Manifest.sameName($0.name, target) && !$0.channels.isEmpty }).max(by: { $0.sequence < $1.sequence }) {
            matches = listed.filter { $0.target == newest.target }
        }
        guard matches.count == 1, let release = matches.first else {
            let names = listed.map(\.target).sorted().joined(separator: ", ")
            throw SignetError(
                matches.isEmpty ? .targetNotFound : .usage,
                matches.isEmpty
                    ? "the targets metadata lists no release '\(target)' (give a target file name or a package name; it lists: \(names.isEmpty ? "nothing" : names))"
                    : "'\(target)' names \(matches.count) listed releases (\(matches.map(\.target).joined(separator: ", "))): give the target file name",
                path: metadataDirectory)
        }
        let plan: TUFRollout
        switch change {
        case .replace(let new): plan = new
        case .pause, .resume, .halt:
            guard let current = release.rollout else {
                throw SignetError(.usage, "\(release.target) has no rollout plan (every device installs it at once); give it one with --plan PLAN")
            }
            switch change {
            case .pause:
                guard current.state == .active else { throw SignetError(.usage, "\(release.target)'s rollout is \(current.state.rawValue), not active") }
                plan = current.paused(at: now)
            case .resume:
                guard current.state == .paused else {
                    throw SignetError(
                        .usage,
                        "\(release.target)'s rollout is \(current.state.rawValue), not paused"
                            + (current.state == .halted
                                ? ": a halted release is reopened with a new plan (--plan PLAN, e.g. --plan now or the plan it had: \(current.planText))" : ""))
                }
                plan = current.resumed(at: now)
            default:
                guard current.state != .halted else { throw SignetError(.usage, "\(release.target)'s rollout is halted already") }
                plan = current.halted
            }
        }
        let updated = TUFPackageTarget(
            target: release.target, name: release.name, version: release.version, sequence: release.sequence,
            manifestSHA256: release.manifestSHA256, channels: release.channels, length: release.length,
            sha256: release.sha256, rollout: plan)
        guard let index = members.firstIndex(where: { $0.0 == release.target }), case .object(var fields) = members[index].1,
            let custom = fields.firstIndex(where: { $0.0 == "custom" })
        else {
            throw SignetError(.malformedInput, "the target '\(release.target)' has no custom data", path: metadataDirectory)
        }
        fields[custom].1 = updated.custom
        members[index].1 = .object(fields)
        // A plan that now opens every bucket (`now`) lets the older releases go.
        members = Self.pruneChannels(release.channels, of: release.name, in: members, at: now)
        document.set([("targets", .object(members)), ("expires", .string(Self.expiry(now, lifetimes.targets)))])
        try writeStaged("targets", document)
        return updated
    }

    /// Copies a package into `staging/targets/NAME` (atomically; an existing one, there or
    /// published in `targets/`, is the same content): it reaches `targets/` only with the
    /// targets version that lists it (``publishTargetFiles(of:)``), so nothing unsigned is
    /// served (FORMAT.md §7). The folder is 0700: a web server serving the repository
    /// folder whole as another user cannot read it either.
    private func copyTarget(_ source: String, as name: String) throws {
        if FileManager.default.fileExists(atPath: "\(targetsDirectory)/\(name)") { return }
        let folder = stagedTargetsDirectory
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            throw SignetError.posix(SystemCallFailure("mkdir", code: errno), "cannot make the folder of staged packages", path: folder)
        }
        let destination = "\(folder)/\(name)"
        if FileManager.default.fileExists(atPath: destination) { return }
        let temporary = AtomicFile.temporaryPath(beside: destination, tag: "copy")
        let token = TemporaryFiles.register(temporary)
        defer { TemporaryFiles.unregister(token) }
        do {
            try FileManager.default.copyItem(atPath: source, toPath: temporary)
            chmod(temporary, 0o644)
            let copied = try InputFile.open(temporary, what: "target", followSymlinks: false)
            fsync(copied.descriptor.rawValue)
            guard rename(temporary, destination) == 0 else {
                throw SignetError.posix(SystemCallFailure("rename", code: errno), "cannot stage the package", path: destination)
            }
        } catch {
            unlink(temporary)
            throw error
        }
        AtomicFile.syncDirectory(folder)
    }

    /// Moves the packages `document` (a targets version about to be published) lists from
    /// `staging/targets/` into `targets/`, each made durable there before the metadata that
    /// lists it is written.
    func publishTargetFiles(of document: TUFDocument) throws {
        var moved = false
        for (target, value) in document.signed["targets"]?.objectMembers ?? [] {
            guard let sha256 = value["hashes"]?["sha256"]?.stringValue, !target.contains("/") else { continue }
            let name = "\(sha256).\(target)"
            let staged = "\(stagedTargetsDirectory)/\(name)"
            guard FileManager.default.fileExists(atPath: staged) else { continue }
            if FileManager.default.fileExists(atPath: "\(targetsDirectory)/\(name)") {
                unlink(staged)
                continue
            }
            guard rename(staged, "\(targetsDirectory)/\(name)") == 0 else {
                throw SignetError.posix(SystemCallFailure("rename", code: errno), "cannot publish the package", path: staged)
            }
            moved = true
        }
        if moved {
            AtomicFile.syncDirectory(targetsDirectory)
            AtomicFile.syncDirectory(stagedTargetsDirectory)
        }
    }

    /// Where the package file `name` (`SHA256.TARGET`) is: published, else staged.
    func targetFile(_ name: String) -> String {
        let published = "\(targetsDirectory)/\(name)"
        let staged = "\(stagedTargetsDirectory)/\(name)"
        return !FileManager.default.fileExists(atPath: published) && FileManager.default.fileExists(atPath: staged) ? staged : published
    }

    // MARK: Refresh (online keys: a cron job)

    /// What a refresh published.
    public struct RefreshOutcome: Sendable {
        /// The snapshot version now published, and whether this refresh made it.
        public let snapshotVersion: Int64
        public let newSnapshot: Bool
        public let timestampVersion: Int64
        public let timestampExpires: Timestamp
        public let targetsVersion: Int64
        /// The held root this refresh published (nil: none).
        public var publishedRoot: Int64? = nil
        /// Why a signed root stays held (nil: none is).
        public var held: String? = nil
        /// Root or targets, which a refresh cannot sign, expired or expiring within the
        /// warning window: a cron job must fail loudly, not keep serving a repository that
        /// strands devices (kinds `expired` and `expiring`).
        public var expiring: [Status.Alert] = []
    }

    /// Publishes a new snapshot when the targets version to name is not the one the snapshot
    /// names, the snapshot is past half its lifetime, or the root changed; and always a new
    /// timestamp: the job a cron timer runs with the online keys only. The keys must be the
    /// root's snapshot and timestamp keys (enough of them to meet each threshold).
    ///
    /// A signed root held in staging (one that changes the keys of targets, snapshot or
    /// timestamp) is published here, once the targets version it accepts is published and the
    /// keys given are the ones it names: snapshot first, then the root, then the timestamp, so
    /// a device reads a root together with metadata it accepts. Until then the refresh goes on
    /// under the published root, and ``RefreshOutcome/held`` says what the root waits for.
    public func refresh(
        snapshotKeys: [PrivateKey], timestampKeys: [PrivateKey], now: Timestamp = .now,
        warnWithin: Int64 = 14 * 86_400
    ) throws -> RefreshOutcome {
        let published = try publishedRoot()
        guard try latest("targets") != nil else {
            throw SignetError(.fileNotFound, "no targets metadata is published yet: its key holders sign staging/targets.json first", path: metadataDirectory)
        }
        let lifetimes = self.lifetimes
        var snapshotVersion: Int64 = 0
        var current: TUFSnapshot? = nil
        var snapshotBytes: [UInt8]? = nil
        if let (version, bytes) = try latest("snapshot") {
            snapshotVersion = version
            snapshotBytes = bytes
            current = try TUFSnapshot(TUFMetadata(bytes: bytes, expectedType: "snapshot", name: "\(version).snapshot.json"))
        }
        let namedVersion = current?.meta["targets.json"]?.version ?? 1
        // The root to publish under: a held one when everything it needs is there.
        var root = published
        var rootDocument: TUFDocument? = nil
        var held: String? = nil
        var other: TUFRoot? = nil
        if let pending = try completeStagedRoot() {
            let keysMeet = try meets(pending.root, "snapshot", snapshotKeys) && meets(pending.root, "timestamp", timestampKeys)
            let targetsReady = try newestTargets(acceptedBy: pending.root, atLeast: namedVersion) != nil
            if keysMeet && targetsReady {
                (root, rootDocument, other) = (pending.root, pending.document, published)
            } else {
                other = pending.root
                var waits = targetsReady ? [] : ["targets"]
                if try !meets(pending.root, "snapshot", snapshotKeys) { waits.append("snapshot") }
                if try !meets(pending.root, "timestamp", timestampKeys) { waits.append("timestamp") }
                held = heldMessage(version: pending.document.version, failing: waits)
            }
        }
        guard let (targetsVersion, targetsBytes) = try newestTargets(acceptedBy: root, atLeast: namedVersion) else {
            throw SignetError(
                .thresholdNotMet,
                "no published targets version from v\(namedVersion) on meets the targets threshold of root v\(root.metadata.version): devices would refuse it. Stage it again with `signet repo renew \(path) --role targets` and have the targets key holders sign it",
                path: metadataDirectory)
        }
        // A repository that keeps a log names no targets version with a release the log's
        // published checkpoint does not hold: devices would refuse it (not logged).
        let unlogged = try unloggedReleases(of: try TUFDocument(bytes: targetsBytes, name: "\(targetsVersion).targets.json"))
        guard unlogged.isEmpty else {
            throw SignetError(
                .notLogged,
                "targets v\(targetsVersion) lists \(unlogged.joined(separator: ", ")), which the repository's log does not hold: devices would refuse \(unlogged.count == 1 ? "it" : "them"). Append \(unlogged.count == 1 ? "it" : "them") with `signet log append \(path) --key LOG.pem` first",
                path: metadataDirectory)
        }
        var newSnapshot = true
        if let current {
            let halfLife = Timestamp(secondsSinceEpoch: current.metadata.expires.secondsSinceEpoch &- lifetimes.snapshot / 2)
            let named = current.meta["targets.json"]
            let targetsHash = try Digest.compute(targetsBytes, algorithm: .sha256).hex
            // Another file under the same version (replaced by hand) is a change too; so is a
            // snapshot the root no longer accepts (its keys rotated).
            newSnapshot =
                named?.version != targetsVersion || named?.length.map { $0 != Int64(targetsBytes.count) } == true
                || named?.hashes?["sha256"].map { $0 != targetsHash } == true || now >= halfLife || rootDocument != nil
                || !accepts(root, "snapshot", file: "\(snapshotVersion).snapshot.json")
        }
        if newSnapshot {
            let (next, overflow) = snapshotVersion.addingReportingOverflow(1)
            guard !overflow else { throw SignetError(.usage, "the snapshot role is at the highest version there is") }
            // When devices could first see this targets version: kept from the snapshot that
            // first named it (rollout plans counting from their publication count from it).
            let named = current?.meta["targets.json"]
            let published = named?.version == targetsVersion ? named?.published ?? now : now
            let meta = TUFJSON.object([
                (
                    "targets.json",
                    .object([
                        ("version", .number(String(targetsVersion))), ("length", .number(String(targetsBytes.count))),
                        ("hashes", .object([("sha256", .string(try Digest.compute(targetsBytes, algorithm: .sha256).hex))])),
                        (TUFMetaFile.publishedField, .string(published.rfc3339))
                    ])
                )
            ])
            var document = TUFDocument(
                signed: .object([
                    ("_type", .string("snapshot")), ("spec_version", .string(Self.specVersion)), ("version", .number(String(next))),
                    ("expires", .string(Self.expiry(now, lifetimes.snapshot))), ("meta", meta)
                ]))
            try signOnline(&document, role: "snapshot", keys: snapshotKeys, root: root, other: other, held: held)
            try publish("\(next).snapshot.json", document.bytes)
            snapshotVersion = next
            snapshotBytes = document.bytes
        }
        var timestampVersion: Int64 = 0
        if let bytes = try? readSmallFile(metadataDirectory + "/timestamp.json", what: "timestamp", limit: 1 << 20),
            let current = try? TUFMetadata(bytes: bytes, expectedType: "timestamp", name: "timestamp.json")
        {
            timestampVersion = current.version
        }
        let (nextTimestamp, overflow) = timestampVersion.addingReportingOverflow(1)
        guard !overflow else { throw SignetError(.usage, "the timestamp role is at the highest version there is") }
        let snapshot = snapshotBytes ?? []
        let expires = Self.expiry(now, lifetimes.timestamp)
        var timestamp = TUFDocument(
            signed: .object([
                ("_type", .string("timestamp")), ("spec_version", .string(Self.specVersion)), ("version", .number(String(nextTimestamp))),
                ("expires", .string(expires)),
                (
                    "meta",
                    .object([
                        (
                            "snapshot.json",
                            .object([
                                ("version", .number(String(snapshotVersion))), ("length", .number(String(snapshot.count))),
                                ("hashes", .object([("sha256", .string(try Digest.compute(snapshot, algorithm: .sha256).hex))]))
                            ])
                        )
                    ])
                )
            ]))
        try signOnline(&timestamp, role: "timestamp", keys: timestampKeys, root: root, other: other, held: held)
        if let rootDocument {
            try publish("\(rootDocument.version).root.json", rootDocument.bytes)
            unlink("\(stagingDirectory)/root.json")
        }
        try publish("timestamp.json", timestamp.bytes, replace: true)
        var outcome = RefreshOutcome(
            snapshotVersion: snapshotVersion, newSnapshot: newSnapshot, timestampVersion: nextTimestamp,
            timestampExpires: Timestamp(rfc3339: expires) ?? now, targetsVersion: targetsVersion)
        outcome.publishedRoot = rootDocument?.version
        outcome.held = held
        outcome.expiring = try status(now: now, warnWithin: warnWithin).alerts.filter {
            ($0.role == "root" || $0.role == "targets") && ($0.kind == "expired" || $0.kind == "expiring")
        }
        return outcome
    }

    /// Whether `keys` meet `role`'s threshold in `root` (keys it does not name do not count).
    private func meets(_ root: TUFRoot, _ role: String, _ keys: [PrivateKey]) throws -> Bool {
        guard let delegated = root.roles[role] else { return false }
        let ids = Set(try keys.map { try TUFPublicKeyEntry($0.publicKey).keyID })
        return ids.intersection(delegated.keyIDs).count >= delegated.threshold
    }

    private func signOnline(_ document: inout TUFDocument, role: String, keys: [PrivateKey], root: TUFRoot, other: TUFRoot?, held: String?) throws {
        guard let delegated = root.roles[role] else { return }
        for key in keys {
            let id = try TUFPublicKeyEntry(key.publicKey).keyID
            guard delegated.keyIDs.contains(id) else {
                // While a root is held, the keys of the root before or after it may be given too.
                if other?.roles[role]?.keyIDs.contains(id) == true { continue }
                throw SignetError(
                    .untrustedSigner,
                    "key \(key.publicKey.keyID.short) (TUF \(id.prefix(12))) is not a \(role) key of root version \(root.metadata.version)\(held.map { "; \($0)" } ?? "")",
                    path: nil)
            }
            try document.sign(with: key, keyID: id)
        }
        let metadata = try document.metadata(as: role, name: role)
        let valid = count(metadata, keys: root.keys, role: delegated)
        guard valid >= delegated.threshold else {
            throw SignetError(
                .thresholdNotMet, "the \(role) role's threshold is \(delegated.threshold); \(valid) of its keys signed: give more --\(role)-key", path: nil)
        }
    }
}
