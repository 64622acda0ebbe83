import Foundation
public import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Options for ``Updater``.
public struct UpdateOptions: Sendable {
    /// The channel this device follows: the index must be this channel's.
    public var channel: String
    /// How the package is installed (`stateFile` also keeps the highest index serial seen per
    /// channel: a lower one is a replay and is refused).
    public var install = InstallOptions()
    /// How the index and the package are fetched.
    public var download = DownloadOptions()
    /// Only find out whether an update is available: nothing is installed or recorded.
    public var checkOnly = false

    /// Options for following `channel`.
    public init(channel: String) {
        self.channel = channel
    }
}

/// What ``Updater`` found and did.
public struct UpdateReport: Sendable {
    /// The verified channel index.
    public let index: ChannelIndex
    /// Where the package is (the index's URL resolved against the index's own).
    public let packageURL: String
    /// What the destination held before (nil when it held no installed package).
    public let installed: Installed?
    /// Whether the index names a newer release than the destination holds.
    public let updateAvailable: Bool
    /// The installation, when one was made.
    public let install: InstallReport?

    /// An installed release.
    public struct Installed: Sendable, Equatable {
        public let name: String
        public let version: String
        public let sequence: UInt64
    }
}

/// Keeps a destination on what its channel's signed index names (FORMAT.md §6): fetches and
/// verifies the index (signature, channel, expiry, serial), and when it names a newer release,
/// installs it from the URL it gives, bound to the index (the package's manifest SHA-256, name and
/// sequence checked before any resource is fetched; size and SHA-256 too when it is downloaded
/// whole).
public enum Updater {
    /// Updates `destination` from the channel index at `indexURL`. Throws ``SignetError``:
    /// `.staleIndex`, `.rollback` (a lower serial than seen), `.wrongChannel`, `.indexMismatch`
    /// (exit 1); `.untrustedSigner` (exit 3); `.malformedIndex` (exit 4); network and I/O
    /// errors (exit 5); and whatever the installation throws. The destination is unchanged on
    /// any failure.
    public static func update(index indexURL: String, to destination: String, policy: TrustPolicy,
                              options: UpdateOptions) throws -> UpdateReport {
        try update(index: indexURL, to: destination, policy: policy, options: options, cancelled: nil)
    }

    /// The same on a thread of its own; cancelling the task stops the transfer in progress
    /// (`CancellationError`, the destination unchanged). Progress is reported through
    /// `options.download.progress`.
    public static func updateAsync(index indexURL: String, to destination: String, policy: TrustPolicy,
                                   options: UpdateOptions) async throws -> UpdateReport {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async {
                try update(index: indexURL, to: destination, policy: policy, options: options, cancelled: cancelled)
            }
        } onCancel: {
            cancelled.set()
        }
    }

    /// The old name of ``updateAsync(index:to:policy:options:)-(String,String,_,_)``.
    @available(*, deprecated, renamed: "updateAsync(index:to:policy:options:)", message: "the async form has its own name (issue 41), so that a blocking call is never chosen for `try await`")
    public static func update(index indexURL: String, to destination: String, policy: TrustPolicy,
                              options: UpdateOptions) async throws -> UpdateReport {
        try await updateAsync(index: indexURL, to: destination, policy: policy, options: options)
    }

    static func update(index indexURL: String, to destination: String, policy: TrustPolicy, options: UpdateOptions,
                       cancelled: CancellationFlag?) throws -> UpdateReport {
        guard ChannelIndex.isValidChannel(options.channel) else {
            throw SignetError(.usage, "the channel name '\(options.channel)' is not 1 to 64 letters, digits, '.', '_' or '-'")
        }
        let source = Download.redacted(indexURL)
        let bytes = try fetchIndex(indexURL, options: options.download, cancelled: cancelled)
        let (index, _) = try ChannelIndex.verified(bytes, source: source, policy: policy, channel: options.channel, now: options.install.now)
        if let stateFile = options.install.stateFile, FileManager.default.fileExists(atPath: stateFile),
           let seen = try InstallState.read(stateFile).channels[index.channel], index.serial < seen.serial {
            throw SignetError(.rollback, "the channel index '\(source)' has serial \(index.serial), lower than serial \(seen.serial) seen before (recorded in '\(stateFile)'): an older index served again (a replay). Nothing was installed", path: source)
        }
        let installed = try Self.installed(destination, force: options.install.replacesForeign(destination))
        let newer = installed.map { !Installer.sameName($0.name, index.package.name) || index.package.sequence > $0.sequence } ?? true
        let packageURL = try resolve(index.package.url, against: indexURL)
        if options.checkOnly {
            return UpdateReport(index: index, packageURL: packageURL, installed: installed, updateAvailable: newer, install: nil)
        }
        // --repair: the release DIR holds is checked, and reinstalled if it no longer checks whole.
        let repairing = options.install.repair && !newer && installed.map { $0.sequence == index.package.sequence } == true
        var report: InstallReport? = nil
        if newer || repairing {
            var install = options.install
            install.expectedPackage = index.package
            report = try Installer.install(downloading: packageURL, to: destination, policy: policy, options: install,
                                           download: options.download, cancelled: cancelled)
        }
        if let stateFile = options.install.stateFile {
            try InstallState(path: stateFile).record(channel: index.channel, serial: index.serial, expires: index.expires)
        }
        return UpdateReport(index: index, packageURL: packageURL, installed: installed, updateAvailable: newer, install: report)
    }

    /// The index's bytes: downloaded (under the TLS policy) into a private folder, at most
    /// ``ChannelIndex/maximumSize`` bytes, read and removed.
    static func fetchIndex(_ url: String, options: DownloadOptions, cancelled: CancellationFlag?) throws -> [UInt8] {
        var options = options
        options.maxSize = UInt64(ChannelIndex.maximumSize)
        options.progress = nil
        let copy = try Download.temporaryCopy(of: url, options: options, cancelled: cancelled)
        defer { Download.removeTemporaryCopy(copy) }
        return try InputFile.open(copy, what: "channel index").readAll(limit: ChannelIndex.maximumSize, what: "channel index")
    }

    /// What the destination holds now.
    static func installed(_ destination: String, force: Bool) throws -> UpdateReport.Installed? {
        guard case .installed(let manifest?) = try DestinationState.inspect(destination, force: force) else { return nil }
        return UpdateReport.Installed(name: manifest.name, version: manifest.version, sequence: manifest.sequence)
    }

    /// `url` (absolute, or relative to the index's URL) as an absolute URL.
    static func resolve(_ url: String, against index: String) throws -> String {
        guard let base = URL(string: index), let resolved = URL(string: url, relativeTo: base)?.absoluteURL.absoluteString else {
            throw SignetError(.malformedIndex, "the package URL '\(url)' of the channel index '\(Download.redacted(index))' is not a URL", path: index)
        }
        return resolved
    }
}

// MARK: Swift-native forms (issue 41): URL and FilePath

extension Updater {
    /// `update(index:to:policy:options:)` with a `URL` and a `FilePath`.
    public static func update(index indexURL: URL, to destination: FilePath, policy: TrustPolicy,
                              options: UpdateOptions) throws -> UpdateReport {
        try update(index: indexURL.absoluteString, to: destination.string, policy: policy, options: options)
    }

    /// ``updateAsync(index:to:policy:options:)-(String,String,_,_)`` with a `URL` and a `FilePath`.
    public static func updateAsync(index indexURL: URL, to destination: FilePath, policy: TrustPolicy,
                                   options: UpdateOptions) async throws -> UpdateReport {
        try await updateAsync(index: indexURL.absoluteString, to: destination.string, policy: policy, options: options)
    }
}
