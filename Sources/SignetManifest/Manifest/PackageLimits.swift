#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto

/// Limits applied to untrusted packages before anything is believed.
public struct PackageLimits: Sendable {
    /// Most resources a package may hold.
    public var maxFiles: Int = 50_000
    /// Most uncompressed bytes all resources may add up to.
    public var maxTotalSize: UInt64 = 16 << 30
    /// Largest allowed ratio of uncompressed to compressed size for one entry (deflate bombs).
    public var maxRatio: UInt64 = 1_000
    /// Largest manifest.
    public var maxManifestSize: UInt64 = 64 << 20

    /// The defaults.
    public init() {}

    /// Most certificates (`.signet/certs/`) a package may carry: the signer's and its chain.
    package static let maximumCertificates = 16

    /// Most zip entries a package within these limits can have: each resource and its signature
    /// (or, in a bare package, its `.sig`), directory entries (which count as files), the
    /// manifest, its signature and the certificates. Checked before anything per entry is read.
    package var maximumEntries: Int {
        let doubled = maxFiles.multipliedReportingOverflow(by: 2)
        let total = doubled.partialValue.addingReportingOverflow(3 + Self.maximumCertificates)
        return doubled.overflow || total.overflow ? Int.max : total.partialValue
    }
}
