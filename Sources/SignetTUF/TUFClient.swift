#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetNetwork

/// Where a TUF client keeps its trusted metadata and where it finds the repository.
public struct TUFClientOptions: Sendable {
    /// The metadata folder: `root.json` (the trusted root, put there by ``TUFClient/initialize(metadataDirectory:trustedRoot:force:)-(String,_,_)``),
    /// and the newest verified `timestamp.json`, `snapshot.json`, `targets.json` and delegated
    /// roles (file names percent-encoded). It conveys trust: owned by root or this user, not
    /// writable by others.
    public var metadataDirectory: String
    /// The repository's metadata URL (`https://…/metadata/`).
    public var metadataURL: String
    /// TLS policy, time-outs (`maxTime` bounds a whole refresh: slow retrieval).
    public var download = DownloadOptions()
    /// The reference time for expiry checks; the clock when nil.
    public var now: Timestamp? = nil
    /// Most root versions walked in one refresh.
    public var maximumRootRotations = 256
    /// Most targets roles visited looking for one target.
    public var maximumDelegations = 32
    /// Largest metadata files accepted, by role (the specification's "endless data" bound):
    /// a repository's own `length` in timestamp or snapshot overrides the last two.
    public var maximumRootLength = 512_000
    public var maximumTimestampLength = 16_384
    public var maximumSnapshotLength = 2_000_000
    public var maximumTargetsLength = 5_000_000
    /// Verify without keeping (`update --check` by a user who cannot write the metadata
    /// folder): no lock is taken and nothing is stored; every check is made as usual, the newly
    /// verified files held in memory for this client only.
    public var readOnly = false

    /// Options for the repository at `metadataURL`, trusted metadata in `metadataDirectory`.
    public init(metadataDirectory: String, metadataURL: String) {
        self.metadataDirectory = metadataDirectory
        self.metadataURL = metadataURL.hasSuffix("/") ? metadataURL : metadataURL + "/"
    }
}

/// What a refresh ended with: the version of each top-level role now trusted.
public struct TUFRefreshReport: Sendable, Equatable {
    public let rootVersion: Int64
    /// Root versions walked in this refresh (0 when the root did not change).
    public let rootsWalked: Int
    public let timestampVersion: Int64
    public let snapshotVersion: Int64
    public let targetsVersion: Int64
    /// HTTP requests made and body bytes received.
    public let requests: Int
    public let bytesReceived: UInt64
}

/// A target written to disk by ``TUFClient/download(_:from:into:)-(_,String,String)``.
public struct TUFDownload: Sendable {
    /// Where the verified file is.
    public let path: String
    /// False when a verified copy was already there (nothing was fetched).
    public let fetched: Bool
}

/// A TUF client (TUF specification 1.0, "detailed client workflow"): walks the root chain,
/// then timestamp, snapshot and targets, following delegations to find a target, and downloads
/// targets checked against their length and hashes. Every file is verified before it is
/// trusted or stored; the metadata folder only ever holds verified files, each written
/// atomically. One client is one refresh: make a new one for the next poll.
public final class TUFClient {
    public let options: TUFClientOptions
    private(set) var trusted: TUFTrustedSet
    /// HTTPS, or a folder holding a copy of the repository (local media): the same checks.
    let fetcher: any TUFTransport
    private var refreshed: TUFRefreshReport? = nil
    /// One client at a time on a metadata folder: `.NAME.signet-lock` beside it, held for the
    /// client's life (another waits `download.wait` seconds, then exit 5).
    private let lock: DestinationLock?

    /// Puts `trustedRoot` into `metadataDirectory` as `root.json` (creating the folder, mode
    /// 0755) after checking that it is root metadata signed by its own threshold. TUF metadata
    /// there from an earlier root is removed; no other file is touched. A trusted root never
    /// moves backwards silently: when the folder already trusts a higher root version (one that
    /// verifies by its own threshold), this throws `.rollback` naming both versions, unless
    /// `force` (a device deliberately moved to a repository made anew).
    public static func initialize(metadataDirectory: String, trustedRoot: [UInt8], force: Bool = false) throws {
        let new: Int64
        do {
            new = try TUFTrustedSet(root: trustedRoot, now: .now).root.metadata.version
        } catch var error as SignetError where error.code == .thresholdNotMet {
            // A staged root (REPO/staging/root.json) before its holders signed it: say what to use.
            error.reason +=
                ". A device starts from a root its threshold signed: the repository's metadata/1.root.json once `signet repo sign --role root` published it, not staging/root.json"
            throw error
        }
        if !force, let stored = try? readStored("root.json", in: metadataDirectory, limit: 512_000),
            let current = try? TUFTrustedSet(root: stored, now: .now).root.metadata.version, current > new
        {
            throw SignetError(
                .rollback,
                "'\(metadataDirectory)' already trusts root version \(current); the root given is version \(new), older: refused, so that a device never goes back to keys its repository revoked. Nothing was changed. A device whose root is current needs no init (`signet update` and `signet tuf refresh` walk the chain); to move it to a repository made anew on purpose, give --force",
                path: metadataDirectory)
        }
        do {
            try FileManager.default.createDirectory(atPath: metadataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw SignetError(.io, "cannot create the metadata folder '\(metadataDirectory)': \(error.localizedDescription)", path: metadataDirectory)
        }
        try TrustedInput.check(metadataDirectory, what: "the metadata folder")
        // Only TUF metadata an earlier root left is removed: a folder given by mistake keeps
        // every other file.
        if let names = try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory) {
            for name in names where name.hasSuffix(".json") && name != "root.json" {
                let path = metadataDirectory + "/" + name
                guard let bytes = try? readSmallFile(path, what: "stored metadata", limit: 5_000_000),
                    let document = try? TUFDocument(bytes: bytes, name: name),
                    let type = document.signed["_type"]?.stringValue, TUFMetadata.topLevelRoles.contains(type)
                else { continue }
                unlink(path)
            }
        }
        try AtomicFile.write(trustedRoot, to: metadataDirectory + "/root.json", mode: 0o644, replace: true)
    }

    /// Loads the trusted root from the metadata folder (nothing is fetched yet).
    public convenience init(options: TUFClientOptions) throws {
        try self.init(options: options, cancelled: nil)
    }

    package convenience init(options: TUFClientOptions, cancelled: CancellationFlag?) throws {
        let transport: any TUFTransport =
            TUFLocalFolder.path(of: options.metadataURL) != nil
            ? TUFLocalFolder() : TUFHTTPSTransport(options: options.download, cancelled: cancelled)
        try self.init(options: options, transport: transport)
    }

    /// A client whose files come from `transport` (the tests' in-memory repository, local
    /// media, HTTPS): every check the same.
    package init(options: TUFClientOptions, transport: any TUFTransport) throws {
        self.options = options
        // The metadata folder's URL, not a file in it (`…/metadata/timestamp.json`).
        let trimmed = String(options.metadataURL.dropLast())
        if let file = trimmed.split(separator: "/").last, file.hasSuffix(".json") {
            let folder = String(trimmed.dropLast(file.count))
            throw SignetError(
                .usage,
                "'\(options.metadataURL.dropLast())' names a metadata file; the repository is the folder that holds it: give '\(folder)' (its timestamp.json, snapshot and targets are found from there)"
            )
        }
        try TrustedInput.check(options.metadataDirectory, what: "the metadata folder")
        guard let root = try Self.readStored("root.json", in: options.metadataDirectory, limit: options.maximumRootLength) else {
            throw SignetError(
                .fileNotFound,
                "the metadata folder '\(options.metadataDirectory)' has no root.json: initialise it with the repository's trusted root first (`signet tuf init --metadata-dir \(options.metadataDirectory) ROOT.json`, ROOT.json being the repository's metadata/1.root.json)",
                path: options.metadataDirectory)
        }
        lock = options.readOnly ? nil : try DestinationLock(options.metadataDirectory, wait: options.download.wait)
        // Read again under the lock: another client may have walked the chain meanwhile.
        let current = try Self.readStored("root.json", in: options.metadataDirectory, limit: options.maximumRootLength) ?? root
        trusted = try TUFTrustedSet(root: current, now: options.now ?? .now)
        fetcher = transport
    }

    // MARK: Refresh (§5.3–5.6)

    /// Updates the root chain, timestamp, snapshot and top-level targets. Throws
    /// ``/SignetCore/SignetError`` (`.thresholdNotMet`, `.expiredMetadata`, `.rollback`,
    /// `.metadataMismatch`, `.malformedMetadata`, network errors); what was verified before the
    /// failure stays stored.
    @discardableResult
    public func refresh() throws -> TUFRefreshReport {
        if let refreshed { return refreshed }
        let walked = try updateRoot()
        let targets: TUFTargets
        do {
            try updateTimestamp()
            try updateSnapshot()
            targets = try loadTargets("targets", delegator: "root", delegatorParent: nil)
        } catch var error as SignetError where error.code == .thresholdNotMet {
            // Signed by keys this root does not name: most often a newer root the server lacks
            // (a deleted 2.root.json read as a targets threshold problem).
            let version = trusted.root.metadata.version
            // The server's own root of that version, if it is another: the device was set up
            // from another repository's root (or the repository was made anew).
            let ours = try? Self.readStored("root.json", in: options.metadataDirectory, limit: options.maximumRootLength)
            if let ours,
                case .found(let theirs)? = try? fetcher.get(
                    options.metadataURL + "\(version).root.json", limit: options.maximumRootLength, what: "\(version).root.json"),
                let mine = try? TUFMetadata(bytes: ours, expectedType: "root", name: "root.json"),
                let served = try? TUFMetadata(bytes: theirs, expectedType: "root", name: "\(version).root.json"),
                mine.signedBytes != served.signedBytes
            {
                error.reason +=
                    "; this device trusts a root v\(version) that is not this repository's root v\(version): it was initialised with another repository's root.json (or the repository was made anew). Initialise it from this repository's root, as shipped by its publisher: `signet tuf init --metadata-dir \(options.metadataDirectory) --force ROOT.json`"
                throw error
            }
            error.reason +=
                "; this device trusts root v\(version) and the server has no \(version + 1).root.json: if the repository's keys were rotated since, the publisher must put the newer root back (metadata/\(version + 1).root.json)"
            throw error
        }
        let report = TUFRefreshReport(
            rootVersion: trusted.root.metadata.version, rootsWalked: walked,
            timestampVersion: trusted.timestamp?.metadata.version ?? 0,
            snapshotVersion: trusted.snapshot?.metadata.version ?? 0,
            targetsVersion: targets.metadata.version,
            requests: fetcher.requests, bytesReceived: fetcher.bytesReceived)
        refreshed = report
        return report
    }

    private func updateRoot() throws -> Int {
        var walked = 0
        while walked < options.maximumRootRotations {
            let (next, overflow) = trusted.root.metadata.version.addingReportingOverflow(1)
            guard !overflow else { break }
            let name = "\(next).root.json"
            guard case .found(let bytes) = try fetcher.get(options.metadataURL + name, limit: options.maximumRootLength, what: name) else { break }
            try trusted.updateRoot(bytes, name: name)
            try store("root.json", bytes)
            walked += 1
        }
        try trusted.checkFinalRoot()
        return walked
    }

    private func updateTimestamp() throws {
        if let stored = try? Self.readStored("timestamp.json", in: options.metadataDirectory, limit: options.maximumTimestampLength) {
            // Not valid as final (expired, or no longer signed by the root's keys): still
            // trusted for rollback protection when it verifies.
            _ = try? trusted.updateTimestamp(stored, name: "the stored timestamp.json")
        }
        let bytes = try fetchRequired("timestamp.json", limit: options.maximumTimestampLength)
        if try trusted.updateTimestamp(bytes, name: "timestamp.json") {
            try store("timestamp.json", bytes)
        }
    }

    private func updateSnapshot() throws {
        guard let timestamp = trusted.timestamp else { return }
        if let stored = try? Self.readStored("snapshot.json", in: options.metadataDirectory, limit: options.maximumSnapshotLength) {
            do {
                try trusted.updateSnapshot(stored, name: "the stored snapshot.json", stored: true)
                return
            } catch let error as SignetError where error.code != .interrupted {
                // Not the one the timestamp names: fetch it.
            }
        }
        let info = timestamp.snapshot
        let name = trusted.root.consistentSnapshot ? "\(info.version).snapshot.json" : "snapshot.json"
        let bytes = try fetchRequired(name, limit: Self.limit(info.length, default: options.maximumSnapshotLength))
        try trusted.updateSnapshot(bytes, name: name, stored: false)
        try store("snapshot.json", bytes)
    }

    /// The length a role above states, as a download limit (never unbounded in memory).
    private static func limit(_ stated: Int64?, default fallback: Int) -> Int {
        guard let stated else { return fallback }
        return Int(min(stated, 1 << 30))
    }

    /// The targets role `role`, delegated by `delegator` (itself delegated by `delegatorParent`).
    private func loadTargets(_ role: String, delegator: String, delegatorParent: String?) throws -> TUFTargets {
        if let loaded = trusted.loadedTargets(role, delegator: delegator) { return loaded }
        let local = Self.quoted(role) + ".json"
        if let stored = try? Self.readStored(local, in: options.metadataDirectory, limit: options.maximumTargetsLength),
            let verified = try? trusted.updateTargets(stored, role: role, delegator: delegator, delegatorParent: delegatorParent, name: "the stored \(local)")
        {
            return verified
        }
        guard let info = trusted.snapshot?.meta["\(role).json"] else {
            throw SignetError(.metadataMismatch, "the trusted snapshot does not list '\(role).json'", path: "snapshot.json")
        }
        let name = trusted.root.consistentSnapshot ? "\(info.version).\(Self.quoted(role)).json" : "\(Self.quoted(role)).json"
        let bytes = try fetchRequired(name, limit: Self.limit(info.length, default: options.maximumTargetsLength))
        let verified = try trusted.updateTargets(bytes, role: role, delegator: delegator, delegatorParent: delegatorParent, name: name)
        try store(local, bytes)
        return verified
    }

    // MARK: Targets (§5.7)

    /// The trusted description of the target at `path` (refreshing first), found by a
    /// pre-order depth-first walk of the delegations (§5.6.7); nil when no role lists it.
    public func target(_ path: String) throws -> TUFTarget? {
        try listing(path)?.target
    }

    /// The target at `path` and the keys of the role that listed it (the keys a Signet
    /// package listed there must be signed with).
    func listing(_ path: String) throws -> (target: TUFTarget, keys: [TUFKey], role: String, threshold: Int)? {
        try refresh()
        var toVisit: [(role: String, delegator: String, delegatorParent: String?)] = [("targets", "root", nil)]
        var visited: Set<String> = []
        while visited.count < options.maximumDelegations, let next = toVisit.popLast() {
            let key = "\(next.delegator)\u{0}\(next.role)"
            if visited.contains(key) { continue }
            let targets = try loadTargets(next.role, delegator: next.delegator, delegatorParent: next.delegatorParent)
            if let found = targets.targets[path] {
                let delegation: (keys: [String: TUFKey], role: TUFRole)? =
                    next.delegator == "root"
                    ? trusted.root.delegation(to: next.role)
                    : next.delegatorParent.flatMap { trusted.loadedTargets(next.delegator, delegator: $0) }?.delegation(to: next.role)
                let keys = delegation.map { d in d.role.keyIDs.compactMap { d.keys[$0] } } ?? []
                return (found, keys, next.role, delegation?.role.threshold ?? 1)
            }
            visited.insert(key)
            var children: [(String, String, String?)] = []
            for (child, terminating) in targets.roles(for: path) {
                children.append((child, next.role, next.delegator))
                if terminating {
                    toVisit.removeAll()
                    break
                }
            }
            toVisit.append(contentsOf: children.reversed())
        }
        return nil
    }

    /// Every target path the targets role and the roles it delegates to (breadth first, at
    /// most ``TUFClientOptions/maximumDelegations`` roles) list: candidates, each to be looked
    /// up with ``listing(_:)`` (which applies the delegations' path rules).
    func listedPaths() throws -> [String] {
        try refresh()
        var paths: [String] = []
        var seen: Set<String> = []
        var queue: [(role: String, delegator: String, delegatorParent: String?)] = [("targets", "root", nil)]
        var visited = 0
        while !queue.isEmpty, visited < options.maximumDelegations {
            let next = queue.removeFirst()
            visited += 1
            // Every role the walk reaches must load: a damaged, expired or under-signed one
            // fails the refresh with its code, never skipped (which would hide what it lists).
            let targets = try loadTargets(next.role, delegator: next.delegator, delegatorParent: next.delegatorParent)
            for path in targets.targets.keys.sorted() where seen.insert(path).inserted { paths.append(path) }
            let children = targets.succinct == nil ? targets.delegatedRoles.map(\.name) : []
            queue.append(contentsOf: children.map { ($0, next.role, next.delegator) })
        }
        return paths
    }

    /// Every Signet package the trusted roles list (refreshing first), in the order the walk
    /// reaches them, each found through ``listing(_:)`` and kept where the name rule allows it
    /// (``TUFPackageListing``): a delegated role cannot claim another role's package name.
    package func packageListings() throws -> [TUFPackageListing] {
        var listings: [TUFPackageListing] = []
        for path in try listedPaths() {
            guard let found = try listing(path), let release = TUFPackageTarget(found.target) else { continue }
            // A plan counting from its publication counts from when the trusted snapshot says
            // the role's version carrying it was published (FORMAT.md §7, "Rollouts").
            let published = trusted.snapshot?.meta["\(found.role).json"]?.published
            let counted = release.resolvingRollout(publishedAt: published)
            listings.append(TUFPackageListing(release: counted, target: found.target, keys: found.keys, role: found.role, threshold: found.threshold))
        }
        return TUFPackageListing.owned(listings)
    }

    /// Where `target` is on the server: `baseURL` and its path, with the hash prefix of a
    /// consistent-snapshot repository.
    package func url(of target: TUFTarget, base baseURL: String) -> String {
        var remote = target.path
        if trusted.root.consistentSnapshot {
            if let slash = remote.lastIndex(of: "/") {
                remote = "\(remote[...slash])\(target.firstHash).\(remote[remote.index(after: slash)...])"
            } else {
                remote = "\(target.firstHash).\(remote)"
            }
        }
        return (baseURL.hasSuffix("/") ? baseURL : baseURL + "/") + Self.quotedPath(remote)
    }

    /// Writes `target` into `directory` (file name: its path, percent-encoded), fetched from
    /// `baseURL` (with the hash prefix of a consistent-snapshot repository) unless a file there
    /// already has its length and hashes. The file appears only once it verified.
    public func download(_ target: TUFTarget, from baseURL: String, into directory: String) throws -> TUFDownload {
        let fileName = Self.quoted(target.path)
        // "", "." and ".." stay themselves when quoted: never a file name here.
        guard !fileName.isEmpty, fileName != ".", fileName != ".." else {
            throw SignetError(.usage, "the target path '\(target.path)' cannot name a file in --target-dir", path: target.path)
        }
        let path = directory + "/" + fileName
        if (try? Self.check(path, target, name: path)) != nil {
            return TUFDownload(path: path, fetched: false)
        }
        let temporary = AtomicFile.temporaryPath(beside: path, tag: "download")
        let token = TemporaryFiles.register(temporary)
        defer { TemporaryFiles.unregister(token) }
        var committed = false
        defer { if !committed { unlink(temporary) } }
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(
                temporary, .readWrite, options: [.create, .exclusiveCreate, .noFollow, .closeOnExec], permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch {
            throw SignetError.posix(error, "cannot write target '\(target.path)' into", path: directory)
        }
        let written: Int64
        do {
            defer { try? fd.close() }
            written = try fetcher.download(
                url(of: target, base: baseURL), into: fd, path: temporary, limit: max(target.length, 0), what: "target '\(target.path)'")
        }
        guard written == target.length else {
            throw SignetError(
                .metadataMismatch, "target '\(target.path)' arrived with \(written) bytes; its targets role says \(target.length): nothing was written",
                path: target.path)
        }
        try Self.check(temporary, target, name: "target '\(target.path)'")
        try TemporaryFiles.guarded {
            guard rename(temporary, path) == 0 else { throw SignetError.posix(SystemCallFailure("rename", code: errno), "cannot write", path: path) }
        }
        committed = true
        return TUFDownload(path: path, fetched: true)
    }

    // MARK: Files and names

    private func fetchRequired(_ name: String, limit: Int) throws -> [UInt8] {
        switch try fetcher.get(options.metadataURL + name, limit: limit, what: name) {
        case .found(let bytes): return bytes
        case .absent(let status):
            // The timestamp is the first file every repository has: its absence usually means
            // the URL names the repository's folder, not its metadata/ folder.
            let hint =
                name == "timestamp.json" && !options.metadataURL.hasSuffix("/metadata/")
                ? "; is the URL the repository's metadata folder? Signet's repositories serve it as …/metadata/ (try '\(Download.redacted(options.metadataURL))metadata/')"
                : ""
            throw SignetError(
                .network, "the repository has no \(name) (HTTP \(status) from '\(Download.redacted(options.metadataURL + name))')\(hint)", path: name)
        }
    }

    private func store(_ name: String, _ bytes: [UInt8]) throws {
        if options.readOnly { return }
        try AtomicFile.write(bytes, to: options.metadataDirectory + "/" + name, mode: 0o644, replace: true)
    }

    /// Refreshes the metadata folder of `options` (``refresh()``) on a thread of its own;
    /// cancelling the task stops the request in flight (`CancellationError`; what verified
    /// before it stays stored).
    public static func refreshAsync(_ options: TUFClientOptions) async throws -> TUFRefreshReport {
        try await onOwnThread { try TUFClient(options: options, cancelled: $0).refresh() }
    }

    /// The old name of ``refreshAsync(_:)``.
    @available(*, deprecated, renamed: "refreshAsync(_:)", message: "the async form has its own name, so that a blocking call is never chosen for `try await`")
    public static func refresh(_ options: TUFClientOptions) async throws -> TUFRefreshReport {
        try await refreshAsync(options)
    }

    /// Refreshes, finds the target at `path` and writes it into `directory` as
    /// ``download(_:from:into:)-(_,String,String)`` does, on a thread of its own; cancellable like
    /// ``refreshAsync(_:)``. Throws `.targetNotFound` when no trusted role lists `path`.
    public static func downloadAsync(
        _ path: String, options: TUFClientOptions, from baseURL: String,
        into directory: String
    ) async throws -> TUFDownload {
        try await onOwnThread { cancelled in
            let client = try TUFClient(options: options, cancelled: cancelled)
            guard let target = try client.target(path) else {
                throw SignetError(.targetNotFound, "no trusted targets role lists '\(path)'", path: path)
            }
            return try client.download(target, from: baseURL, into: directory)
        }
    }

    /// The old name of ``downloadAsync(_:options:from:into:)-(_,_,String,String)``.
    @available(
        *, deprecated, renamed: "downloadAsync(_:options:from:into:)",
        message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func download(
        _ path: String, options: TUFClientOptions, from baseURL: String,
        into directory: String
    ) async throws -> TUFDownload {
        try await downloadAsync(path, options: options, from: baseURL, into: directory)
    }

    private static func onOwnThread<R: Sendable>(_ work: @escaping @Sendable (CancellationFlag) throws -> R) async throws -> R {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async { try work(cancelled) }
        } onCancel: {
            cancelled.set()
        }
    }
}
