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
    public static func install(_ package: String, to destination: String, policy: TrustPolicy,
                               options: InstallOptions = InstallOptions()) throws -> InstallReport {
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
    public static func installAsync(_ package: String, to destination: String, policy: TrustPolicy,
                                    options: InstallOptions = InstallOptions()) async throws -> InstallReport {
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

    /// ``install(_:to:policy:options:)`` with the destination's lock already held (a download
    /// into DIR takes it before the download starts).
    static func install(_ package: String, to destination: String, policy: TrustPolicy,
                        options: InstallOptions, holding lock: DestinationLock) throws -> InstallReport {
        // What an interrupted or killed unpack of DIR left behind (its process is gone).
        let stale = TemporaryFiles.removeStale(besides: destination)
        let state = try DestinationState.inspect(destination, force: options.force)
        let reader = try ZipReader(path: package, maximumEntries: options.limits.maximumEntries)
        return try sayingRoom(reader, destination) {
            try install(reader: reader, package: package, to: destination, state: state, stale: stale, policy: policy,
                        options: options, ranged: nil)
        }
    }

    /// `body`, with a full disk said as what the package needs beside what is free (issue 49),
    /// measured once the staged files are gone.
    static func sayingRoom<R>(_ reader: ZipReader, _ destination: String, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch var error as SignetError where error.code == .io && error.reason.contains("no space left") {
            let needed = reader.entries().reduce(UInt64(0)) { $0 &+ $1.size }
            var info = statvfs()
            let free = statvfs(AtomicFile.parentDirectory(of: destination), &info) == 0 ? UInt64(info.f_bavail) &* UInt64(info.f_frsize) : nil
            error.reason += "; the package unpacks to \(SignetError.size(needed)) at most (unchanged files shared with '\(destination)' take none)\(free.map { ", and \(SignetError.size($0)) is free on that filesystem" } ?? "")"
            throw error
        }
    }

    /// The installation proper, from an open reader: a local package, or one read with range
    /// requests (`ranged`), whose unchanged files are copied from the installed tree.
    static func install(reader: ZipReader, package: String, to destination: String, state: DestinationState, stale: [String],
                        policy: TrustPolicy, options: InstallOptions, ranged: RangedUpdate?) throws -> InstallReport {
        let job = Job(package: package, destination: destination, reader: reader,
                      layout: try PackageReader.Layout(reader: reader, limits: options.limits, bare: options.bare),
                      policy: policy, options: options)

        // Phase 1: the manifest and the rollback rules, before anything is written.
        var (checked, installState) = try job.checkManifest(replacing: state)
        if let expected = options.expectedPackage { try Self.checkBinding(expected, checked: checked, package: package) }
        try Self.checkSeal(of: destination, replacedBy: job.resources(checked).map(\.path), options: options, package: package)
        if options.caseInsensitiveDestination || CaseFolding.ignoresCase(at: AtomicFile.parentDirectory(of: destination)) {
            try CaseFolding.refuseCollisions(job.resources(checked).map(\.path), package: package)
        }

        // The release DIR already holds: nothing to write, unless asked to reinstall or to
        // repair a tree that no longer checks whole.
        var repaired: [String] = []
        if let checked, !options.force, case .installed(let installed?) = state, Self.sameRelease(installed, checked, at: destination) {
            if options.repair {
                repaired = try Self.damage(of: destination, policy: policy)
            }
            if repaired.isEmpty {
                if let installState, (installState.destination(destination)?.sequence ?? 0) < installed.sequence {
                    try installState.record(checked.manifest.name, sequence: checked.manifest.sequence, destination: destination, changedFrom: nil)
                }
                var report = InstallReport(destination: destination, manifest: checked.manifest, files: [], signer: checked.key,
                                           replacedSequence: nil, attributesWritten: true, exchanged: false,
                                           leftover: stale.first, transfer: ranged?.report)
                report.upToDate = true
                // A health check that never finished (killed in it): run again now.
                let releases = try ReleaseRecord.read(for: destination)
                if options.hooks.healthCheck != nil, releases.unchecked == installed.sequence {
                    report.pending = releases.pending?.sequence == installed.sequence
                    try Self.runHooks(&report, old: try? Self.status(of: destination).previous, options: options, installState: installState, recheck: true)
                }
                return report
            }
        }

        // A release this destination refused (a failed health check, a rollback) is not
        // installed again; a higher sequence is (--retry-bad overrides).
        var releases = try ReleaseRecord.read(for: destination)
        if let checked, !options.retryBad, let bad = releases.isBad(checked.manifest.name, sequence: checked.manifest.sequence, installed: Self.release(of: state)?.sequence) {
            throw SignetError(.badRelease, "\(checked.manifest.name) sequence \(checked.manifest.sequence) is a release '\(destination)' refused (sequence \(bad.sequence) and lower: \(bad.reason), \(bad.at)); nothing was installed. A higher sequence installs; --retry-bad installs this one anyway", path: package)
        }
        let manifestDigest = try checked.map { try Digest.compute($0.manifestBytes, algorithm: .sha256).hex }
        // --pending records this boot's id: read before anything is written.
        let bootID = options.pending ? try ReleaseRecord.bootID() : ""

        // Phase 2: every resource, verified while it streams into the staging directory.
        let staging = try Staging(besides: destination)
        // The verified manifest's bytes go into the staged tree now rather than being held to
        // the end (8.7 MiB of a 50,000-file package's peak; issue 28).
        if let bytes = checked?.manifestBytes {
            checked?.manifestBytes = []
            try staging.writeFile(TreeLayout.manifest, bytes)
        }
        var installed = false
        // Over ranges, a transfer that failed (the link dropped, --max-time) leaves what it staged
        // for the next run to take over (FORMAT.md §5); anything else removes it.
        var keepForNextRun = false
        defer { if !installed && !keepForNextRun { _ = staging.remove() } }
        var signer = checked?.key
        var attributesWritten = true
        var files: [String] = []
        // Every signature, in manifest order, in one file (not a sidecar file per resource).
        let record = try checked.map { try SignatureRecord.Writer(file: try staging.createFile(TreeLayout.signatureRecord), path: staging.path, length: $0.key.signatureLength, digest: $0.algorithm.digest) }
        let resources = job.resources(checked)
        // Over ranges: which files the installed tree already holds (copied, not fetched).
        let reused = try ranged?.prepare(resources, job: job, state: state, staging: staging, algorithm: checked?.algorithm) ?? []
        // From a package file: the unchanged files come from the installed tree (shared, else
        // copied) rather than from the package (issue 39).
        let shared = ranged == nil && checked != nil && !options.force ? SharedTree(destination: destination, state: state) : nil
        let progress = ProgressCounter.make(options.progress, items: resources.count, bytes: resources.reduce(0) { $0 &+ $1.size })
        // Each resource's signature is verified on the second core while the next ones stage;
        // all of them before anything is installed, and the first failure in manifest order is
        // the one reported, as when each is checked in turn.
        let signatures = checked.map { SignatureChecks(key: $0.key, algorithm: $0.algorithm) }
        func firstBadSignature() -> SignetError? {
            signatures?.firstRejection().map { Self.error(for: $0.failure, $0.message, package: package, entry: $0.entry) }
        }
        do {
            for (index, file) in resources.enumerated() {
                let later = signatures.map { checks in { checks.submit(index: index, file: file, signature: $0, digest: $1) } }
                var copied: Job.Staged? = nil
                if let ranged, let checked, index < reused.count, reused[index] {
                    copied = try ranged.copy(file, index: index, job: job, into: staging, checked: checked, later: later)
                } else if let shared, let checked, shared.holds(file) {
                    copied = try shared.stage(file, job: job, into: staging, checked: checked, later: later)
                    if copied != nil { progress?.add(bytes: Int(clamping: file.size)) }
                }
                let staged = try copied ?? job.stage(file, into: staging, checked: checked, signer: signer, progress: progress, later: later)
                if copied == nil { ranged?.countFetched(file) }
                progress?.add(items: 1)
                signer = signer ?? staged.signer
                attributesWritten = attributesWritten && staged.attributesWritten
                try record?.append(staged.signature)
                files.append(file.path)
            }
        } catch {
            if let bad = firstBadSignature() { throw bad }
            if let ranged, var failure = error as? SignetError, failure.code == .network || failure.code == .packageChanged {
                // What is staged is kept: the next attempt (this run's, after a package that
                // changed on the server, or the next run's) continues in it.
                keepForNextRun = true
                ranged.leftovers.adopt(staging.path)
                if failure.code == .network {
                    failure.reason += "; what was fetched is kept beside '\(destination)' for the next run, which fetches only the rest"
                }
                throw failure
            }
            throw error
        }
        if let failure = firstBadSignature() { throw failure }
        guard let signer else { throw SignetError(.malformedArchive, "'\(package)' holds no resources; nothing was installed", path: package) }
        if let checked {
            try record?.finish()
            try job.checkRecordSignature(checked, digest: record?.digest, into: staging)
            try job.stageRecord(checked, into: staging)
        } else {
            // A bare tree: marked, so that reverify and the next unpack know it as Signet's.
            try staging.writeFile(TreeLayout.bareMarker, Array("signet-bare/1\n".utf8))
        }

        // Phase 3: the swap, then the record of what was installed.
        try staging.finish()
        let previous = Self.previousPolicy(options: options, state: state, releases: releases, checked: checked, digest: manifestDigest)
        let pendingBefore = releases.pending
        if options.pending, let checked {
            // Recorded before the swap, so that a power cut right after it leaves the new
            // release pending, not confirmed (a pending sequence DIR does not hold is ignored).
            releases.pending = .init(sequence: checked.manifest.sequence, boot_id: bootID, since: Timestamp.now.rfc3339)
        }
        // With a health check, the new release is unchecked from before the swap until the
        // check passes: a process killed anywhere after the swap (in the post-install command
        // too) leaves it to be checked by the next run, never confirmed (FORMAT §2, "Hooks").
        let uncheckedBefore = releases.unchecked
        if options.hooks.healthCheck != nil, let checked { releases.unchecked = checked.manifest.sequence }
        if releases.pending != pendingBefore || releases.unchecked != uncheckedBefore { try releases.write(for: destination) }
        let exchanged: Bool, kept: Bool
        do {
            (exchanged, kept) = try staging.install(at: destination, replacing: state, previous: previous)
        } catch {
            // DIR is as it was: so is what the record says of it (a release of DIR's that was
            // pending stays pending).
            if releases.pending != pendingBefore || releases.unchecked != uncheckedBefore {
                releases.pending = pendingBefore
                releases.unchecked = uncheckedBefore
                try? releases.write(for: destination)
            }
            throw error
        }
        installed = true
        let old = Self.release(of: state)
        if checked != nil {
            releases.record(installed: manifestDigest, signer: checked?.key, pending: releases.pending?.sequence == checked?.manifest.sequence ? releases.pending : nil,
                            kept: kept, previous: previous)
            try releases.write(for: destination)
        }
        let leftover = staging.removeReplaced()
        progress?.finish()
        if let installState {
            let before = installState.destination(destination)?.name ?? state.installedName
            let changedFrom = options.changePackage && before != nil && !Manifest.sameName(before, checked?.manifest.name) ? before : nil
            try installState.record(checked?.manifest.name, sequence: checked?.manifest.sequence, destination: destination, changedFrom: changedFrom)
        }
        var replaced: UInt64? = nil
        if case .installed(let manifest?) = state { replaced = manifest.sequence }
        var report = InstallReport(destination: destination, manifest: checked?.manifest, files: files, signer: signer,
                                   replacedSequence: replaced, attributesWritten: attributesWritten, exchanged: exchanged,
                                   leftover: leftover ?? stale.first, transfer: ranged?.report)
        report.repaired = repaired
        report.filesShared = (ranged?.linked ?? 0) + (shared?.linked ?? 0)
        report.filesCopied = max(0, (ranged?.report.filesReused ?? 0) - (ranged?.linked ?? 0)) + (shared?.copied ?? 0)
        report.previousKept = kept
        report.pending = releases.pending != nil
        try Self.runHooks(&report, old: old, options: options, installState: installState)
        return report
    }

    /// The installed tree holds exactly this release: the same name and sequence, and its
    /// manifest is byte for byte the verified one.
    static func sameRelease(_ installed: Manifest, _ checked: PackageReader.Checked, at destination: String) -> Bool {
        guard Manifest.sameName(installed.name, checked.manifest.name), installed.sequence == checked.manifest.sequence else { return false }
        guard let file = try? InputFile.open(destination + "/" + TreeLayout.manifest, what: "the installed manifest", followSymlinks: false),
              let bytes = try? file.readAll(limit: checked.manifestBytes.count + 1, what: "the installed manifest") else { return false }
        return bytes == checked.manifestBytes
    }

    /// What `reverify` would find wrong in the installed tree ("path: verdict"); empty when it
    /// checks whole.
    static func damage(of destination: String, policy: TrustPolicy) throws -> [String] {
        let report = try Reverifier.verifyTree(at: destination, policy: policy)
        if report.manifestFailure != nil { return [".signet/manifest.json: \(report.manifestMessage ?? "does not verify")"] }
        return report.files.filter { !$0.verdict.isOK }.map { "\($0.path): \($0.verdict)" }
    }

    /// A sealed destination (`.signet-trust`) is replaced only by a tree that brings the
    /// publisher's seal: an install never leaves a sealed directory unsealed.
    static func checkSeal(of destination: String, replacedBy paths: [String], options: InstallOptions, package: String) throws {
        guard TrustStoreSeal.isSealed(destination), !paths.contains(where: { $0.utf8.elementsEqual(TrustStoreSeal.fileName.utf8) }) else { return }
        throw SignetError(.destinationRefused, "'\(destination)' is a sealed directory (it has \(TrustStoreSeal.fileName)) and '\(package)' brings no seal: installed as it is, the directory would be left unsealed. Publish the tree sealed (signet trust seal DIR --key KEY before packing it; devices check it with --trust-seal-key), or remove \(TrustStoreSeal.fileName) first if it should no longer be sealed", path: destination)
    }

    /// The package must be the one signed metadata binds: the same signed manifest (SHA-256 of
    /// its bytes), name and sequence.
    static func checkBinding(_ expected: PackageBinding, checked: PackageReader.Checked?, package: String) throws {
        guard let checked else {
            throw SignetError(.indexMismatch, "'\(package)' is a bare package; its signed metadata names \(expected.name) sequence \(expected.sequence). Nothing was installed", path: package)
        }
        let digest = try Digest.compute(checked.manifestBytes, algorithm: .sha256)
        guard digest.matches(hex: expected.manifestSHA256), Manifest.sameName(checked.manifest.name, expected.name), checked.manifest.sequence == expected.sequence else {
            throw SignetError(.indexMismatch, "'\(package)' is \(checked.manifest.name) sequence \(checked.manifest.sequence) with manifest SHA-256 \(digest.hex); its signed metadata binds \(expected.name) sequence \(expected.sequence) with manifest SHA-256 \(expected.manifestSHA256). The package on the server is not the one the metadata was signed for. Nothing was installed", path: package)
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

// MARK: Swift-native forms (issue 41): FilePath and URL paths, DataProtocol bytes

extension Installer {
    /// Verifies `package` and installs it at `destination` (`install(_:to:policy:options:)`).
    public static func install(_ package: FilePath, to destination: FilePath, policy: TrustPolicy,
                               options: InstallOptions = InstallOptions()) throws -> InstallReport {
        try install(package.string, to: destination.string, policy: policy, options: options)
    }

    /// `installAsync(_:to:policy:options:)` with `FilePath`s.
    public static func installAsync(_ package: FilePath, to destination: FilePath, policy: TrustPolicy,
                                    options: InstallOptions = InstallOptions()) async throws -> InstallReport {
        try await installAsync(package.string, to: destination.string, policy: policy, options: options)
    }

    /// Downloads the package at `url` and installs it at `destination`, blocking.
    public static func install(downloading url: URL, to destination: FilePath, policy: TrustPolicy,
                               options: InstallOptions = InstallOptions(),
                               download: DownloadOptions = DownloadOptions()) throws -> InstallReport {
        try install(downloading: url.absoluteString, to: destination.string, policy: policy, options: options, download: download)
    }

    /// Downloads the package at `url` and installs it at `destination`, on a thread of its own;
    /// cancellable as `installAsync(downloading:to:policy:options:download:)` is.
    public static func installAsync(downloading url: URL, to destination: FilePath, policy: TrustPolicy,
                                    options: InstallOptions = InstallOptions(),
                                    download: DownloadOptions = DownloadOptions()) async throws -> InstallReport {
        try await installAsync(downloading: url.absoluteString, to: destination.string, policy: policy, options: options, download: download)
    }
}
