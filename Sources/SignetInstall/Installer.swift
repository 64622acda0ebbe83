import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetReverify
import SignetArchive
import SignetNetwork
import SignetPackage

/// Installs packages (FORMAT.md §2 "Installing"): everything is verified before DIR changes; the
/// new tree is built in a staging directory beside DIR (same filesystem), each file written
/// through its own descriptor, given its signature attributes, mode and fsync; then DIR is
/// swapped for it in one atomic step. On any failure DIR is unchanged and the staging is removed.
public enum Installer {
    /// Verifies `package` against `policy` and installs it at `destination`.
    ///
    /// Throws ``/SignetCore/SignetError``: `.untrustedSigner` (exit 3); a verification failure, `.rollback`
    /// (exit 1); `.malformedArchive` / `.malformedManifest` (exit 4); `.destinationRefused`, I/O
    /// errors (exit 5). Whatever is thrown, `destination` is as it was.
    public static func install(
        _ package: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions = InstallOptions()
    ) throws -> InstallReport {
        let destination = try normalizedDestination(destination)
        try Paths.createDirectories(AtomicFile.parentDirectory(of: destination), mode: 0o755, what: "directory")
        // One update of DIR at a time: the rollback check and the swap happen under this lock.
        let lock = try DestinationLock(destination, wait: options.wait)
        defer { lock.release() }
        return try install(package, to: destination, policy: policy, options: options, holding: lock)
    }

    /// ``install(_:to:policy:options:)-(String,_,_,_)`` on a thread of its own (not Swift concurrency's shared
    /// pool, which blocking file I/O would hold). A task cancelled before it starts throws
    /// `CancellationError` with DIR untouched; once started, the installation runs to its end,
    /// so that DIR is never left between the old tree and the new one.
    public static func installAsync(
        _ package: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions = InstallOptions()
    ) async throws -> InstallReport {
        try Task.checkCancellation()
        return try await OwnThreads.async { try install(package, to: destination, policy: policy, options: options) }
    }

    /// The destination as it is locked and swapped: without trailing slashes ("dir/" would
    /// make lstat follow a symbolic link at dir: the name itself is judged), and, where its last
    /// component is `.` or `..` (`--dest .` from inside the tree), its real path, since a tree
    /// cannot be swapped through the name `.`.
    static func normalizedDestination(_ destination: String) throws -> String {
        var destination = destination
        while destination.count > 1 && destination.hasSuffix("/") { destination.removeLast() }
        let last = destination.split(separator: "/").last
        guard destination.isEmpty || last == "." || last == ".." else { return destination }
        guard let resolved = realpath(destination.isEmpty ? "." : destination, nil) else {
            throw SignetError.posix(errno, "cannot use destination", path: destination, call: "realpath")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// DIR's lock, taken before an update decides what to install and held until it has (one
    /// decision, one lock), and the destination as the lock and the swap name it.
    package static func lockDestination(_ destination: String, wait: Double) throws -> (destination: String, lock: DestinationLock) {
        let destination = try normalizedDestination(destination)
        try Paths.createDirectories(AtomicFile.parentDirectory(of: destination), mode: 0o755, what: "directory")
        return (destination, try DestinationLock(destination, wait: wait))
    }

    /// ``install(_:to:policy:options:)`` with the destination's lock already held (a download
    /// into DIR takes it before the download starts; an update before it decides).
    package static func install(
        _ package: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions, holding lock: DestinationLock
    ) throws -> InstallReport {
        // A package held to a log: its proof first (nothing of the package read before it).
        let options = try requireLogged(package, options: options, download: nil)
        // What an interrupted or killed unpack of DIR left behind (its process is gone).
        let stale = TemporaryFiles.removeStale(besides: destination)
        let state = try DestinationState.inspect(destination, force: options.force)
        // An encrypted package (FORMAT §8) is read in place through its key: the archive layer
        // reads the signed package inside it, each chunk authenticated as it is read.
        var reader = try ZipReader(path: package, maximumEntries: options.limits.maximumEntries)
        if EncryptedPackage.isEncrypted(reader) {
            guard let key = options.decryptionKey else {
                let recipients = (try? EncryptedPackage.summary(of: package).recipients.count).map { " to \($0) recipient\($0 == 1 ? "" : "s")" } ?? ""
                throw SignetError(
                    .notARecipient, "'\(package)' is encrypted\(recipients); give the device's key with --decryption-key (nothing was installed)",
                    path: package)
            }
            reader = try ZipReader(input: try EncryptedPackage.input(package, with: key), maximumEntries: options.limits.maximumEntries)
        }
        return try sayingRoom(reader, destination) {
            try install(
                reader: reader, package: package, to: destination, state: state, stale: stale, policy: policy,
                options: options, ranged: nil)
        }
    }

    /// `body`, with a full disk said as what the package needs beside what is free,
    /// measured once the staged files are gone.
    static func sayingRoom<R>(_ reader: ZipReader, _ destination: String, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch var error as SignetError where error.code == .io && error.reason.contains("no space left") {
            let needed = reader.entries().reduce(UInt64(0)) { $0 &+ $1.size }
            var info = statvfs()
            let free = statvfs(AtomicFile.parentDirectory(of: destination), &info) == 0 ? UInt64(info.f_bavail) &* UInt64(info.f_frsize) : nil
            error.reason +=
                "; the package unpacks to \(SignetError.size(needed)) at most (unchanged files shared with '\(destination)' take none)\(free.map { ", and \(SignetError.size($0)) is free on that filesystem" } ?? "")"
            throw error
        }
    }

    /// The installation proper, from an open reader: a local package, or one read with range
    /// requests (`ranged`), whose unchanged files are copied from the installed tree. Three
    /// phases, each a step of its own (`Installer+Phases.swift`): ``admit(_:state:stale:ranged:)``
    /// decides before anything is written, ``stageResources(_:admitted:state:ranged:)`` builds the
    /// new tree beside DIR, ``swap(_:job:admitted:state:stale:ranged:)`` puts it in place and
    /// records it.
    static func install(
        reader: ZipReader, package: String, to destination: String, state: DestinationState, stale: [String],
        policy: TrustPolicy, options: InstallOptions, ranged: RangedUpdate?
    ) throws -> InstallReport {
        let job = Job(
            package: package, destination: destination, reader: reader,
            layout: try PackageReader.Layout(reader: reader, limits: options.limits, bare: options.bare),
            policy: policy, options: options)
        var admitted: Admitted
        options.phase?(.verify)
        switch try admit(job, state: state, stale: stale, ranged: ranged) {
        case .upToDate(let report): return report
        case .install(let value): admitted = value
        }
        options.phase?(.stage)
        let staged = try stageResources(job, admitted: &admitted, state: state, ranged: ranged)
        let preInstall: HookResult?
        do {
            if options.hooks.preInstall != nil { options.phase?(.hooks) }
            preInstall = try gate(job, admitted: admitted, state: state)
        } catch let deferred as SignetError where deferred.code == .installDeferred {
            // Staged and verified, not swapped: kept beside DIR, where the next run (ranged)
            // takes its files over instead of fetching them again.
            if let ranged {
                ranged.leftovers.adopt(staged.staging.path)
                throw SignetError(.installDeferred, deferred.reason + "; what was staged is kept beside '\(destination)' for the next run", path: destination)
            }
            _ = staged.staging.remove()
            throw deferred
        } catch {
            _ = staged.staging.remove()
            throw error
        }
        options.phase?(.swap)
        return try swap(staged, job: job, admitted: admitted, state: state, stale: stale, ranged: ranged, preInstall: preInstall)
    }

    /// Between staging and the swap: the maintenance windows, then the pre-install
    /// command. Throws `.installDeferred` (not now) or `.preInstallRefused`.
    /// Returns the pre-install command's result when it ran and said yes (the report lists it
    /// with the other hooks).
    @discardableResult
    static func gate(_ job: Job, admitted: Admitted, state: DestinationState) throws -> HookResult? {
        let options = job.options
        guard let manifest = admitted.checked?.manifest else {
            // A bare package: nothing signed names a release for the gate to judge (FORMAT §7).
            if !options.windows.isEmpty || options.hooks.preInstall != nil {
                throw SignetError(
                    .usage,
                    "a bare package cannot be installed with maintenance windows or a pre-install command: it has no signed release (name, version, sequence) for them to judge",
                    path: job.destination)
            }
            return nil
        }
        let new = Release(manifest)
        // The clock at the swap, not at the run's start (FORMAT §7): judged before the
        // pre-install command is asked and again after it answers (it may take 300 s).
        func checkWindow() throws {
            let time = options.clock()
            if !options.windows.isEmpty, !options.windows.contains(where: { $0.contains(time) }) {
                throw SignetError(
                    .installDeferred,
                    "outside the maintenance window (\(options.windows.map(\.description).joined(separator: "; ")) at \(time.rfc3339)): \(new.description) is staged and verified, not installed",
                    path: job.destination)
            }
        }
        try checkWindow()
        guard let command = options.hooks.preInstall else { return nil }
        let environment = hookEnvironment(event: "pre-install", destination: job.destination, from: Self.release(of: state), to: new)
        let result = HookRunner.run("pre-install", command, environment: environment, timeout: options.hooks.preInstallTimeout)
        if HookRunner.isStopped {
            throw SignetError(.interrupted, "interrupted in the pre-install command; nothing was installed", path: job.destination)
        }
        if result.succeeded {
            try checkWindow()
            return result
        }
        let output = result.output.trimmingCharacters(in: .whitespacesAndNewlines).suffix(300)
        if result.exitStatus == 75 {
            throw SignetError(
                .installDeferred,
                "the pre-install command said not now (exit 75)\(output.isEmpty ? "" : ": \(output)"): \(new.description) is staged and verified, not installed",
                path: job.destination)
        }
        throw SignetError(
            .preInstallRefused,
            "the pre-install command refused \(new.description) (\(result.outcome))\(output.isEmpty ? "" : ": \(output)"); nothing was installed, and the next run asks again",
            path: job.destination)
    }

    /// The installed tree holds exactly this release: the same name and sequence, and its
    /// manifest is byte for byte the verified one.
    static func sameRelease(_ installed: Manifest, _ checked: PackageReader.Checked, at destination: String) -> Bool {
        guard Manifest.sameName(installed.name, checked.manifest.name), installed.sequence == checked.manifest.sequence else { return false }
        guard let file = try? InputFile.open(destination + "/" + TreeLayout.manifest, what: "the installed manifest", followSymlinks: false),
            let bytes = try? file.readAll(limit: checked.manifestBytes.count + 1, what: "the installed manifest")
        else { return false }
        return bytes == checked.manifestBytes
    }

    /// What `reverify --read-all` would find wrong in the installed tree ("path: verdict");
    /// empty when it checks whole. fs-verity files are read too: a block changed under one is
    /// found (the kernel refuses to read it) and the file is replaced, never rewritten in place.
    static func damage(of destination: String, policy: TrustPolicy) throws -> [String] {
        var options = ReverifyOptions()
        options.readVerityFiles = true
        let report = try Reverifier.verifyTree(at: destination, policy: policy, options: options)
        if report.manifestFailure != nil { return [".signet/manifest.json: \(report.manifestMessage ?? "does not verify")"] }
        return report.files.filter { !$0.verdict.isOK }.map { "\($0.path): \($0.verdict)" }
    }

    /// A sealed destination (`.signet-trust`) is replaced only by a tree that brings the
    /// publisher's seal: an install never leaves a sealed directory unsealed.
    static func checkSeal(of destination: String, replacedBy paths: [String], options: InstallOptions, package: String) throws {
        guard TrustStoreSeal.isSealed(destination), !paths.contains(where: { $0.utf8.elementsEqual(TrustStoreSeal.fileName.utf8) }) else { return }
        throw SignetError(
            .destinationRefused,
            "'\(destination)' is a sealed directory (it has \(TrustStoreSeal.fileName)) and '\(package)' brings no seal: installed as it is, the directory would be left unsealed. Publish the tree sealed (signet trust seal DIR --key KEY before packing it; devices check it with --trust-seal-key), or remove \(TrustStoreSeal.fileName) first if it should no longer be sealed",
            path: destination)
    }

    /// The package must be the one signed metadata binds: the same signed manifest (SHA-256 of
    /// its bytes), name and sequence.
    static func checkBinding(_ expected: PackageBinding, checked: PackageReader.Checked?, package: String) throws {
        guard let checked else {
            throw SignetError(
                .indexMismatch,
                "'\(package)' is a bare package; its signed metadata names \(expected.name) sequence \(expected.sequence). Nothing was installed", path: package
            )
        }
        let digest = try Digest.compute(checked.manifestBytes, algorithm: .sha256)
        guard digest.matches(hex: expected.manifestSHA256), Manifest.sameName(checked.manifest.name, expected.name),
            checked.manifest.sequence == expected.sequence
        else {
            throw SignetError(
                .indexMismatch,
                "'\(package)' is \(checked.manifest.name) sequence \(checked.manifest.sequence) with manifest SHA-256 \(digest.hex); its signed metadata binds \(expected.name) sequence \(expected.sequence) with manifest SHA-256 \(expected.manifestSHA256). The package on the server is not the one the metadata was signed for. Nothing was installed",
                path: package)
        }
    }

    /// The package must be the release that was confirmed: its signed manifest's SHA-256 is
    /// `required` (`--require-manifest-sha256`).
    static func checkConfirmed(_ required: String, checked: PackageReader.Checked?, package: String) throws {
        guard let checked else {
            throw SignetError(
                .notConfirmed,
                "'\(package)' is a bare package: it has no signed manifest to be the confirmed one (SHA-256 \(required)). Nothing was installed",
                path: package)
        }
        let digest = try Digest.compute(checked.manifestBytes, algorithm: .sha256)
        guard digest.matches(hex: required) else {
            throw SignetError(
                .notConfirmed,
                "'\(package)' is \(checked.manifest.name) \(checked.manifest.version) (sequence \(checked.manifest.sequence)) with manifest SHA-256 \(digest.hex), not the release that was confirmed (manifest SHA-256 \(required)). Nothing was installed",
                path: package)
        }
    }

    static func writeAll(_ chunk: UnsafeRawBufferPointer, to fd: FileDescriptor, path: String, destination: String) throws {
        do { try fd.write(all: chunk) } catch {
            throw SignetError.posix(error, "cannot write the staged copy of '\(path)' beside", path: destination)
        }
    }

    static func error(for failure: PackageVerification.Failure, _ message: String, package: String, entry: String?) -> SignetError {
        return SignetError(SignetError.Code(failure), "'\(package)': \(message); nothing was installed", path: package, entry: entry)
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension Installer {
    /// Verifies `package` and installs it at `destination` (`install(_:to:policy:options:)`).
    public static func install(
        _ package: FilePath, to destination: FilePath, policy: TrustPolicy,
        options: InstallOptions = InstallOptions()
    ) throws -> InstallReport {
        try install(package.string, to: destination.string, policy: policy, options: options)
    }

    /// `installAsync(_:to:policy:options:)` with `FilePath`s.
    public static func installAsync(
        _ package: FilePath, to destination: FilePath, policy: TrustPolicy,
        options: InstallOptions = InstallOptions()
    ) async throws -> InstallReport {
        try await installAsync(package.string, to: destination.string, policy: policy, options: options)
    }

    /// Downloads the package at `url` and installs it at `destination`, blocking.
    public static func install(
        downloading url: URL, to destination: FilePath, policy: TrustPolicy,
        options: InstallOptions = InstallOptions(),
        download: DownloadOptions = DownloadOptions()
    ) throws -> InstallReport {
        try install(downloading: url.absoluteString, to: destination.string, policy: policy, options: options, download: download)
    }

    /// Downloads the package at `url` and installs it at `destination`, on a thread of its own;
    /// cancellable as `installAsync(downloading:to:policy:options:download:)` is.
    public static func installAsync(
        downloading url: URL, to destination: FilePath, policy: TrustPolicy,
        options: InstallOptions = InstallOptions(),
        download: DownloadOptions = DownloadOptions()
    ) async throws -> InstallReport {
        try await installAsync(downloading: url.absoluteString, to: destination.string, policy: policy, options: options, download: download)
    }
}
