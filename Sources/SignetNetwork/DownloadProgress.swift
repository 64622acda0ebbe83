import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import SystemPackage

/// Where a download is, for a progress display (``DownloadOptions/progress``).
public struct DownloadProgress: Sendable {
    /// The URL asked for.
    public let url: String
    /// Bytes of the file on disk now, those kept from an earlier attempt included.
    public let received: UInt64
    /// The file's whole size, when the server announced it.
    public let expected: UInt64?
    /// Bytes kept from an earlier, interrupted download (not downloaded by this attempt).
    public let resumedFrom: UInt64
    /// Set when an attempt failed and another follows after a pause.
    public let retry: Retry?

    package init(url: String, received: UInt64, expected: UInt64?, resumedFrom: UInt64, retry: Retry?) {
        self.url = url
        self.received = received
        self.expected = expected
        self.resumedFrom = resumedFrom
        self.retry = retry
    }

    /// A failed attempt that will be tried again.
    public struct Retry: Sendable {
        /// The attempt that comes next (2 for the first retry).
        public let attempt: Int
        /// Attempts in all (1 + `DownloadOptions.retries`).
        public let attempts: Int
        /// Seconds before it starts.
        public let delay: Double
        /// Why the last attempt failed.
        public let reason: String
    }
}
