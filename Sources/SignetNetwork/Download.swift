import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
public import SystemPackage
import SignetCore
import SignetCrypto

/// Downloads for applications: one file, resumable, under a ``TLSPolicy``.
public enum Download {
    /// Whether `argument` names an http(s) URL rather than a file.
    public static func isURL(_ argument: String) -> Bool {
        let lower = argument.lowercased()
        return lower.hasPrefix("https://") || lower.hasPrefix("http://")
    }

    /// `url` without a password, for messages.
    package static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "***"
        return components.string ?? "(a URL with credentials)"
    }

    /// What `user.signet.meta` records as a file's `source`: the URL without query and
    /// fragment (which may hold an access token); nil for URLs longer than 2 KiB.
    package static func recordedSource(_ url: String) -> String? {
        guard var components = URLComponents(string: url) else { return nil }
        components.query = nil
        components.fragment = nil
        components.user = nil
        components.password = nil
        guard let text = components.string, text.utf8.count <= 2048 else { return nil }
        return text
    }

    /// Downloads `url` to `path`: into `.NAME.signet-download` beside it (continued if an
    /// earlier call was cut short), fsynced, then renamed to `path`. When `signature` and
    /// `policy` are given, the body is hashed as it arrives and `path` appears only if the
    /// signature verifies; `label` is then given the file (before its rename), the key that
    /// signed it and the digest, to record them (the package layer writes Signet's attributes:
    /// ``/SignetPackage``'s `Download.file`).
    package static func fetch(
        _ url: String, to path: String, options: DownloadOptions, signature: [UInt8]?,
        algorithm: SignatureAlgorithm, policy: TrustPolicy?, replace: Bool = true, cancelled: CancellationFlag?,
        label: (_ file: FileDescriptor, _ signer: PublicKey, _ digest: Digest) throws -> Void
    ) throws -> DownloadResult {
        guard (signature == nil) == (policy == nil) else {
            throw SignetError(.usage, "a signature needs a trust policy to verify it with, and a trust policy a signature")
        }
        // Before a byte is fetched: an existing output is replaced only when asked.
        if !replace { try AtomicFile.refuseExisting(path, what: "the download's output") }
        let partial = Downloader.partialPath(besides: path)
        let state = HasherBox(try Digest.Hasher(algorithm.digest))
        // Hashed as it arrives only when there is a signature to check.
        let result = try Downloader.download(
            url, into: partial, options: options, cancelled: cancelled,
            body: signature == nil ? nil : { state.hasher.update($0) },
            restart: { state.hasher = try Digest.Hasher(algorithm.digest) })
        if let signature, let policy {
            let digest = try state.hasher.finalize()
            let verdict = Verifier(policy: policy).verify(signature: signature, digest: digest, algorithm: algorithm)
            guard let key = verdict.signer else {
                unlink(partial)
                var error = verdict.error(path: path) ?? SignetError(.badSignature, verdict.message, path: path)
                error.reason = "'\(url)' does not verify: \(verdict.message); nothing was written to '\(path)'"
                throw error
            }
            let file = try InputFile.open(partial, what: "download", followSymlinks: false)
            try label(file.descriptor, key, digest)
        }
        do {
            if replace {
                _ = try TemporaryFiles.guardedCall("rename") { rename(partial, path) }.get()
            } else {
                try TemporaryFiles.guarded { try AtomicFile.renameNoReplace(partial, path, what: "the download's output") }
            }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot write", path: path)
        }
        AtomicFile.syncDirectory(AtomicFile.parentDirectory(of: path))
        return DownloadResult(
            path: path, size: result.size, resumedFrom: result.resumedFrom, effectiveURL: result.effectiveURL,
            requests: result.requests, bytesReceived: result.bytesReceived)
    }

    /// Downloads `url` into a new private folder (`mkdtemp`, mode 0700) under `$TMPDIR` and
    /// returns the file's path. For reading a package without installing it (`inspect URL`);
    /// the caller removes it with ``removeTemporaryCopy(_:)``. Nothing is shared with other
    /// users or other runs: a download cut short is not continued.
    public static func temporaryCopy(of url: String, options: DownloadOptions = DownloadOptions()) throws -> String {
        try temporaryCopy(of: url, options: options, cancelled: nil)
    }

    /// ``temporaryCopy(of:options:)-850hp`` on a thread of its own; cancelling the task stops it.
    public static func temporaryCopyAsync(of url: String, options: DownloadOptions = DownloadOptions()) async throws -> String {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async { try temporaryCopy(of: url, options: options, cancelled: cancelled) }
        } onCancel: {
            cancelled.set()
        }
    }

    /// The old name of ``temporaryCopyAsync(of:options:)``.
    @available(
        *, deprecated, renamed: "temporaryCopyAsync(of:options:)",
        message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func temporaryCopy(of url: String, options: DownloadOptions = DownloadOptions()) async throws -> String {
        try await temporaryCopyAsync(of: url, options: options)
    }

    /// Removes a file `temporaryCopy(of:options:)` returned, and its private folder.
    public static func removeTemporaryCopy(_ path: String) {
        unlink(path)
        let folder = AtomicFile.parentDirectory(of: path)
        if folder.split(separator: "/").last?.hasPrefix("signet-download-") == true { rmdir(folder) }
    }

    static func temporaryCopy(of url: String, options: DownloadOptions, cancelled: CancellationFlag?) throws -> String {
        try Downloader.checkScheme(url, policy: options.tls)
        let path = try temporaryPath()
        do {
            _ = try Downloader.download(url, into: path, options: options, cancelled: cancelled, durable: false) // read at once, then removed
        } catch {
            removeTemporaryCopy(path)
            throw error
        }
        return path
    }

    /// A path for a temporary copy, in a private folder of its own under `$TMPDIR` (registered
    /// for removal on interruption); remove it with ``removeTemporaryCopy(_:)``.
    package static func temporaryPath() throws -> String {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/signet-download-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SignetError.posix(errno, "cannot create a private folder for the download in", path: base, call: "mkdtemp")
        }
        let folder = String(cString: made)
        // Removed with its contents if the process is interrupted before the caller removes it.
        _ = TemporaryFiles.register(folder, tree: true)
        return folder + "/package"
    }

    private final class HasherBox: @unchecked Sendable {
        // Used on the downloading thread only.
        var hasher: Digest.Hasher
        init(_ hasher: Digest.Hasher) { self.hasher = hasher }
    }
}
