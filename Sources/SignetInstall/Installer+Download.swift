import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetArchive
import SignetNetwork
import SignetPackage

extension Installer {
    /// Installs the package at `url` (https://) at `destination`, verified exactly as
    /// ``install(_:to:policy:options:)-(String,_,_,_)``.
    ///
    /// Where the server answers range requests (and `download.ranges` is on), the package is
    /// read in place (FORMAT.md §5, "Updates over range requests"): its directory and manifest
    /// first, which must verify before any resource is asked for; every file whose path, size
    /// and SHA-256 equal a file of the installed tree is copied from it and hashed as it is
    /// copied; only the others are fetched, streamed into the staging directory. Nothing of the
    /// package is stored. What an interrupted run staged is taken over by the next one, and a
    /// package replaced on the server mid-way is read again from the start, once
    /// (`.packageChanged` the second time). ``InstallReport/transfer`` says what moved; the
    /// progress handler counts the planned bytes.
    ///
    /// Otherwise the package is downloaded into `.DIR.signet-download` beside `destination`
    /// (the same filesystem; a download cut short continues from there on the next call) and
    /// installed from it; a complete download is removed whether the package installed or was
    /// refused. Each installed file's `user.signet.meta` records `url` as its `source` (without
    /// query or fragment).
    public static func install(
        downloading url: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions = InstallOptions(),
        download: DownloadOptions = DownloadOptions()
    ) throws -> InstallReport {
        try install(downloading: url, to: destination, policy: policy, options: options, download: download, cancelled: nil)
    }

    /// `install(downloading:to:policy:options:download:)` on a thread of its own; cancelling
    /// the task stops the transfer (a full download's partial file is kept for the next call)
    /// and throws `CancellationError`, with the destination as it was. Once everything is
    /// fetched and verified, the installation itself runs to its end, so that DIR is never
    /// left between the old tree and the new one.
    public static func installAsync(
        downloading url: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions = InstallOptions(),
        download: DownloadOptions = DownloadOptions()
    ) async throws -> InstallReport {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async {
                try install(downloading: url, to: destination, policy: policy, options: options, download: download, cancelled: cancelled)
            }
        } onCancel: {
            cancelled.set()
        }
    }

    /// The old name of ``installAsync(downloading:to:policy:options:download:)-(String,_,_,_,_)``.
    @available(
        *, deprecated, renamed: "installAsync(downloading:to:policy:options:download:)",
        message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func install(
        downloading url: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions = InstallOptions(),
        download: DownloadOptions = DownloadOptions()
    ) async throws -> InstallReport {
        try await installAsync(downloading: url, to: destination, policy: policy, options: options, download: download)
    }

    package static func install(
        downloading url: String, to destination: String, policy: TrustPolicy,
        options: InstallOptions, download: DownloadOptions, cancelled: CancellationFlag?
    ) throws -> InstallReport {
        try Downloader.checkScheme(url, policy: download.tls)
        let destination = try normalizedDestination(destination)
        try Paths.createDirectories(AtomicFile.parentDirectory(of: destination), mode: 0o755, what: "directory")
        // DIR's lock first, for the download too: a second update of DIR waits (--wait) and is
        // told which process holds it, as for a local package.
        let lock = try DestinationLock(destination, wait: options.wait)
        defer { lock.release() }
        return try install(
            downloading: url, to: destination, policy: policy, options: options, download: download,
            cancelled: cancelled, holding: lock)
    }

    /// The same with DIR's lock already held (`lockDestination(_:wait:)`) and `destination` as
    /// that returned it: an update decides and installs under one lock.
    package static func install(
        downloading url: String, to destination: String, policy: TrustPolicy, options: InstallOptions,
        download: DownloadOptions, cancelled: CancellationFlag?, holding lock: DestinationLock
    ) throws -> InstallReport {
        try Downloader.checkScheme(url, policy: download.tls)
        options.phase?(.download)
        var options = try requireLogged(url, options: options, download: download)
        options.source = Download.recordedSource(url)
        let partial = Downloader.partialPath(besides: destination)
        var download = download
        download.wait = min(download.wait, options.wait)
        // A package that signed metadata binds (a TUF target) is never
        // received past its signed length, whole or by ranges.
        if let expected = options.expectedPackage { download.signedLength = expected.size }
        // Not fsynced: the download is read at once and removed. After a power cut, what is on
        // disk of it may be incomplete; it is then continued or downloaded anew, and verified
        // before anything is installed, so the worst case is a second download.
        // A package signed metadata binds is hashed as it arrives: its size and SHA-256 must be
        // the metadata's before it is opened.
        var hashing = try options.expectedPackage.map { _ in try Digest.Hasher(.sha256) }
        let binds = hashing != nil
        let full = Downloader.FullDownload(
            partial: partial, options: download, cancelled: cancelled,
            body: binds ? { hashing?.update($0) } : nil,
            restart: { if binds { hashing = try Digest.Hasher(.sha256) } })
        // What the range requests before the full download cost (every pass is reported).
        var earlier = (requests: 0, bytes: UInt64(0))
        var whole: DownloadResult? = nil
        // Outside every maintenance window now, a package that would be downloaded whole (a
        // server without ranges, --full-download) is not downloaded at all: kept nowhere, it would
        // be fetched and thrown away at every run until a window opens (FORMAT §7). The
        // ranged path stages it and keeps it for the window, so it goes on.
        let windowClosed = !options.windows.isEmpty && !options.windows.contains { $0.contains(options.clock()) }
        if download.ranges, !options.bare {
            // Read in place with range requests: only what the installed tree lacks is fetched.
            do {
                return try installRanged(
                    url, to: destination, policy: policy, options: options, download: download,
                    full: windowClosed ? nil : full, cancelled: cancelled)
            } catch let unsupported as RangeClient.Unsupported {
                // The server does not answer ranges: the whole package, as below (already
                // downloaded when the first request's answer was the whole package).
                earlier = (unsupported.requests, unsupported.bytesReceived)
                whole = unsupported.download
            }
        }
        if whole == nil, windowClosed {
            throw SignetError(
                .installDeferred,
                "outside the maintenance window (\(options.windows.map(\.description).joined(separator: "; "))): the package would be downloaded whole (\(download.ranges ? "the server answers no range requests" : "--full-download")), so it is not downloaded until a window opens",
                path: destination)
        }
        let result =
            try whole
            ?? Downloader.download(
                url, into: partial, options: download, cancelled: cancelled, durable: false,
                body: full.body, restart: full.restart)
        defer { unlink(partial) }
        if let expected = options.expectedPackage, let hashing {
            let digest = try hashing.finalize()
            guard result.size == expected.size, digest.matches(hex: expected.sha256) else {
                throw loggedRefusal(
                    SignetError(
                        .indexMismatch,
                        "the package at '\(Download.redacted(url))' is \(result.size) bytes with SHA-256 \(digest.hex); its signed metadata binds \(expected.size) bytes with SHA-256 \(expected.sha256). Nothing was installed",
                        path: url), options: options)
            }
        }
        var report: InstallReport
        do {
            report = try install(partial, to: destination, policy: policy, options: options, holding: lock)
        } catch var error as SignetError {
            // The user gave a URL: a refusal names it, not the download kept beside DIR.
            let shown = Download.redacted(url)
            if error.path == partial { error.path = shown }
            error.reason = error.reason.replacingOccurrences(of: partial, with: shown)
            throw error
        }
        let files = report.manifest?.files ?? []
        let bytes = files.reduce(0) { $0 &+ $1.size }
        // The first request's answer, when it was the whole package, is counted once.
        let requests = earlier.requests + (whole == nil ? result.requests : 0)
        report.transfer = TransferReport(
            mode: .full, bytesDownloaded: earlier.bytes + result.bytesReceived, requests: requests, filesFetched: report.files.count,
            filesReused: 0, filesResumed: 0, bytesFetched: bytes, bytesTotal: bytes, packageSize: result.size)
        return report
    }

    /// ``install(downloading:to:policy:options:download:)`` over range requests (DIR locked).
    /// Throws ``/SignetNetwork/RangeClient/Unsupported`` before anything is fetched but the end of the package
    /// when the server does not answer ranges.
    private static func installRanged(
        _ url: String, to destination: String, policy: TrustPolicy, options: InstallOptions,
        download: DownloadOptions, full: Downloader.FullDownload?, cancelled: CancellationFlag?
    ) throws -> InstallReport {
        // What earlier runs left staged (killed, or their link dropped) is taken for its files,
        // which move into this run's staging tree; what this run staged is left for the next
        // one when its link drops too (or the package keeps changing on the server).
        let leftovers = StagedLeftovers(destination: destination)
        var adopted = false
        do {
            // A package replaced on the server while it is read is refused by the server's
            // answer (If-Range); the update then starts once more from the start, on the new one.
            // Every pass is reported: the first attempt's requests too.
            var earlier = (requests: 0, bytes: UInt64(0))
            for attempt in 1...2 {
                let input: RangedInput
                do {
                    input = try RangedInput(url: url, options: download, cancelled: cancelled, whole: full)
                } catch var unsupported as RangeClient.Unsupported {
                    unsupported.requests += earlier.requests
                    unsupported.bytesReceived &+= earlier.bytes
                    throw unsupported
                }
                if !adopted {
                    leftovers.adopt()
                    adopted = true
                }
                let update = RangedUpdate(input: input, destination: destination, leftovers: leftovers, earlier: earlier)
                do {
                    let report = try installRanged(input, update: update, to: destination, policy: policy, options: options, download: download)
                    leftovers.remove()
                    return report
                } catch let failure as SignetError where failure.code == .packageChanged && attempt == 1 {
                    earlier = (earlier.requests + input.requests, earlier.bytes &+ input.bytesReceived)
                    continue
                } catch let failure as SignetError where failure.code.exitStatus == .verificationFailed && attempt == 1 && input.preloaded > 0 {
                    // Bytes a killed run journalled (a power cut may leave a file's last block
                    // unwritten) did not verify: once more from the server alone, never installed.
                    earlier = (earlier.requests + input.requests, earlier.bytes &+ input.bytesReceived)
                    continue
                }
            }
            throw SignetError(.packageChanged, "not reached")
        } catch let failure as SignetError
            where failure.code == .network || failure.code == .packageChanged || failure.code == .installDeferred || failure.code == .interrupted
        {
            leftovers.keep()
            throw failure
        } catch {
            leftovers.remove()
            throw error
        }
    }

    private static func installRanged(
        _ input: RangedInput, update: RangedUpdate, to destination: String, policy: TrustPolicy,
        options: InstallOptions, download: DownloadOptions
    ) throws -> InstallReport {
        let url = input.url
        let stale = TemporaryFiles.removeStale(besides: destination)
        let state = try DestinationState.inspect(destination, force: options.force)
        var reader = try ZipReader(input: input, maximumEntries: options.limits.maximumEntries, localHeaders: .deferred)
        if EncryptedPackage.isEncrypted(reader) {
            // Encrypted (FORMAT §8): the signed package inside is read through its records,
            // each authenticated as it arrives; what the update plans becomes the records that
            // hold it.
            guard let key = options.decryptionKey else {
                throw SignetError(
                    .notARecipient, "'\(input.path)' is encrypted; give the device's key with --decryption-key (nothing was installed)", path: input.path)
            }
            update.archive = try EncryptedPackage.rangedInput(reader, ranged: input, with: key)
            reader = try ZipReader(input: update.archive, maximumEntries: options.limits.maximumEntries, localHeaders: .deferred)
        }
        if let progress = download.progress {
            // The bytes of the planned requests: what the progress line counts to.
            let started = DispatchTime.now().uptimeNanoseconds
            var last: UInt64 = 0
            var received: UInt64 = 0
            // Weakly: the input holds this closure, and the update holds the input.
            input.received = { [weak update] count in
                received &+= UInt64(count)
                let now = DispatchTime.now().uptimeNanoseconds
                guard now &- last >= 100_000_000 || now &- started < 1 else { return }
                last = now
                progress(DownloadProgress(url: url, received: received, expected: update?.plannedBytes.map { max($0, received) }, resumedFrom: 0, retry: nil))
            }
        }
        defer { input.received = nil }
        return try sayingRoom(reader, destination) {
            try install(
                reader: reader, package: input.path, to: destination, state: state, stale: stale, policy: policy,
                options: options, ranged: update)
        }
    }
}
