internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive
import SignetNetwork

/// Packages on an HTTPS server, read through range requests where the server answers them: the
/// network entry points of ``PackageReader``, apart from its local reading and checks.
extension PackageReader {
    /// ``contents(of:limits:)-(String,_)`` for a package on an HTTPS server: read with range requests
    /// (only the end of the zip, its directory and the manifest), or downloaded into a private
    /// temporary folder and removed when the server does not answer ranges.
    public static func contents(
        downloading url: String, download: DownloadOptions = DownloadOptions(),
        limits: PackageLimits = PackageLimits()
    ) throws -> PackageContents {
        try remote(url, download: download) { input, headers in
            try contents(of: try ZipReader(input: input, maximumEntries: limits.maximumEntries, localHeaders: headers), limits: limits)
        }
    }

    /// ``verify(_:policy:limits:now:progress:)-(String,_,_,_,_)`` for a package on an HTTPS server, read with
    /// range requests over one connection (each pinned to the first answer's validator with
    /// `If-Range`), never stored on the device; a server that does not answer ranges gets the
    /// whole package downloaded into a private temporary folder, removed afterwards.
    public static func verify(
        downloading url: String, policy: TrustPolicy, download: DownloadOptions = DownloadOptions(),
        limits: PackageLimits = PackageLimits(), now: Timestamp = .now,
        progress handler: ProgressHandler? = nil
    ) throws -> PackageVerification {
        try remote(url, download: download) { input, headers in
            let reader = try ZipReader(input: input, maximumEntries: limits.maximumEntries, localHeaders: headers)
            // Every resource is read, in order: in requests of a few MiB, not one per read.
            (input as? RangedInput)?.plan([0..<input.size])
            return try verify(reader: reader, policy: policy, limits: limits, now: now, progress: handler)
        }
    }

    /// Runs `body` on the package at `url` read through ranges, else on a downloaded copy.
    /// Local headers are checked as their entries are read when the package is read through
    /// ranges (reading all of them would fetch the whole file), up front on a downloaded copy.
    private static func remote<R>(
        _ url: String, download: DownloadOptions,
        _ body: (any ArchiveInput, CentralDirectory.LocalHeaders) throws -> R
    ) throws -> R {
        try Downloader.checkScheme(url, policy: download.tls)
        // Where the package goes if the server sends it whole (the first answer is then used).
        let copy = try Download.temporaryPath()
        defer { Download.removeTemporaryCopy(copy) }
        let input: RangedInput
        do {
            input = try RangedInput(url: url, options: download, whole: .init(partial: copy, options: download, cancelled: nil, body: nil, restart: {}))
        } catch let unsupported as RangeClient.Unsupported {
            if unsupported.download == nil {
                _ = try Downloader.download(url, into: copy, options: download, durable: false)
            }
            let file = try InputFile.open(copy, what: "package")
            return try body(RenamedInput(file, path: Download.redacted(url)), .upFront)
        }
        return try body(input, .deferred)
    }
}
