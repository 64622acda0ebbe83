import Foundation
public import SystemPackage
import SignetCore
import SignetTUF
import SignetCrypto
import SignetManifest
import SignetPackage
import SignetInstall

/// Options for ``TUFUpdater``.
public struct TUFUpdateOptions: Sendable {
    /// The repository's metadata URL and the device's metadata folder.
    public var client: TUFClientOptions
    /// The channel this device follows.
    public var channel: String
    /// The package name to follow; nil: the one DIR holds, or the only one the channel lists.
    public var package: String? = nil
    /// Where the repository's targets are; nil: `targets/` beside the metadata URL.
    public var targetsURL: String? = nil
    /// How the package is installed (its binding to the target is set by the updater).
    public var install = InstallOptions()
    /// Only find out whether an update is available: metadata is refreshed, nothing installed.
    public var checkOnly = false
    /// The file whose content identifies this device for rollouts: its bucket in a
    /// release's plan is a hash of it. The id is never sent or printed.
    public var deviceIDFile = "/etc/machine-id"
    /// Install a release whose rollout has not reached this device yet (a technician's "now").
    public var ignoreRollout = false
    /// Install nothing new; report what is available.
    public var hold = false
    /// Install only a release this lock allows (nil: any).
    public var versionLock: VersionLock? = nil
    /// Told the release this run installs (or repairs) once it is chosen and confirmed, before
    /// anything of it is fetched: for an agent's events.
    public var onRelease: (@Sendable (TUFPackageTarget) -> Void)? = nil
    /// The transparency policy a release must be logged under (FORMAT.md §10); nil: the one
    /// the trusted root carries, if any.
    public var transparencyPolicy: TransparencyPolicy? = nil

    public init(client: TUFClientOptions, channel: String) {
        self.client = client
        self.channel = channel
    }
}

/// A device's version lock (config `version-lock`): a sequence, or a version prefix that ends
/// on a component boundary (`1.4` allows 1.4 and 1.4.2, not 1.40).
public enum VersionLock: Sendable, Equatable, CustomStringConvertible {
    case sequence(UInt64)
    case versionPrefix(String)

    /// `42` is a sequence; anything else (`1.4`, `v2`) a version prefix.
    public init(_ text: String) throws {
        if let sequence = UInt64(text), text.allSatisfy({ $0.isASCII && $0.isNumber }) {
            self = .sequence(sequence)
        } else {
            guard !text.isEmpty, text.count <= 64, !text.contains(where: { $0.isWhitespace }) else {
                throw SignetError(.usage, "--version-lock takes a sequence (42) or a version prefix (1.4), not '\(text)'")
            }
            self = .versionPrefix(text)
        }
    }

    public func allows(version: String, sequence: UInt64) -> Bool {
        switch self {
        case .sequence(let locked): return sequence == locked
        case .versionPrefix(let prefix):
            guard version.hasPrefix(prefix) else { return false }
            let rest = version.dropFirst(prefix.count)
            return rest.isEmpty || prefix.last.map { ".-_+".contains($0) } == true || rest.first.map { ".-_+".contains($0) } == true
        }
    }

    public var description: String {
        switch self {
        case .sequence(let sequence): return "sequence \(sequence)"
        case .versionPrefix(let prefix): return "version \(prefix)"
        }
    }
}

/// Where a release's rollout stands for this device.
public struct RolloutStatus: Sendable, Equatable {
    /// This device's bucket for the release (0..<10,000); nil when the id was not needed (a
    /// plan open to every device, or halted) and could not be read.
    public let bucket: Int?
    /// The buckets open now (100 per percent).
    public let openBuckets: Int
    public let state: TUFRollout.State
    /// True when the plan covers this device now.
    public let eligible: Bool
    /// When it will (nil: it does, or the plan is paused or halted, or never reaches it).
    public let eligibleAt: Timestamp?
    /// The signed plan.
    public let plan: TUFRollout
}

/// What ``TUFUpdater`` found and did.
public struct TUFUpdateReport: Sendable {
    /// The trusted metadata after the refresh.
    public let refresh: TUFRefreshReport
    /// The release the channel names.
    public let release: TUFPackageTarget
    /// The role that lists it (`targets`, or a delegated role), whose keys signed the package.
    public let role: String
    /// Where the package is.
    public let packageURL: String
    /// What DIR held before (nil: no installed package).
    public let installed: InstalledRelease?
    /// True when the channel names a newer release than DIR holds.
    public let updateAvailable: Bool
    /// True when the channel names an older release than DIR holds (nothing is installed:
    /// a repository cannot push an older release; the publisher rolls a channel back by
    /// publishing the old content with a higher sequence).
    public let channelIsOlder: Bool
    /// The installation, when one was made.
    public let install: InstallReport?
    /// Set when the channel's release is one this destination refused as bad (its health
    /// check failed, or it was rolled back): nothing is installed, and it is not an error —
    /// the device keeps its release until a higher sequence is published.
    public var refused: RefusedRelease? = nil
    /// The channel's release's rollout, for this device (nil: it has no plan).
    public var rollout: RolloutStatus? = nil
    /// Why a newer release was not installed although the trust checks passed (nil: it was, or
    /// there was none): the rollout has not reached this device, the release is halted, the
    /// device is held or its version lock excludes it. Not an error.
    public var deferred: String? = nil
    /// Which listed release this run chose for the device, and why (FORMAT §7, "Which release a
    /// device installs"); nil only where no choice was made (a held-back bad release).
    public var choice: TUFReleaseChoice? = nil
    /// Where the installed release is in the transparency log: its entry and the checkpoint's
    /// size (nil: no policy asks for a log).
    public var logged: (entry: UInt64, checkpointSize: UInt64)? = nil
}

/// A release a destination refused as bad: the highest refused sequence, why, and when.
public struct RefusedRelease: Sendable, Equatable {
    public let sequence: UInt64
    public let reason: String
    /// RFC 3339.
    public let at: String
}

/// Keeps a destination on what its channel names in a TUF repository (FORMAT.md §7): refreshes
/// the trusted metadata (root chain, timestamp, snapshot, targets), picks the release the
/// channel names, and installs it when newer — its package keys the keys of the role that lists
/// it, its manifest bound to the SHA-256 the target states (checked before any resource is
/// fetched), the whole file to its length and hashes when it is downloaded whole.
public enum TUFUpdater {
    /// Updates `destination`. Throws ``/SignetCore/SignetError``: the TUF client's codes, `.targetNotFound`
    /// (the channel lists no package), and whatever the installation throws. DIR is unchanged
    /// on any failure.
    public static func update(to destination: String, options: TUFUpdateOptions) throws -> TUFUpdateReport {
        try update(to: destination, options: options, cancelled: nil)
    }

    /// The same on a thread of its own; cancelling the task stops the transfer in progress.
    public static func updateAsync(to destination: String, options: TUFUpdateOptions) async throws -> TUFUpdateReport {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async { try update(to: destination, options: options, cancelled: cancelled) }
        } onCancel: {
            cancelled.set()
        }
    }

    /// The old name of ``updateAsync(to:options:)-(String,_)``.
    @available(
        *, deprecated, renamed: "updateAsync(to:options:)", message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func update(to destination: String, options: TUFUpdateOptions) async throws -> TUFUpdateReport {
        try await updateAsync(to: destination, options: options)
    }

    static func update(to destination: String, options: TUFUpdateOptions, cancelled: CancellationFlag?) throws -> TUFUpdateReport {
        guard PackageBinding.isValidChannel(options.channel) else {
            throw SignetError(.usage, "the channel name '\(options.channel)' is not 1 to 64 letters, digits, '.', '_' or '-'")
        }
        var clientOptions = options.client
        clientOptions.now = clientOptions.now ?? options.install.now
        // One bound on waiting for another process, whatever it holds: the metadata folder's
        // lock as well as DIR's (`--wait`; the metadata lock waited 10 s whatever it said).
        clientOptions.download.wait = min(clientOptions.download.wait, options.install.wait)
        // A check by a user who cannot write the metadata folder (a monitor) verifies without
        // keeping: no lock, nothing written (FORMAT §7).
        if options.checkOnly, access(clientOptions.metadataDirectory, W_OK) != 0 { clientOptions.readOnly = true }
        options.install.phase?(.refresh)
        let client = try TUFClient(options: clientOptions, cancelled: cancelled)
        let refresh = try client.refresh()
        options.install.phase?(.plan)
        // DIR's lock, taken once: what DIR holds and its records are read under it, the
        // decision is made from them, and the release is installed under the same lock. A
        // check changes nothing and takes none (a monitor may not write beside DIR).
        var destination = destination
        var lock: DestinationLock? = nil
        if !options.checkOnly {
            let locked = try Installer.lockDestination(destination, wait: options.install.wait)
            (destination, lock) = (locked.destination, locked.lock)
        }
        defer { lock?.release() }
        let installed = try InstalledRelease.inspect(destination, force: options.install.force)
        let records = try ReleaseRecord.read(for: destination)
        let wanted = options.package ?? installed?.name
        var candidates: [TUFPackageListing] = []
        let listings = try client.packageListings()
        // Each package name only from the role it belongs to (the name rule, FORMAT §7).
        for listing in listings where listing.release.channels.contains(options.channel) {
            if let wanted, !Manifest.sameName(wanted, listing.release.name) { continue }
            candidates.append(listing)
        }
        let names = Set(candidates.map(\.release.name))
        guard names.count <= 1 else {
            throw SignetError(
                .usage,
                "channel '\(options.channel)' lists several packages (\(names.sorted().joined(separator: ", "))): name the one this device runs with --package")
        }
        guard !candidates.isEmpty else {
            let channels = Set(listings.filter { wanted == nil || Manifest.sameName(wanted, $0.release.name) }.flatMap(\.release.channels)).sorted()
            throw SignetError(
                .targetNotFound,
                "the repository lists no \(wanted.map { "package '\($0)'" } ?? "package") for channel '\(options.channel)'; \(channels.isEmpty ? "it lists \(wanted == nil ? "no package" : "none of that name") on any channel" : "its channels\(wanted.map { " for '\($0)'" } ?? ""): \(channels.joined(separator: ", "))")",
                path: options.client.metadataURL)
        }
        // Which listed release reaches this device, and what this run does with it: decided
        // once (FORMAT §7, "Which release a device installs").
        guard
            let decision = try UpdateDecision.decide(
                releases: candidates.map(\.release), installed: installed, records: records,
                options: UpdateDecision.Options(options), at: clientOptions.now ?? .now,
                deviceID: { try deviceID(options.deviceIDFile) })
        else {
            throw SignetError(.targetNotFound, "the channel '\(options.channel)' lists no release", path: options.client.metadataURL)
        }
        let release = decision.release
        guard let listing = candidates.first(where: { $0.release.target == release.target }) else {
            throw SignetError(.targetNotFound, "the channel's release \(release.target) is not listed", path: options.client.metadataURL)
        }
        // `targets/` beside the metadata folder: on a server, or in a copy on local media.
        let localMetadata = TUFLocalFolder.path(of: clientOptions.metadataURL)
        let base =
            options.targetsURL ?? localMetadata.map { (($0 as NSString).deletingLastPathComponent as NSString).appendingPathComponent("targets") + "/" }
            ?? URL(string: "../targets/", relativeTo: URL(string: clientOptions.metadataURL))?.absoluteURL.absoluteString ?? clientOptions.metadataURL
        let packageURL = client.url(of: listing.target, base: base)
        var logged: (UInt64, UInt64)? = nil
        func report(install: InstallReport? = nil, deferredInstall: String? = nil) -> TUFUpdateReport {
            var made = TUFUpdateReport(
                decision: decision, refresh: refresh, role: listing.role, packageURL: packageURL, installed: installed,
                install: install, deferredInstall: deferredInstall)
            made.logged = logged
            return made
        }
        // The release a person or an agent confirmed, and no other: refused before anything of
        // it is fetched (the install checks the manifest it reads again).
        if let required = options.install.requiredManifestSHA256, required.lowercased() != release.manifestSHA256.lowercased() {
            throw SignetError(
                .notConfirmed,
                "channel \(options.channel) names \(release.name) \(release.version) (sequence \(release.sequence)) with manifest SHA-256 \(release.manifestSHA256), not the release that was confirmed (manifest SHA-256 \(required)). Nothing was fetched or installed",
                path: release.target)
        }
        if case .refusedBad = decision.action { return report() }
        if let lock, let note = decision.channelNote {
            try Installer.noteChannel(destination, sequence: note.sequence, version: note.version, note: note.note, records: records, holding: lock)
        }
        guard let lock, decision.action == .install || decision.action == .repair else { return report() }
        // In the log the policy names, as its witnesses saw it: checked before anything of
        // the release is fetched.
        if let policy = try options.transparencyPolicy ?? client.logPolicy() {
            let logURL =
                policy.logs.first(where: { $0.url != nil })?.url
                ?? URL(string: "../log/", relativeTo: URL(string: base))?.absoluteURL.absoluteString ?? base
            let outcome = try TransparencyCheck.check(release, packageURL: packageURL, logURL: logURL, policy: policy, client: client)
            logged = (outcome.index, outcome.checkpoint.size)
        }
        options.onRelease?(release)
        let packageKeys = listing.keys.compactMap { $0.publicKey(source: "TUF role \(listing.role)") }
        guard !packageKeys.isEmpty else {
            throw SignetError(
                .untrustedSigner,
                "role '\(listing.role)', which lists \(release.target), has no RSA key: Signet packages are signed with RSA keys of the role that lists them",
                path: release.target)
        }
        var install = options.install
        install.expectedPackage = PackageBinding(
            name: release.name, version: release.version, sequence: release.sequence,
            size: UInt64(max(0, release.length)), sha256: release.sha256, manifestSHA256: release.manifestSHA256)
        do {
            if let local = TUFLocalFolder.path(of: packageURL) {
                // A copy of the repository on local media: the package file checked whole
                // against the target (length and every hash) and installed from where it is.
                try TUFClient.check(local, listing.target, name: release.target)
                return report(install: try Installer.install(local, to: destination, policy: TrustPolicy(keys: packageKeys), options: install, holding: lock))
            }
            return report(
                install: try Installer.install(
                    downloading: packageURL, to: destination, policy: TrustPolicy(keys: packageKeys), options: install,
                    download: options.client.download, cancelled: cancelled, holding: lock))
        } catch let deferred as SignetError where deferred.code == .installDeferred {
            // Outside the maintenance window, or the pre-install command said not now: staged,
            // kept for the next run; not a failure.
            try? Installer.noteChannel(
                destination, sequence: release.sequence, version: release.version, note: deferred.reason,
                records: ReleaseRecord.read(for: destination), holding: lock)
            return report(deferredInstall: deferred.reason)
        }
    }

    /// Why a device did not install `passed` (FORMAT §7's `deferred` lines).
    static func describe(_ passed: TUFReleaseChoice.PassedOver, lock: VersionLock?) -> String {
        let release = passed.release
        switch passed.reason {
        case .versionLock, .newest, .rolloutIgnored:
            return "locked: this device's version lock\(lock.map { " (\($0))" } ?? "") excludes \(release.version) (sequence \(release.sequence))"
        case .halted:
            return
                "halted: the publisher halted the rollout of \(release.version) (sequence \(release.sequence)); it is offered to no device that does not hold it"
        case .waveNotReached:
            guard let rollout = passed.rollout else { return "waiting: \(release.version) (sequence \(release.sequence))" }
            let share = TUFRollout.percent(rollout.openBuckets)
            return
                "waiting: \(release.version) (sequence \(release.sequence)) is rolling out to \(share) of devices\(rollout.state == .paused ? " (paused)" : ""); this device (bucket \(rollout.bucket.map(String.init) ?? "?")) "
                + (rollout.eligibleAt.map { "from \($0.rfc3339)" } ?? (rollout.state == .paused ? "once it resumes" : "is not in the plan yet"))
        }
    }

    /// Where `release`'s rollout stands at `now` for the device whose id is `deviceID` (nil: the
    /// release has no plan): what `update(to:options:)` decides by.
    public static func rolloutStatus(of release: TUFPackageTarget, deviceID: [UInt8], at now: Timestamp) -> RolloutStatus? {
        rolloutStatus(of: release, deviceID: Optional(deviceID), at: now)
    }

    /// The same where the device id may be missing: a plan open to every device (or halted)
    /// needs none.
    static func rolloutStatus(of release: TUFPackageTarget, deviceID: [UInt8]?, at now: Timestamp) -> RolloutStatus? {
        guard let plan = release.rollout else { return nil }
        let bucket = deviceID.map { TUFRollout.bucket(deviceID: $0, name: release.name, sequence: release.sequence) }
        let open = plan.openBuckets(at: now)
        let eligible = plan.state != .halted && (bucket.map { $0 < open } ?? (open >= TUFRollout.bucketCount))
        return RolloutStatus(
            bucket: bucket, openBuckets: open, state: plan.state, eligible: eligible,
            eligibleAt: bucket.flatMap { plan.opens($0, at: now) }, plan: plan)
    }

    /// The device id: the file's bytes without surrounding ASCII white space (systemd's
    /// machine-id is 32 hex digits and a newline), 1 to 4,096 bytes.
    static func deviceID(_ path: String) throws -> [UInt8] {
        let bytes: [UInt8]
        do {
            bytes = try readSmallFile(path, what: "device id", limit: 4_096 + 2)
        } catch let error as SignetError {
            throw SignetError(
                error.code,
                "the release has a rollout plan, and this device's id cannot be read from '\(path)' (\(error.reason)): give device-id-file (a file of the device's stable id; systemd's /etc/machine-id by default)",
                path: path)
        }
        // The bytes as read, trimmed of ASCII white space only (FORMAT §7): never decoded, so
        // ids that are not text spread over the buckets as any other.
        let space: Set<UInt8> = [0x20, 0x09, 0x0a, 0x0b, 0x0c, 0x0d]
        let id = Array(bytes.drop { space.contains($0) }.reversed().drop { space.contains($0) }.reversed())
        guard !id.isEmpty, id.count <= 4_096 else {
            throw SignetError(
                .malformedInput,
                "the device id file '\(path)' is \(id.isEmpty ? "empty" : "longer than 4,096 bytes"): it must hold the device's stable id (systemd's /etc/machine-id is an empty file until first boot completes)",
                path: path)
        }
        return id
    }
}

// MARK: Swift-native forms: FilePath

extension TUFUpdater {
    /// `update(to:options:)` with a `FilePath`.
    public static func update(to destination: FilePath, options: TUFUpdateOptions) throws -> TUFUpdateReport {
        try update(to: destination.string, options: options)
    }

    /// ``updateAsync(to:options:)-(String,_)`` with a `FilePath`.
    public static func updateAsync(to destination: FilePath, options: TUFUpdateOptions) async throws -> TUFUpdateReport {
        try await updateAsync(to: destination.string, options: options)
    }
}
