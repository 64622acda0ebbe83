import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import SystemPackage
import SignetCore

/// How a download behaves on the network (FORMAT.md §5).
public struct DownloadOptions: Sendable {
    /// Which servers are trusted.
    public var tls = TLSPolicy()
    /// Largest body accepted, in bytes (`--max-download-size`); more is refused (exit 4).
    public var maxSize: UInt64 = 16 << 30
    /// Seconds to wait for a connection (`--connect-timeout`).
    public var connectTimeout: Int = 30
    /// A transfer slower than 1 KiB/s for this many seconds is given up (`--low-speed-time`).
    public var lowSpeedTime: Int = 60
    /// Seconds a whole download may take, every attempt and pause included (`--max-time`,
    /// default one day): a trickle just above the low-speed limit does not run for months.
    /// What arrived is kept and continued by the next call.
    public var maxTime: Double = 86_400
    /// Further attempts after a transient failure (connection reset or refused, time-out, a
    /// body cut short, HTTP 5xx); never after HTTP 4xx or a TLS refusal (`--retries`).
    public var retries: Int = 3
    /// Seconds before the first retry; doubled for each next one, at most 30 (`--retry-delay`).
    public var retryDelay: Double = 1
    /// Seconds to wait for another process that is downloading into the same partial file
    /// (`--wait`), before giving up with `.destinationBusy` (exit 5).
    public var wait: Double = 10
    /// Read packages with HTTP range requests where the server answers them (`inspect` and
    /// `unpack` of a URL: only what is needed is fetched, nothing of the package is stored);
    /// false downloads the whole package first (`--full-download`). Single files (`fetch`)
    /// are always downloaded whole.
    public var ranges: Bool = true
    /// Redirects followed, each to https:// only and each under the same TLS policy.
    public static let maximumRedirects = 5
    /// Called on the downloading thread as bytes arrive (at most ten times a second, and once
    /// when the body is complete) and before each retry. Keep it short: the transfer waits.
    public var progress: (@Sendable (DownloadProgress) -> Void)? = nil

    /// The length signed metadata states for the file (a TUF target's `length`, a channel
    /// index's `size`): ``maxSize`` is lowered to it, and a server that sends more is stopped at
    /// the first byte over, as a mismatch with what was signed (`.indexMismatch`).
    package var signedLength: UInt64? = nil {
        didSet { if let signedLength { maxSize = min(maxSize, signedLength) } }
    }

    /// The error for a body larger than allowed: the signed length, else `--max-download-size`.
    func tooLarge(_ url: String, path: String?) -> SignetError {
        if let signedLength, signedLength <= maxSize {
            return SignetError(
                .indexMismatch,
                "'\(Download.redacted(url))' sends more than the \(signedLength) bytes its signed metadata states for it: stopped at the first byte over. Nothing was installed",
                path: path ?? url)
        }
        return SignetError(
            .downloadTooLarge, "'\(Download.redacted(url))' is larger than \(maxSize) bytes (--max-download-size); refusing to download more", path: path ?? url
        )
    }

    /// The defaults.
    public init() {}
}
