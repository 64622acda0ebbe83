import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import SystemPackage

/// What a download did.
public struct DownloadResult: Sendable {
    /// The complete file (the partial download's path).
    public let path: String
    /// Its size in bytes.
    public let size: UInt64
    /// Bytes that were already on disk from an earlier, interrupted download and were kept.
    public let resumedFrom: UInt64
    /// The URL the body came from after redirects.
    public let effectiveURL: String
    /// Requests made: one per attempt (retries included).
    public let requests: Int
    /// Body bytes received over every attempt: what the server sent, which may be more than
    /// ``size`` when an attempt was cut and the next one started over.
    public let bytesReceived: UInt64
}
